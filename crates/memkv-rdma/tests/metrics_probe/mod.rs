//! A `metrics` recorder for tests (a test double for a Prometheus exporter): it keeps the
//! latest value of every counter and gauge under `name{label=value,...}`.

#![allow(dead_code)]

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use metrics::{
    Counter, CounterFn, Gauge, GaugeFn, Histogram, HistogramFn, Key, KeyName, Metadata, Recorder,
    SharedString, Unit,
};

#[derive(Default)]
pub struct Cell(AtomicU64);

impl CounterFn for Cell {
    fn increment(&self, value: u64) {
        self.0.fetch_add(value, Ordering::Relaxed);
    }
    fn absolute(&self, value: u64) {
        self.0.store(value, Ordering::Relaxed);
    }
}

impl GaugeFn for Cell {
    fn increment(&self, value: f64) {
        self.set(f64::from_bits(self.0.load(Ordering::Relaxed)) + value);
    }
    fn decrement(&self, value: f64) {
        self.set(f64::from_bits(self.0.load(Ordering::Relaxed)) - value);
    }
    fn set(&self, value: f64) {
        self.0.store(value.to_bits(), Ordering::Relaxed);
    }
}

impl HistogramFn for Cell {
    fn record(&self, _value: f64) {}
}

#[derive(Default, Clone)]
pub struct Probe {
    cells: Arc<Mutex<HashMap<String, Arc<Cell>>>>,
}

fn render(key: &Key) -> String {
    let labels: Vec<String> = key
        .labels()
        .map(|l| format!("{}={}", l.key(), l.value()))
        .collect();
    format!("{}{{{}}}", key.name(), labels.join(","))
}

impl Probe {
    fn cell(&self, key: &Key) -> Arc<Cell> {
        self.cells
            .lock()
            .unwrap()
            .entry(render(key))
            .or_default()
            .clone()
    }

    pub fn counter(&self, rendered: &str) -> u64 {
        self.cells
            .lock()
            .unwrap()
            .get(rendered)
            .map_or(0, |c| c.0.load(Ordering::Relaxed))
    }

    pub fn gauge(&self, rendered: &str) -> Option<f64> {
        self.cells
            .lock()
            .unwrap()
            .get(rendered)
            .map(|c| f64::from_bits(c.0.load(Ordering::Relaxed)))
    }

    pub fn keys(&self) -> Vec<String> {
        self.cells.lock().unwrap().keys().cloned().collect()
    }
}

impl Recorder for Probe {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        Counter::from_arc(self.cell(key))
    }
    fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::from_arc(self.cell(key))
    }
    fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
        Histogram::from_arc(self.cell(key))
    }
}

/// Installs one probe as the process's global recorder (once) and returns it.
pub fn global() -> Probe {
    static PROBE: std::sync::OnceLock<Probe> = std::sync::OnceLock::new();
    PROBE
        .get_or_init(|| {
            let probe = Probe::default();
            metrics::set_global_recorder(probe.clone()).expect("no other global recorder");
            probe
        })
        .clone()
}
