//! Per-peer congestion window: how many work requests may be outstanding towards one peer.
//! Additive increase (one more slot per window's worth of successful completions),
//! multiplicative decrease (halved when transport or RNR retries run out, or a request goes
//! unanswered past its deadline). One loss event halves the window once: as TCP reduces once
//! per window of data, a congestion signal from a request posted before the latest reduction
//! (its [`Epoch`] is older) frees its slot and changes nothing else, so one stall with 16
//! requests in flight takes the window from 16 to 8, not to 1. Pure: no clock, no I/O;
//! [`crate::gate::PeerWindow`] puts it behind an async wait.

/// Default bounds: at least one request in flight, at most this many.
pub const DEFAULT_MIN_WINDOW: u32 = 1;
pub const DEFAULT_MAX_WINDOW: u32 = 128;
pub const DEFAULT_INITIAL_WINDOW: u32 = 16;

/// How many times the window had been reduced when a request was posted. Requests posted
/// before a reduction belong to the loss event that caused it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct Epoch(u64);

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CongestionWindow {
    cwnd: u32,
    min: u32,
    max: u32,
    in_flight: u32,
    /// Successful completions since the window last grew.
    successes: u32,
    /// Reductions so far (the current [`Epoch`]).
    reductions: u64,
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
            reductions: 0,
        }
    }

    /// What a request posted now records, to hand back with its completion.
    pub fn epoch(&self) -> Epoch {
        Epoch(self.reductions)
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

    /// One request, posted in epoch `posted`, ended because retries ran out
    /// (IBV_WC_RETRY_EXC_ERR or IBV_WC_RNR_RETRY_EXC_ERR) or went unanswered past its
    /// deadline: frees its slot and halves the window, unless the window was already reduced
    /// since that request was posted (the same loss event: it counts once).
    pub fn on_congestion(&mut self, posted: Epoch) {
        self.release_unused(1);
        if posted < self.epoch() {
            return;
        }
        self.successes = 0;
        self.cwnd = (self.cwnd / 2).max(self.min);
        self.reductions += 1;
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
        w.on_congestion(w.epoch());
        assert_eq!((w.cwnd(), w.in_flight(), w.available()), (3, 5, 0));
        w.on_other_error();
        w.on_other_error();
        assert_eq!(w.available(), 0);
        w.on_other_error();
        assert_eq!(w.available(), 1);
        for _ in 0..10 {
            w.on_congestion(w.epoch());
        }
        assert_eq!(
            (w.cwnd(), w.in_flight()),
            (1, 0),
            "never below min, never underflows"
        );
    }

    #[test]
    fn one_loss_event_halves_the_window_once() {
        // A stall: 16 requests in flight, all posted in the same epoch, all time out.
        let mut w = CongestionWindow::default();
        assert_eq!(w.try_acquire(16), 16);
        let posted = w.epoch();
        for _ in 0..16 {
            w.on_congestion(posted);
        }
        assert_eq!((w.cwnd(), w.in_flight()), (8, 0), "16 -> 8, not 16 -> 1");

        // A request posted after that reduction that is lost again is a new loss event.
        assert_eq!(w.try_acquire(8), 8);
        let later = w.epoch();
        assert!(later > posted);
        w.on_congestion(later);
        assert_eq!(w.cwnd(), 4);
        // The rest of that flight is the same event.
        for _ in 0..7 {
            w.on_congestion(later);
        }
        assert_eq!((w.cwnd(), w.in_flight()), (4, 0));
    }

    #[test]
    fn a_stale_congestion_signal_frees_its_slot_and_keeps_the_growth() {
        let mut w = CongestionWindow::new(8, 1, 16);
        assert_eq!(w.try_acquire(8), 8);
        let old = w.epoch();
        w.on_congestion(old);
        assert_eq!(w.cwnd(), 4);
        // Recovery has begun: successes accumulate towards the next increase.
        for _ in 0..3 {
            w.on_success();
        }
        w.on_congestion(old);
        assert_eq!((w.cwnd(), w.in_flight()), (4, 3));
        w.on_success();
        assert_eq!(
            w.cwnd(),
            5,
            "the stale signal did not reset the count of successes"
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
        /// `true`: from a request posted one epoch before the current one (when there is one).
        Congestion(bool),
        OtherError,
        ReleaseUnused(u32),
    }

    fn event() -> impl Strategy<Value = Event> {
        prop_oneof![
            (0u32..40).prop_map(Event::Acquire),
            Just(Event::Success),
            any::<bool>().prop_map(Event::Congestion),
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
                    Event::Congestion(stale) if outstanding > 0 => {
                        outstanding -= 1;
                        let now = w.epoch();
                        let posted = if stale && now.0 > 0 { Epoch(now.0 - 1) } else { now };
                        w.on_congestion(posted);
                        if posted < now {
                            prop_assert_eq!(w.cwnd(), before);
                            prop_assert_eq!(w.epoch(), now);
                        } else {
                            prop_assert_eq!(w.cwnd(), (before / 2).max(lo));
                            prop_assert!(w.epoch() > now);
                        }
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
