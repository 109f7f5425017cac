//! Latency histogram over nanoseconds: hdrhistogram with three significant digits (a reported
//! percentile is within 0.1 % of the true sample), fixed memory whatever the run length. Each
//! task keeps its own histogram (no sharing on the hot path) and they are merged at the end.

/// Significant decimal digits kept for each value.
const SIGNIFICANT_DIGITS: u8 = 3;

#[derive(Clone)]
pub struct Histogram(hdrhistogram::Histogram<u64>);

impl Default for Histogram {
    fn default() -> Self {
        // Auto-resizing: any u64 nanosecond count is recordable.
        let h = hdrhistogram::Histogram::new(SIGNIFICANT_DIGITS)
            .expect("three significant digits is a valid precision");
        Histogram(h)
    }
}

impl std::fmt::Debug for Histogram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Histogram")
            .field("total", &self.count())
            .field("min", &self.min())
            .field("max", &self.max())
            .finish_non_exhaustive()
    }
}

impl Histogram {
    pub fn record(&mut self, nanos: u64) {
        // The histogram grows to fit; past 2^63 - 1 (centuries) it cannot, and records its most.
        if self.0.record(nanos).is_err() {
            self.0.saturating_record(nanos);
        }
    }

    pub fn merge(&mut self, other: &Histogram) {
        self.0
            .add(&other.0)
            .expect("auto-resizing histograms of one precision always merge");
    }

    pub fn count(&self) -> u64 {
        self.0.len()
    }

    pub fn min(&self) -> Option<u64> {
        (self.count() > 0).then(|| self.0.min())
    }

    pub fn max(&self) -> Option<u64> {
        (self.count() > 0).then(|| self.0.max())
    }

    pub fn mean(&self) -> Option<f64> {
        (self.count() > 0).then(|| self.0.mean())
    }

    /// The value at quantile `q` (0.0..=1.0), to three significant digits; `None` when empty.
    pub fn quantile(&self, q: f64) -> Option<u64> {
        (self.count() > 0).then(|| self.0.value_at_quantile(q.clamp(0.0, 1.0)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_values_are_exact() {
        let mut h = Histogram::default();
        for v in [3, 1, 2, 4, 5] {
            h.record(v);
        }
        assert_eq!(h.quantile(0.5), Some(3));
        assert_eq!(h.quantile(0.0), Some(1));
        assert_eq!(h.quantile(1.0), Some(5));
        assert_eq!(h.min(), Some(1));
        assert_eq!(h.max(), Some(5));
        assert_eq!(h.mean(), Some(3.0));
    }

    #[test]
    fn percentiles_of_a_uniform_run_are_within_a_tenth_of_a_percent() {
        let mut h = Histogram::default();
        // 1..=100_000 microseconds in nanoseconds.
        for us in 1..=100_000u64 {
            h.record(us * 1000);
        }
        for (q, exact) in [
            (0.5, 50_000_000.0),
            (0.99, 99_000_000.0),
            (0.999, 99_900_000.0),
        ] {
            let got = h.quantile(q).unwrap() as f64;
            assert!(
                (got - exact).abs() / exact < 0.001,
                "q{q}: {got} vs {exact}"
            );
        }
        let max = h.quantile(1.0).unwrap() as f64;
        assert!((max - 1e8).abs() / 1e8 < 0.001, "{max}");
        assert_eq!(h.count(), 100_000);
    }

    #[test]
    fn the_tail_is_seen_even_when_rare() {
        let mut h = Histogram::default();
        for _ in 0..999 {
            h.record(10_000);
        }
        h.record(5_000_000);
        let p50 = h.quantile(0.5).unwrap();
        assert!((9_990..=10_010).contains(&p50), "{p50}");
        assert!(h.quantile(0.999).unwrap() < 11_000);
        let tail = h.quantile(0.9999).unwrap();
        assert!((4_995_000..=5_005_000).contains(&tail), "{tail}");
    }

    #[test]
    fn merging_equals_recording_everything_in_one() {
        let (mut a, mut b, mut all) = (
            Histogram::default(),
            Histogram::default(),
            Histogram::default(),
        );
        for v in 0..10_000u64 {
            let v = v * v % 7_919_993;
            if v % 3 == 0 { &mut a } else { &mut b }.record(v);
            all.record(v);
        }
        a.merge(&b);
        assert_eq!(a.count(), all.count());
        assert_eq!(a.min(), all.min());
        assert_eq!(a.max(), all.max());
        for q in [0.1, 0.5, 0.9, 0.99, 0.999] {
            assert_eq!(a.quantile(q), all.quantile(q));
        }
    }

    #[test]
    fn an_empty_histogram_has_no_percentiles() {
        let mut h = Histogram::default();
        assert_eq!(h.quantile(0.5), None);
        assert_eq!(h.min(), None);
        assert_eq!(h.mean(), None);
        h.merge(&Histogram::default());
        assert_eq!(h.count(), 0);
        assert_eq!(h.max(), None);
    }
}
