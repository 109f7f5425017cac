//! Per-peer congestion window: how many work requests may be outstanding towards one peer.
//! Additive increase (one more slot per window's worth of successful completions),
//! multiplicative decrease (halved when transport or RNR retries run out). Pure: no clock, no
//! I/O; [`crate::gate::PeerWindow`] puts it behind an async wait.

/// Default bounds: at least one request in flight, at most this many.
pub const DEFAULT_MIN_WINDOW: u32 = 1;
pub const DEFAULT_MAX_WINDOW: u32 = 128;
pub const DEFAULT_INITIAL_WINDOW: u32 = 16;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CongestionWindow {
    cwnd: u32,
    min: u32,
    max: u32,
    in_flight: u32,
    /// Successful completions since the window last grew.
    successes: u32,
}

impl Default for CongestionWindow {
    fn default() -> Self {
        Self::new(
            DEFAULT_INITIAL_WINDOW,
            DEFAULT_MIN_WINDOW,
            DEFAULT_MAX_WINDOW,
        )
    }
}

impl CongestionWindow {
    /// `min` is raised to 1 and `initial` clamped into `min..=max`.
    pub fn new(initial: u32, min: u32, max: u32) -> Self {
        let min = min.max(1);
        let max = max.max(min);
        Self {
            cwnd: initial.clamp(min, max),
            min,
            max,
            in_flight: 0,
            successes: 0,
        }
    }

    pub fn cwnd(&self) -> u32 {
        self.cwnd
    }

    pub fn max(&self) -> u32 {
        self.max
    }

    pub fn in_flight(&self) -> u32 {
        self.in_flight
    }

    /// Slots free now. Zero while more are in flight than a shrunken window allows.
    pub fn available(&self) -> u32 {
        self.cwnd.saturating_sub(self.in_flight)
    }

    /// Takes up to `wanted` slots; returns how many were granted (0 when the window is full).
    pub fn try_acquire(&mut self, wanted: u32) -> u32 {
        let granted = wanted.min(self.available());
        self.in_flight += granted;
        granted
    }

    /// Gives back slots that were granted but never used (a post that failed).
    pub fn release_unused(&mut self, slots: u32) {
        self.in_flight = self.in_flight.saturating_sub(slots);
    }

    /// One request completed successfully: frees its slot; a full window of successes grows
    /// the window by one.
    pub fn on_success(&mut self) {
        self.release_unused(1);
        self.successes += 1;
        if self.successes >= self.cwnd {
            self.successes = 0;
            self.cwnd = (self.cwnd + 1).min(self.max);
        }
    }

    /// One request ended because retries ran out (IBV_WC_RETRY_EXC_ERR or
    /// IBV_WC_RNR_RETRY_EXC_ERR): frees its slot and halves the window.
    pub fn on_congestion(&mut self) {
        self.release_unused(1);
        self.successes = 0;
        self.cwnd = (self.cwnd / 2).max(self.min);
    }

    /// One request ended with any other error (flushed, access error): frees its slot only.
    pub fn on_other_error(&mut self) {
        self.release_unused(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn grows_by_one_per_window_of_successes_and_halves_on_congestion() {
        let mut w = CongestionWindow::new(4, 1, 6);
        assert_eq!(w.try_acquire(10), 4);
        assert_eq!(w.try_acquire(1), 0);
        for _ in 0..4 {
            w.on_success();
        }
        assert_eq!((w.cwnd(), w.in_flight()), (5, 0));
        for _ in 0..20 {
            assert_eq!(w.try_acquire(1), 1);
            w.on_success();
        }
        assert_eq!(w.cwnd(), 6, "capped at max");
        assert_eq!(w.try_acquire(6), 6);
        w.on_congestion();
        assert_eq!((w.cwnd(), w.in_flight(), w.available()), (3, 5, 0));
        w.on_other_error();
        w.on_other_error();
        assert_eq!(w.available(), 0);
        w.on_other_error();
        assert_eq!(w.available(), 1);
        for _ in 0..10 {
            w.on_congestion();
        }
        assert_eq!(
            (w.cwnd(), w.in_flight()),
            (1, 0),
            "never below min, never underflows"
        );
    }

    #[test]
    fn bounds_are_sanitised() {
        let w = CongestionWindow::new(500, 0, 0);
        assert_eq!((w.cwnd(), w.max()), (1, 1));
        let w = CongestionWindow::new(0, 2, 8);
        assert_eq!(w.cwnd(), 2);
    }

    #[derive(Debug, Clone)]
    enum Event {
        Acquire(u32),
        Success,
        Congestion,
        OtherError,
        ReleaseUnused(u32),
    }

    fn event() -> impl Strategy<Value = Event> {
        prop_oneof![
            (0u32..40).prop_map(Event::Acquire),
            Just(Event::Success),
            Just(Event::Congestion),
            Just(Event::OtherError),
            (0u32..4).prop_map(Event::ReleaseUnused),
        ]
    }

    proptest! {
        /// Against a model that counts granted slots: the window stays within its bounds,
        /// grants never push in-flight past the window, completions of granted requests never
        /// underflow, and the window moves only as AIMD says.
        #[test]
        fn window_keeps_its_invariants(
            initial in 0u32..200, min in 0u32..8, max in 0u32..200,
            events in proptest::collection::vec(event(), 0..300),
        ) {
            let mut w = CongestionWindow::new(initial, min, max);
            let (lo, hi) = (min.max(1), max.max(min.max(1)));
            let mut outstanding = 0u32;
            for e in events {
                let before = w.cwnd();
                match e {
                    Event::Acquire(n) => {
                        let free = w.available();
                        let got = w.try_acquire(n);
                        prop_assert_eq!(got, n.min(free));
                        prop_assert!(got == 0 || w.in_flight() <= w.cwnd());
                        outstanding += got;
                    }
                    Event::Success if outstanding > 0 => {
                        outstanding -= 1;
                        w.on_success();
                        prop_assert!(w.cwnd() == before || w.cwnd() == (before + 1).min(hi));
                    }
                    Event::Congestion if outstanding > 0 => {
                        outstanding -= 1;
                        w.on_congestion();
                        prop_assert_eq!(w.cwnd(), (before / 2).max(lo));
                    }
                    Event::OtherError if outstanding > 0 => {
                        outstanding -= 1;
                        w.on_other_error();
                        prop_assert_eq!(w.cwnd(), before);
                    }
                    Event::ReleaseUnused(n) => {
                        let n = n.min(outstanding);
                        outstanding -= n;
                        w.release_unused(n);
                    }
                    _ => {}
                }
                prop_assert!(w.cwnd() >= lo && w.cwnd() <= hi);
                prop_assert_eq!(w.in_flight(), outstanding);
            }
        }
    }
}
