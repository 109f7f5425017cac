//! Runs futures concurrently on the current task and collects their outputs in order.

use std::future::{Future, poll_fn};
use std::pin::Pin;
use std::task::Poll;

/// Awaits every future, polling them together; outputs are in input order.
pub(crate) async fn join_all<F: Future>(futures: impl IntoIterator<Item = F>) -> Vec<F::Output> {
    let mut futures: Vec<Pin<Box<F>>> = futures.into_iter().map(Box::pin).collect();
    let mut outputs: Vec<Option<F::Output>> = futures.iter().map(|_| None).collect();
    poll_fn(|cx| {
        let mut waiting = false;
        for (future, output) in futures.iter_mut().zip(outputs.iter_mut()) {
            if output.is_none() {
                match future.as_mut().poll(cx) {
                    Poll::Ready(v) => *output = Some(v),
                    Poll::Pending => waiting = true,
                }
            }
        }
        if waiting {
            Poll::Pending
        } else {
            Poll::Ready(())
        }
    })
    .await;
    outputs
        .into_iter()
        .map(|o| o.expect("every future completed"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test(start_paused = true)]
    async fn runs_concurrently_and_keeps_order() {
        let started = tokio::time::Instant::now();
        let out = join_all((0..5u64).map(|i| async move {
            tokio::time::sleep(Duration::from_millis(100 * (5 - i))).await;
            i
        }))
        .await;
        assert_eq!(out, vec![0, 1, 2, 3, 4]);
        assert_eq!(started.elapsed(), Duration::from_millis(500));
        assert!(
            join_all(Vec::<std::future::Ready<()>>::new())
                .await
                .is_empty()
        );
    }
}
