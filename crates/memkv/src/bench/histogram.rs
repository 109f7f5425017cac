//! Latency histogram: log-linear buckets over nanoseconds, fixed size whatever the run length.
//!
//! Values below 32 ns get one bucket each; above that every power of two is cut into 32 equal
//! buckets, so a reported percentile is within 1/32 (about 3 %) of the true sample. Each task
//! keeps its own histogram (no sharing on the hot path) and they are merged at the end.

/// Sub-buckets per power of two, as a bit count.
const SUB_BITS: u32 = 5;
const SUB: u64 = 1 << SUB_BITS;
/// Enough buckets for any u64.
const BUCKETS: usize = ((64 - SUB_BITS as usize) + 1) * SUB as usize;

#[derive(Clone)]
pub struct Histogram {
    counts: Box<[u64]>,
    total: u64,
    min: u64,
    max: u64,
    sum: u128,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            counts: vec![0; BUCKETS].into_boxed_slice(),
            total: 0,
            min: u64::MAX,
            max: 0,
            sum: 0,
        }
    }
}

impl std::fmt::Debug for Histogram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Histogram")
            .field("total", &self.total)
            .field("min", &self.min())
            .field("max", &self.max())
            .finish_non_exhaustive()
    }
}

/// The bucket holding `value`.
fn bucket_of(value: u64) -> usize {
    if value < SUB {
        return value as usize;
    }
    let exponent = 63 - value.leading_zeros();
    let shift = exponent - SUB_BITS;
    let mantissa = value >> shift; // in SUB..2*SUB
    ((shift as u64 + 1) * SUB + (mantissa - SUB)) as usize
}

/// The smallest and largest value that land in `bucket`.
fn bounds_of(bucket: usize) -> (u64, u64) {
    let bucket = bucket as u64;
    if bucket < SUB {
        return (bucket, bucket);
    }
    let shift = bucket / SUB - 1;
    let mantissa = SUB + bucket % SUB;
    let low = mantissa << shift;
    let high = low.saturating_add((1u64 << shift) - 1);
    (low, high)
}

impl Histogram {
    pub fn record(&mut self, nanos: u64) {
        self.counts[bucket_of(nanos)] += 1;
        self.total += 1;
        self.min = self.min.min(nanos);
        self.max = self.max.max(nanos);
        self.sum += u128::from(nanos);
    }

    pub fn merge(&mut self, other: &Histogram) {
        for (mine, theirs) in self.counts.iter_mut().zip(other.counts.iter()) {
            *mine += theirs;
        }
        self.total += other.total;
        self.min = self.min.min(other.min);
        self.max = self.max.max(other.max);
        self.sum += other.sum;
    }

    pub fn count(&self) -> u64 {
        self.total
    }

    pub fn min(&self) -> Option<u64> {
        (self.total > 0).then_some(self.min)
    }

    pub fn max(&self) -> Option<u64> {
        (self.total > 0).then_some(self.max)
    }

    pub fn mean(&self) -> Option<f64> {
        (self.total > 0).then(|| self.sum as f64 / self.total as f64)
    }

    /// The value at quantile `q` (0.0..=1.0): the smallest recorded value such that at least
    /// `q` of the samples are at or below it, up to the bucket width. `None` when empty.
    pub fn quantile(&self, q: f64) -> Option<u64> {
        if self.total == 0 {
            return None;
        }
        if q >= 1.0 {
            return Some(self.max);
        }
        let q = q.max(0.0);
        let rank = ((q * self.total as f64).ceil() as u64).clamp(1, self.total);
        let mut seen = 0;
        for (bucket, &n) in self.counts.iter().enumerate() {
            seen += n;
            if seen >= rank {
                let (low, high) = bounds_of(bucket);
                let middle = low + (high - low) / 2;
                return Some(middle.clamp(self.min, self.max));
            }
        }
        Some(self.max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_value_lands_in_a_bucket_that_holds_it() {
        let mut probes: Vec<u64> = (0..5000).collect();
        for shift in 0..64 {
            let p = 1u64 << shift;
            probes.extend([p - 1, p, p + 1, p.saturating_mul(3) / 2]);
        }
        probes.push(u64::MAX);
        for v in probes {
            let b = bucket_of(v);
            assert!(b < BUCKETS, "{v} -> bucket {b}");
            let (low, high) = bounds_of(b);
            assert!(
                low <= v && v <= high,
                "{v} not in bucket {b} = {low}..={high}"
            );
        }
    }

    #[test]
    fn buckets_are_contiguous_and_narrow() {
        for b in 1..BUCKETS {
            let (prev_low, prev_high) = bounds_of(b - 1);
            let (low, high) = bounds_of(b);
            assert_eq!(prev_high + 1, low, "gap before bucket {b}");
            assert!(prev_low <= prev_high);
            // Width at most 1/32 of the bucket's lower bound: the promised precision.
            assert!(
                high - low <= low / SUB,
                "bucket {b} = {low}..={high} too wide"
            );
        }
    }

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
    fn percentiles_of_a_uniform_run_are_within_three_percent() {
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
                (got - exact).abs() / exact < 1.0 / 32.0,
                "q{q}: {got} vs {exact}"
            );
        }
        assert_eq!(h.quantile(1.0), Some(100_000_000));
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
        assert!((9_700..=10_300).contains(&p50), "{p50}");
        assert!(h.quantile(0.999).unwrap() < 11_000);
        assert_eq!(h.quantile(0.9999), Some(5_000_000));
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
