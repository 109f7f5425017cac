//! Export failures in the server's log. The SDK reports them only through its `internal-logs`
//! feature, which the workspace leaves off (it would also log the SDK's own debug chatter and
//! every failed span batch); without it a collector that is down, or a wrong port, is silent.
//! Each exporter is wrapped instead, and its failures are logged here, naming the URL.
//!
//! Metrics fail at most once per export interval, so each failure is logged. Span batches go
//! out as often as `OTEL_BSP_*` says (every 5 s, or sooner under load): their failures are
//! logged at most once per metrics export interval, with the count of those not logged.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::metrics::Temporality;
use opentelemetry_sdk::metrics::data::ResourceMetrics;
use opentelemetry_sdk::metrics::exporter::PushMetricExporter;
use opentelemetry_sdk::trace::{SpanData, SpanExporter};

/// The interval the SDK's periodic reader exports metrics at, read as the SDK reads it.
pub(super) fn metric_export_interval() -> Duration {
    std::env::var(opentelemetry_sdk::metrics::OTEL_METRIC_EXPORT_INTERVAL)
        .ok()
        .and_then(|v| v.parse().map(Duration::from_millis).ok())
        .unwrap_or(opentelemetry_sdk::metrics::OTEL_METRIC_EXPORT_INTERVAL_DEFAULT)
}

/// Decides which export results are logged, for one signal towards one URL.
#[derive(Debug)]
struct Reporter {
    signal: &'static str,
    url: String,
    /// The least time between two warnings of one run of failures.
    quiet: Duration,
    state: Mutex<Streak>,
}

#[derive(Debug, Default)]
struct Streak {
    failing: bool,
    last_warned: Option<Instant>,
    /// Failures since the last warning, not logged.
    unlogged: u64,
}

impl Reporter {
    fn new(signal: &'static str, url: String, quiet: Duration) -> Self {
        Self {
            signal,
            url,
            quiet,
            state: Mutex::default(),
        }
    }

    fn report(&self, result: &OTelSdkResult) {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        match result {
            Ok(()) => {
                if s.failing {
                    tracing::info!(url = %self.url, "OTLP {} export works again", self.signal);
                }
                *s = Streak::default();
            }
            Err(error) => {
                let due = s.last_warned.is_none_or(|at| at.elapsed() >= self.quiet);
                if !s.failing || due {
                    tracing::warn!(
                        url = %self.url,
                        %error,
                        not_logged = s.unlogged,
                        "OTLP {} export failed (is the collector up and listening there?); \
                         what it held is dropped and the next export tries again",
                        self.signal
                    );
                    s.last_warned = Some(Instant::now());
                    s.unlogged = 0;
                } else {
                    s.unlogged += 1;
                }
                s.failing = true;
            }
        }
    }
}

/// A metrics exporter whose failures are logged.
#[derive(Debug)]
pub(super) struct ReportedMetrics<E> {
    inner: E,
    reporter: Reporter,
}

impl<E> ReportedMetrics<E> {
    pub(super) fn new(inner: E, url: String) -> Self {
        Self {
            inner,
            reporter: Reporter::new("metrics", url, Duration::ZERO),
        }
    }
}

impl<E: PushMetricExporter> PushMetricExporter for ReportedMetrics<E> {
    async fn export(&self, metrics: &ResourceMetrics) -> OTelSdkResult {
        let result = self.inner.export(metrics).await;
        self.reporter.report(&result);
        result
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn temporality(&self) -> Temporality {
        self.inner.temporality()
    }
}

/// A span exporter whose failures are logged, at most once per `quiet`.
#[derive(Debug)]
pub(super) struct ReportedSpans<E> {
    inner: E,
    reporter: Reporter,
}

impl<E> ReportedSpans<E> {
    pub(super) fn new(inner: E, url: String, quiet: Duration) -> Self {
        Self {
            inner,
            reporter: Reporter::new("traces", url, quiet),
        }
    }
}

impl<E: SpanExporter> SpanExporter for ReportedSpans<E> {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let result = self.inner.export(batch).await;
        self.reporter.report(&result);
        result
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &opentelemetry_sdk::Resource) {
        self.inner.set_resource(resource);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry_sdk::error::OTelSdkError;

    fn failed() -> OTelSdkResult {
        Err(OTelSdkError::InternalFailure("connection refused".into()))
    }

    #[test]
    fn a_run_of_failures_is_logged_once_per_quiet_period_and_recovery_resets_it() {
        let r = Reporter::new("traces", "http://c:4318/v1/traces".into(), Duration::MAX);
        r.report(&failed());
        r.report(&failed());
        r.report(&failed());
        {
            let s = r.state.lock().unwrap();
            assert!(s.failing && s.last_warned.is_some());
            assert_eq!(s.unlogged, 2);
        }
        r.report(&Ok(()));
        r.report(&failed());
        let s = r.state.lock().unwrap();
        assert_eq!(s.unlogged, 0, "the first failure after a success is logged");
    }

    #[test]
    fn with_no_quiet_period_every_failure_is_logged() {
        let r = Reporter::new("metrics", "http://c:4318/v1/metrics".into(), Duration::ZERO);
        for _ in 0..3 {
            r.report(&failed());
        }
        assert_eq!(r.state.lock().unwrap().unlogged, 0);
    }
}
