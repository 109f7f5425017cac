//! The bench's progress bar on stderr (hidden when stderr is not a terminal). Workers only bump
//! an atomic counter; a ticker task moves the bar, so drawing never slows the measured path.

use std::io::IsTerminal;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::workload::Stop;

const TICK: Duration = Duration::from_millis(100);

fn bar(len: Option<u64>) -> ProgressBar {
    let target = if std::io::stderr().is_terminal() {
        ProgressDrawTarget::stderr()
    } else {
        ProgressDrawTarget::hidden()
    };
    match len {
        Some(len) => ProgressBar::with_draw_target(Some(len), target),
        None => ProgressBar::with_draw_target(None, target),
    }
}

/// A spinner while the key space is stored before a read benchmark.
pub fn populating(label: &str, keys: usize) -> ProgressBar {
    let spinner = bar(None);
    spinner.set_style(
        ProgressStyle::with_template("{spinner} {msg} {elapsed}").expect("valid template"),
    );
    spinner.set_message(format!("{label}: storing {keys} keys first"));
    spinner.enable_steady_tick(TICK);
    spinner
}

/// The bar of one timed run.
pub struct Display {
    done: Arc<AtomicU64>,
    bar: ProgressBar,
    ticker: JoinHandle<()>,
}

impl Display {
    pub fn start(label: &str, stop: Stop) -> Display {
        let done = Arc::new(AtomicU64::new(0));
        let (bar, template) = match stop {
            Stop::After(d) => (
                bar(Some(d.as_millis().try_into().unwrap_or(u64::MAX))),
                "{msg} [{bar:30}] {elapsed}/{duration}",
            ),
            Stop::Count(n) => (bar(Some(n)), "{msg} [{bar:30}] {pos}/{len} ops eta {eta}"),
        };
        bar.set_style(
            ProgressStyle::with_template(template)
                .expect("valid template")
                .progress_chars("=> "),
        );
        bar.set_message(label.to_owned());
        let ticker = tokio::spawn(tick(bar.clone(), Arc::clone(&done), stop, label.to_owned()));
        Display { done, bar, ticker }
    }

    /// What workers add finished items to.
    pub fn counter(&self) -> Arc<AtomicU64> {
        Arc::clone(&self.done)
    }

    pub async fn finish(self) {
        self.ticker.abort();
        let _ = self.ticker.await;
        self.bar.finish_and_clear();
    }
}

async fn tick(bar: ProgressBar, done: Arc<AtomicU64>, stop: Stop, label: String) {
    let started = Instant::now();
    let mut interval = tokio::time::interval(TICK);
    loop {
        interval.tick().await;
        let items = done.load(Ordering::Relaxed);
        match stop {
            Stop::After(_) => {
                let elapsed = started.elapsed();
                bar.set_position(elapsed.as_millis().try_into().unwrap_or(u64::MAX));
                let rate = items as f64 / elapsed.as_secs_f64().max(1e-3);
                bar.set_message(format!("{label} {items} ops ({rate:.0}/s)"));
            }
            Stop::Count(_) => bar.set_position(items),
        }
    }
}
