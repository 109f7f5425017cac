//! OpenTelemetry export of the server's metrics and operation traces over OTLP (HTTP +
//! protobuf), on when `MEMKV_OTEL_ENDPOINT` is set (MemKV's name).
//!
//! Every metric memkv records goes through the `metrics` facade. With an endpoint set, the
//! process-wide recorder is a fan-out: each counter, gauge and histogram handle feeds both the
//! Prometheus recorder behind `/v1/metrics` and an OpenTelemetry instrument of the same name,
//! description, unit and labels (as attributes), which the SDK's periodic reader exports.
//! One recording site serves both exports, so they cannot disagree, and metrics recorded by
//! other crates in the process (the RDMA data path's) are exported too. Without an endpoint
//! the Prometheus recorder is installed alone and nothing here runs.
//!
//! `MEMKV_OTEL_ENDPOINT` is the collector's base URL (`http://collector:4318`); metrics go to
//! its `/v1/metrics` (a URL that already ends in `/v1/metrics` is used as it is). The export
//! interval is the SDK's `OTEL_METRIC_EXPORT_INTERVAL` (milliseconds, default 60000); the
//! other `OTEL_EXPORTER_OTLP_*` variables (headers, timeout) apply as the SDK defines them.
//!
//! Traces: one span per served operation (named after its opcode; transport, status and
//! value bytes as attributes; its real start and end), to the collector's `/v1/traces`.
//! Sampled: 1% of operations unless `OTEL_TRACES_SAMPLER` (and `_ARG`) choose otherwise;
//! batched by the SDK (`OTEL_BSP_*`).
//!
//! Failed exports are logged (`reporting.rs`), naming the URL.

mod reporting;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use metrics::{
    Counter, CounterFn, Gauge, GaugeFn, Histogram, HistogramFn, Key, KeyName, Metadata, Recorder,
    SharedString, Unit,
};
use metrics_util::registry::{Registry, Storage};
use opentelemetry::KeyValue;
use opentelemetry::metrics::{Meter, MeterProvider as _};
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::metrics::SdkMeterProvider;

/// The environment variable naming the OTLP collector (MemKV's name).
pub const ENDPOINT_ENV: &str = "MEMKV_OTEL_ENDPOINT";

static PROVIDER: OnceLock<SdkMeterProvider> = OnceLock::new();
static TRACER_PROVIDER: OnceLock<opentelemetry_sdk::trace::SdkTracerProvider> = OnceLock::new();
static TRACER: OnceLock<opentelemetry_sdk::trace::SdkTracer> = OnceLock::new();

/// The share of operations traced when `OTEL_TRACES_SAMPLER` is not set.
pub const DEFAULT_TRACE_RATIO: f64 = 0.01;

/// The metrics URL for a collector base URL.
pub fn metrics_url(endpoint: &str) -> String {
    signal_url(endpoint, "/v1/metrics")
}

/// The traces URL for a collector base URL (or for its metrics URL).
pub fn traces_url(endpoint: &str) -> String {
    let base = endpoint.trim().trim_end_matches('/');
    signal_url(
        base.strip_suffix("/v1/metrics").unwrap_or(base),
        "/v1/traces",
    )
}

fn signal_url(endpoint: &str, path: &str) -> String {
    let base = endpoint.trim().trim_end_matches('/');
    if base.ends_with(path) {
        base.to_owned()
    } else {
        format!("{base}{path}")
    }
}

/// Records one served operation as a span (when tracing is on and the sampler picks it).
pub fn record_operation(
    op: &'static str,
    transport: &'static str,
    status: &'static str,
    duration: std::time::Duration,
    bytes_in: u64,
    bytes_out: u64,
) {
    use opentelemetry::trace::{Span as _, SpanKind, Tracer as _};
    let Some(tracer) = TRACER.get() else {
        return;
    };
    let end = std::time::SystemTime::now();
    let mut span = tracer
        .span_builder(op)
        .with_kind(SpanKind::Server)
        .with_start_time(end - duration)
        .with_attributes([
            KeyValue::new("memkv.transport", transport),
            KeyValue::new("memkv.status", status),
            KeyValue::new("memkv.bytes_in", bytes_in as i64),
            KeyValue::new("memkv.bytes_out", bytes_out as i64),
        ])
        .start(tracer);
    span.end_with_timestamp(end);
}

fn tracing_pipeline(endpoint: &str, resource: opentelemetry_sdk::Resource) -> Result<(), String> {
    use opentelemetry::trace::TracerProvider as _;
    let url = traces_url(endpoint);
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
        .with_endpoint(url.clone())
        .build()
        .map_err(|e| format!("{ENDPOINT_ENV}={endpoint}: {e}"))?;
    let exporter =
        reporting::ReportedSpans::new(exporter, url.clone(), reporting::metric_export_interval());
    let mut builder = opentelemetry_sdk::trace::SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(resource);
    if std::env::var_os("OTEL_TRACES_SAMPLER").is_none() {
        builder = builder.with_sampler(opentelemetry_sdk::trace::Sampler::TraceIdRatioBased(
            DEFAULT_TRACE_RATIO,
        ));
    }
    let provider = builder.build();
    let _ = TRACER.set(provider.tracer("memkv"));
    let _ = TRACER_PROVIDER.set(provider);
    tracing::info!(url, "exporting operation traces over OTLP (HTTP, protobuf)");
    Ok(())
}

/// The OTLP pipeline: instruments on a meter whose provider exports periodically.
pub struct Exporting {
    otel: Registry<Key, OtelStorage>,
}

/// Builds the OTLP pipeline towards `endpoint`; [`FanOut::new`] then feeds it.
pub fn exporting(endpoint: &str) -> Result<Exporting, String> {
    plain_http(endpoint)?;
    let url = metrics_url(endpoint);
    let exporter = opentelemetry_otlp::MetricExporter::builder()
        .with_http()
        .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
        .with_endpoint(url.clone())
        .build()
        .map_err(|e| format!("{ENDPOINT_ENV}={endpoint}: {e}"))?;
    let exporter = reporting::ReportedMetrics::new(exporter, url.clone());
    let resource = opentelemetry_sdk::Resource::builder()
        .with_service_name("memkv")
        .with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")))
        .build();
    let provider = SdkMeterProvider::builder()
        .with_periodic_exporter(exporter)
        .with_resource(resource.clone())
        .build();
    tracing_pipeline(endpoint, resource)?;
    let meter = provider.meter("memkv");
    let _ = PROVIDER.set(provider);
    tracing::info!(url, "exporting metrics over OTLP (HTTP, protobuf)");
    Ok(Exporting {
        otel: Registry::new(OtelStorage {
            meter,
            descriptions: Mutex::default(),
            instruments: Mutex::default(),
        }),
    })
}

/// Refuses an endpoint the exporter cannot reach: its HTTP client is built without TLS (a
/// smaller build, and collectors run on the node or as a sidecar), so an `https://` URL would
/// be taken, and every export would then fail.
fn plain_http(endpoint: &str) -> Result<(), String> {
    let expected =
        "expected the collector's plain http:// base URL, e.g. http://otel-collector:4318";
    let Some((scheme, rest)) = endpoint.trim().split_once("://") else {
        return Err(format!(
            "{ENDPOINT_ENV}={endpoint} is not a URL: {expected}"
        ));
    };
    if scheme.eq_ignore_ascii_case("https") {
        return Err(format!(
            "{ENDPOINT_ENV}={endpoint}: https is not supported (the OTLP exporter is built without TLS); {expected}, on the node or a sidecar"
        ));
    }
    if !scheme.eq_ignore_ascii_case("http") {
        return Err(format!(
            "{ENDPOINT_ENV}={endpoint}: scheme {scheme:?} is not supported; {expected}"
        ));
    }
    if rest.is_empty() || rest.starts_with(['/', ':']) {
        return Err(format!(
            "{ENDPOINT_ENV}={endpoint} names no host: {expected}"
        ));
    }
    Ok(())
}

/// Exports what has been recorded since the last export, then stops the exporter. Call once
/// when the server stops; a no-op when OTLP export is off.
pub fn shutdown() {
    if let Some(provider) = TRACER_PROVIDER.get() {
        if let Err(e) = provider.shutdown() {
            tracing::warn!(error = %e, "OTLP trace exporter did not shut down cleanly");
        }
    }
    if let Some(provider) = PROVIDER.get() {
        if let Err(e) = provider.shutdown() {
            tracing::warn!(error = %e, "OTLP metrics exporter did not shut down cleanly");
        }
    }
}

/// The `metrics` recorder that feeds `inner` and OpenTelemetry instruments.
pub struct FanOut<R> {
    inner: R,
    otel: Registry<Key, OtelStorage>,
}

impl<R: Recorder> FanOut<R> {
    pub fn new(inner: R, exporting: Exporting) -> FanOut<R> {
        FanOut {
            inner,
            otel: exporting.otel,
        }
    }
}

impl<R: Recorder> Recorder for FanOut<R> {
    fn describe_counter(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        self.otel.storage().describe(&key, unit, &description);
        self.inner.describe_counter(key, unit, description);
    }

    fn describe_gauge(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        self.otel.storage().describe(&key, unit, &description);
        self.inner.describe_gauge(key, unit, description);
    }

    fn describe_histogram(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        self.otel.storage().describe(&key, unit, &description);
        self.inner.describe_histogram(key, unit, description);
    }

    fn register_counter(&self, key: &Key, metadata: &Metadata<'_>) -> Counter {
        let otel = self.otel.get_or_create_counter(key, Arc::clone);
        Counter::from_arc(Arc::new(Both(
            self.inner.register_counter(key, metadata),
            otel,
        )))
    }

    fn register_gauge(&self, key: &Key, metadata: &Metadata<'_>) -> Gauge {
        let otel = self.otel.get_or_create_gauge(key, Arc::clone);
        Gauge::from_arc(Arc::new(Both(
            self.inner.register_gauge(key, metadata),
            otel,
        )))
    }

    fn register_histogram(&self, key: &Key, metadata: &Metadata<'_>) -> Histogram {
        let otel = self.otel.get_or_create_histogram(key, Arc::clone);
        Histogram::from_arc(Arc::new(Both(
            self.inner.register_histogram(key, metadata),
            otel,
        )))
    }
}

/// One handle feeding two: the inner recorder's and OpenTelemetry's.
struct Both<A, B>(A, Arc<B>);

impl<B: CounterFn> CounterFn for Both<Counter, B> {
    fn increment(&self, value: u64) {
        self.0.increment(value);
        self.1.increment(value);
    }

    fn absolute(&self, value: u64) {
        self.0.absolute(value);
        self.1.absolute(value);
    }
}

impl<B: GaugeFn> GaugeFn for Both<Gauge, B> {
    fn increment(&self, value: f64) {
        self.0.increment(value);
        self.1.increment(value);
    }

    fn decrement(&self, value: f64) {
        self.0.decrement(value);
        self.1.decrement(value);
    }

    fn set(&self, value: f64) {
        self.0.set(value);
        self.1.set(value);
    }
}

impl<B: HistogramFn> HistogramFn for Both<Histogram, B> {
    fn record(&self, value: f64) {
        self.0.record(value);
        self.1.record(value);
    }
}

#[derive(Default)]
struct Instruments {
    counters: HashMap<String, opentelemetry::metrics::Counter<u64>>,
    gauges: HashMap<String, opentelemetry::metrics::Gauge<f64>>,
    histograms: HashMap<String, opentelemetry::metrics::Histogram<f64>>,
}

/// Creates one OpenTelemetry instrument per metric name (described as the `metrics`
/// descriptions say) and one handle per name and label set.
struct OtelStorage {
    meter: Meter,
    descriptions: Mutex<HashMap<String, (Option<Unit>, String)>>,
    instruments: Mutex<Instruments>,
}

/// UCUM units as OpenTelemetry names them.
fn ucum(unit: Unit) -> &'static str {
    match unit {
        Unit::Seconds => "s",
        Unit::Milliseconds => "ms",
        Unit::Microseconds => "us",
        Unit::Nanoseconds => "ns",
        Unit::Bytes => "By",
        Unit::Percent => "%",
        _ => "1",
    }
}

fn attributes(key: &Key) -> Vec<KeyValue> {
    key.labels()
        .map(|l| KeyValue::new(l.key().to_owned(), l.value().to_owned()))
        .collect()
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl OtelStorage {
    fn describe(&self, key: &KeyName, unit: Option<Unit>, description: &str) {
        lock(&self.descriptions).insert(key.as_str().to_owned(), (unit, description.to_owned()));
    }

    fn description(&self, name: &str) -> (Option<&'static str>, String) {
        lock(&self.descriptions)
            .get(name)
            .map(|(u, d)| (u.map(ucum), d.clone()))
            .unwrap_or_default()
    }
}

impl Storage<Key> for OtelStorage {
    type Counter = Arc<OtelCounter>;
    type Gauge = Arc<OtelGauge>;
    type Histogram = Arc<OtelHistogram>;

    fn counter(&self, key: &Key) -> Self::Counter {
        let name = key.name();
        let (unit, description) = self.description(name);
        let instrument = lock(&self.instruments)
            .counters
            .entry(name.to_owned())
            .or_insert_with(|| {
                let b = self
                    .meter
                    .u64_counter(name.to_owned())
                    .with_description(description);
                match unit {
                    Some(u) => b.with_unit(u).build(),
                    None => b.build(),
                }
            })
            .clone();
        Arc::new(OtelCounter {
            instrument,
            attributes: attributes(key),
            last_absolute: AtomicU64::new(0),
        })
    }

    fn gauge(&self, key: &Key) -> Self::Gauge {
        let name = key.name();
        let (unit, description) = self.description(name);
        let instrument = lock(&self.instruments)
            .gauges
            .entry(name.to_owned())
            .or_insert_with(|| {
                let b = self
                    .meter
                    .f64_gauge(name.to_owned())
                    .with_description(description);
                match unit {
                    Some(u) => b.with_unit(u).build(),
                    None => b.build(),
                }
            })
            .clone();
        Arc::new(OtelGauge {
            instrument,
            attributes: attributes(key),
            value: Mutex::new(0.0),
        })
    }

    fn histogram(&self, key: &Key) -> Self::Histogram {
        let name = key.name();
        let (unit, description) = self.description(name);
        let instrument = lock(&self.instruments)
            .histograms
            .entry(name.to_owned())
            .or_insert_with(|| {
                let mut b = self
                    .meter
                    .f64_histogram(name.to_owned())
                    .with_description(description);
                // The same buckets as the Prometheus export's.
                if name == crate::metrics::OP_DURATION_SECONDS {
                    b = b.with_boundaries(crate::metrics::DURATION_BUCKETS.to_vec());
                }
                match unit {
                    Some(u) => b.with_unit(u).build(),
                    None => b.build(),
                }
            })
            .clone();
        Arc::new(OtelHistogram {
            instrument,
            attributes: attributes(key),
        })
    }
}

struct OtelCounter {
    instrument: opentelemetry::metrics::Counter<u64>,
    attributes: Vec<KeyValue>,
    /// For `absolute`: OpenTelemetry counters take increments.
    last_absolute: AtomicU64,
}

impl CounterFn for OtelCounter {
    fn increment(&self, value: u64) {
        self.instrument.add(value, &self.attributes);
    }

    fn absolute(&self, value: u64) {
        let before = self.last_absolute.fetch_max(value, Ordering::Relaxed);
        if value > before {
            self.instrument.add(value - before, &self.attributes);
        }
    }
}

/// A gauge's value is kept here (the facade's gauges move up and down; OpenTelemetry's
/// synchronous gauge records absolute values).
struct OtelGauge {
    instrument: opentelemetry::metrics::Gauge<f64>,
    attributes: Vec<KeyValue>,
    value: Mutex<f64>,
}

impl OtelGauge {
    fn update(&self, f: impl FnOnce(f64) -> f64) {
        let mut value = lock(&self.value);
        *value = f(*value);
        self.instrument.record(*value, &self.attributes);
    }
}

impl GaugeFn for OtelGauge {
    fn increment(&self, value: f64) {
        self.update(|v| v + value);
    }

    fn decrement(&self, value: f64) {
        self.update(|v| v - value);
    }

    fn set(&self, value: f64) {
        self.update(|_| value);
    }
}

struct OtelHistogram {
    instrument: opentelemetry::metrics::Histogram<f64>,
    attributes: Vec<KeyValue>,
}

impl HistogramFn for OtelHistogram {
    fn record(&self, value: f64) {
        self.instrument.record(value, &self.attributes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_http_endpoints_with_a_host_are_taken() {
        for ok in [
            "http://collector:4318",
            "HTTP://10.0.0.1:4318/otlp",
            " http://c:1/ ",
        ] {
            assert_eq!(plain_http(ok), Ok(()), "{ok}");
        }
        for (bad, says) in [
            ("https://collector:4318", "https is not supported"),
            ("ftp://collector:4318", "scheme \"ftp\""),
            ("collector:4318", "is not a URL"),
            ("http://:4318", "names no host"),
            ("http://", "names no host"),
        ] {
            let e = plain_http(bad).unwrap_err();
            assert!(e.contains(says) && e.contains(ENDPOINT_ENV), "{bad}: {e}");
        }
    }

    #[test]
    fn the_metrics_path_is_appended_once() {
        assert_eq!(
            metrics_url("http://collector:4318"),
            "http://collector:4318/v1/metrics"
        );
        assert_eq!(
            metrics_url("http://collector:4318/"),
            "http://collector:4318/v1/metrics"
        );
        assert_eq!(
            metrics_url("https://c.example/otlp/v1/metrics"),
            "https://c.example/otlp/v1/metrics"
        );
        assert_eq!(
            traces_url("http://collector:4318/"),
            "http://collector:4318/v1/traces"
        );
        assert_eq!(
            traces_url("https://c.example/otlp/v1/metrics"),
            "https://c.example/otlp/v1/traces"
        );
    }
}
