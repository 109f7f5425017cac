//! Progress display for large values, on stderr and only when stderr is a terminal.

use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// Values at or below this size move without a progress display.
pub const THRESHOLD: u64 = 8 << 20;

/// A progress bar (or nothing, for small values and non-terminals).
pub struct Progress(Option<ProgressBar>);

impl Progress {
    /// A bar over `len` bytes labelled `verb`; hidden when `len` is small or stderr is not a
    /// terminal. A `len` of 0 means unknown (standard input): a byte counter instead.
    pub fn transfer(len: u64, verb: &str) -> Progress {
        if !std::io::stderr().is_terminal() || (len != 0 && len <= THRESHOLD) {
            return Progress(None);
        }
        let bar = if len == 0 {
            let bar = ProgressBar::new_spinner();
            bar.set_style(
                ProgressStyle::with_template("{spinner} {msg} {bytes} ({bytes_per_sec})")
                    .expect("valid template"),
            );
            bar
        } else {
            let bar = ProgressBar::new(len);
            bar.set_style(
                ProgressStyle::with_template(
                    "{msg:9} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} eta {eta}",
                )
                .expect("valid template")
                .progress_chars("=> "),
            );
            bar
        };
        bar.set_draw_target(ProgressDrawTarget::stderr());
        bar.set_message(verb.to_owned());
        bar.enable_steady_tick(Duration::from_millis(200));
        Progress(Some(bar))
    }

    /// A spinner for a step whose progress cannot be observed (the network transfer of a
    /// large value), shown under the same conditions as [`Progress::transfer`].
    pub fn spinner(len: u64, message: String) -> Progress {
        if !std::io::stderr().is_terminal() || len <= THRESHOLD {
            return Progress(None);
        }
        let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
        bar.set_style(
            ProgressStyle::with_template("{spinner} {msg} {elapsed}").expect("valid template"),
        );
        bar.set_message(message);
        bar.enable_steady_tick(Duration::from_millis(100));
        Progress(Some(bar))
    }

    pub fn advance(&self, bytes: u64) {
        if let Some(bar) = &self.0 {
            bar.inc(bytes);
        }
    }

    pub fn finish(&self) {
        if let Some(bar) = &self.0 {
            bar.finish_and_clear();
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.finish();
    }
}
