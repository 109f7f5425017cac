//! `--memcpy`: what one core copies per second at each block size, the ceiling for any path
//! that copies a value once. Sources and destinations rotate over at least 64 MiB so large
//! blocks come from memory rather than cache, as KV-cache blocks do.

use std::hint::black_box;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::units::format_size;

/// Bytes of distinct buffers each side cycles through.
const WORKING_SET: u64 = 64 << 20;

pub struct Copied {
    pub size: u64,
    pub copies: u64,
    pub elapsed: Duration,
}

impl Copied {
    pub fn gib_per_sec(&self) -> f64 {
        self.copies as f64 * self.size as f64
            / self.elapsed.as_secs_f64().max(1e-9)
            / (1u64 << 30) as f64
    }
}

/// Copies blocks of `size` for about `time`.
pub fn measure(size: u64, time: Duration) -> Copied {
    let buffers = (WORKING_SET / size).clamp(1, 4096) as usize;
    let len = size as usize;
    let sources: Vec<Vec<u8>> = (0..buffers).map(|i| vec![i as u8 | 1; len]).collect();
    let mut targets: Vec<Vec<u8>> = (0..buffers).map(|_| vec![0u8; len]).collect();
    // Zeroed targets are pages not yet mapped; one untimed sweep maps them, so the timed
    // sweeps measure copies, not page faults.
    for (target, source) in targets.iter_mut().zip(&sources) {
        target.copy_from_slice(source);
    }
    let started = Instant::now();
    let mut copies = 0u64;
    while started.elapsed() < time {
        // The clock is read once per sweep over the buffers.
        for i in 0..buffers {
            targets[i].copy_from_slice(black_box(&sources[i]));
            black_box(&targets[i]);
        }
        copies += buffers as u64;
    }
    Copied {
        size,
        copies,
        elapsed: started.elapsed(),
    }
}

pub fn table(rows: &[Copied]) -> String {
    let mut out = format!("{:>6} {:>10} {:>9}\n", "size", "copies", "GiB/s");
    for r in rows {
        out += &format!(
            "{:>6} {:>10} {:>9.2}\n",
            format_size(r.size),
            r.copies,
            r.gib_per_sec()
        );
    }
    out
}

pub fn json(rows: &[Copied]) -> Value {
    json!({
        "memcpy": rows.iter().map(|r| json!({
            "size": r.size,
            "copies": r.copies,
            "seconds": r.elapsed.as_secs_f64(),
            "gib_per_sec": r.gib_per_sec(),
        })).collect::<Vec<_>>()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_short_measurement_copies_something() {
        let r = measure(4096, Duration::from_millis(5));
        assert!(r.copies > 0);
        assert!(r.gib_per_sec() > 0.0);
        assert!(json(&[r])["memcpy"][0]["size"] == 4096);
    }
}
