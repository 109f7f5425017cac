//! The bench's output: a table with one row per block size, or one JSON document.

use serde_json::{Value, json};

use super::units::{format_latency, format_size};
use super::workload::{Op, Outcome};

/// One measured block size.
pub struct Row {
    pub size: u64,
    pub outcome: Outcome,
}

impl Row {
    fn seconds(&self) -> f64 {
        self.outcome.elapsed.as_secs_f64().max(1e-9)
    }

    pub fn ops_per_sec(&self) -> f64 {
        self.outcome.items as f64 / self.seconds()
    }

    /// Value bytes moved per second in GiB; `None` for operations that move no values.
    pub fn gib_per_sec(&self, op: Op) -> Option<f64> {
        op.moves_values().then(|| {
            self.outcome.items as f64 * self.size as f64 / self.seconds() / (1u64 << 30) as f64
        })
    }
}

/// What the run was, for the heading and the JSON.
pub struct Setup<'a> {
    pub op: Op,
    pub transport: &'a str,
    pub servers: &'a [String],
    pub local: bool,
    pub tasks: usize,
    pub connections: usize,
    pub batch: usize,
    pub stop: String,
    pub warmup: Option<std::time::Duration>,
    pub payload_mac: bool,
}

pub fn heading(s: &Setup<'_>) -> String {
    let place = if s.local {
        format!("an in-process server at {}", s.servers.join(","))
    } else {
        s.servers.join(",")
    };
    format!(
        "memkv bench: {op} over {transport}{mac} to {place}; {tasks} tasks, {conns} connections \
         per server, batch {batch}, {stop} per size; latency per call{per_batch}",
        mac = if s.payload_mac { " (payload MACs)" } else { "" },
        op = s.op.as_str(),
        transport = s.transport,
        tasks = s.tasks,
        conns = s.connections,
        batch = s.batch,
        stop = s.stop,
        per_batch = if s.batch > 1 { " (one batch)" } else { "" },
    )
}

pub fn table_header() -> String {
    format!(
        "{:>6} {:>7} {:>10} {:>7} {:>9} {:>12} {:>9} {:>9} {:>9} {:>9}",
        "size", "op", "ops", "secs", "GiB/s", "ops/s", "p50", "p99", "p999", "max"
    )
}

pub fn table_row(op: Op, row: &Row) -> String {
    let h = &row.outcome.latency;
    let gib = row
        .gib_per_sec(op)
        .map_or_else(|| "-".to_owned(), |g| format!("{g:.3}"));
    format!(
        "{:>6} {:>7} {:>10} {:>7.2} {:>9} {:>12.0} {:>9} {:>9} {:>9} {:>9}",
        format_size(row.size),
        op.as_str(),
        row.outcome.items,
        row.outcome.elapsed.as_secs_f64(),
        gib,
        row.ops_per_sec(),
        format_latency(h.quantile(0.5)),
        format_latency(h.quantile(0.99)),
        format_latency(h.quantile(0.999)),
        format_latency(h.max()),
    )
}

fn micros(nanos: Option<u64>) -> Value {
    nanos.map_or(Value::Null, |n| json!(n as f64 / 1e3))
}

pub fn json(s: &Setup<'_>, rows: &[Row]) -> Value {
    let results: Vec<Value> = rows
        .iter()
        .map(|row| {
            let h = &row.outcome.latency;
            json!({
                "size": row.size,
                "ops": row.outcome.items,
                "calls": h.count(),
                "seconds": row.outcome.elapsed.as_secs_f64(),
                "bytes": if s.op.moves_values() { row.outcome.items * row.size } else { 0 },
                "gib_per_sec": row.gib_per_sec(s.op),
                "ops_per_sec": row.ops_per_sec(),
                "latency_us": {
                    "p50": micros(h.quantile(0.5)),
                    "p99": micros(h.quantile(0.99)),
                    "p999": micros(h.quantile(0.999)),
                    "min": micros(h.min()),
                    "max": micros(h.max()),
                    "mean": h.mean().map_or(Value::Null, |m| json!(m / 1e3)),
                },
            })
        })
        .collect();
    json!({
        "op": s.op.as_str(),
        "transport": s.transport,
        "servers": s.servers,
        "local": s.local,
        "tasks": s.tasks,
        "connections": s.connections,
        "batch": s.batch,
        "stop": s.stop,
        "warmup_seconds": s.warmup.map(|w| w.as_secs_f64()),
        "payload_mac": s.payload_mac,
        "latency_per": if s.batch > 1 { "batch" } else { "op" },
        "results": results,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::histogram::Histogram;
    use std::time::Duration;

    fn row() -> Row {
        let mut latency = Histogram::default();
        for us in [100, 200, 300] {
            latency.record(us * 1000);
        }
        Row {
            size: 1 << 20,
            outcome: Outcome {
                items: 2048,
                elapsed: Duration::from_secs(2),
                latency,
            },
        }
    }

    #[test]
    fn throughput_is_bytes_over_time() {
        let r = row();
        assert_eq!(r.ops_per_sec(), 1024.0);
        assert_eq!(r.gib_per_sec(Op::Get), Some(1.0));
        assert_eq!(r.gib_per_sec(Op::Exists), None);
    }

    #[test]
    fn a_table_row_has_every_column() {
        let line = table_row(Op::Put, &row());
        let cols: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(cols.len(), table_header().split_whitespace().count());
        assert_eq!(&cols[..5], ["1M", "put", "2048", "2.00", "1.000"]);
        // p50 of 100/200/300 us, within the histogram's 1/32 precision.
        let p50: f64 = cols[6].strip_suffix("us").unwrap().parse().unwrap();
        assert!((p50 - 200.0).abs() <= 200.0 / 32.0, "{p50}");
    }
}
