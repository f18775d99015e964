//! Adaptive pacing: learn a key's send rate from its 429s, so a fleet
//! settles below the provider's limit instead of oscillating around it.
//!
//! Multiplicative decrease, then a quick regain and a slow probe: a 429
//! multiplies the rate by 0.7 — at most once per congestion event (a burst
//! of concurrent 429s is one signal, not a hundred); while sends succeed the
//! rate closes the gap to 90 % of the rate that last drew a 429 with a one
//! second time constant, and past it probes upward by a hundredth of the
//! ceiling per second. The regain keeps goodput near the provider's limit;
//! the slow probe keeps 429s rare.

use std::time::Duration;
use tokio::time::Instant;

/// Bounds of an adaptive rate, in sends per second.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AdaptiveRate {
    /// The rate never falls below this (sends per second, > 0).
    pub min_per_sec: f64,
    /// The rate never rises above this, and starts here.
    pub max_per_sec: f64,
}

/// Share of the rate kept after a 429.
const DECREASE: f64 = 0.7;
/// Share of the ceiling added per second of successes, past the regain.
const INCREASE_PER_SEC: f64 = 0.01;
/// Share of the last throttled rate the regain aims for.
const REGAIN_TARGET: f64 = 0.9;

/// The learned rate of one key.
#[derive(Debug, Clone, Copy)]
pub(super) struct Learned {
    per_sec: f64,
    /// 429s answered to sends slotted before this belong to the last decrease.
    quiet_until: Option<Instant>,
    /// When the rate last rose (or fell).
    changed: Option<Instant>,
    /// The rate that last drew a 429.
    last_throttled: Option<f64>,
}

impl AdaptiveRate {
    /// Valid bounds, or `None`.
    pub(super) fn checked(self) -> Option<AdaptiveRate> {
        let ok = self.min_per_sec.is_finite()
            && self.max_per_sec.is_finite()
            && self.min_per_sec > 0.0
            && self.min_per_sec <= self.max_per_sec;
        ok.then_some(self)
    }

    pub(super) fn start(&self) -> Learned {
        Learned {
            per_sec: self.max_per_sec,
            quiet_until: None,
            changed: None,
            last_throttled: None,
        }
    }
}

impl Learned {
    /// Time between sends at the current rate.
    pub(super) fn interval(&self) -> Duration {
        Duration::from_secs_f64(1.0 / self.per_sec.max(1e-6)).min(Duration::from_secs(3600))
    }

    /// The current rate in sends per second.
    pub(super) fn per_sec(&self) -> f64 {
        self.per_sec
    }

    /// A success at `now`: climb in proportion to the time since the last change.
    pub(super) fn on_success(&mut self, bounds: &AdaptiveRate, now: Instant) {
        let since = self
            .changed
            .map_or(Duration::ZERO, |t| now.saturating_duration_since(t));
        let dt = since.min(Duration::from_secs(1)).as_secs_f64();
        let probe = bounds.max_per_sec * INCREASE_PER_SEC * dt;
        let regain = self.last_throttled.map_or(0.0, |rate| {
            (rate * REGAIN_TARGET - self.per_sec).max(0.0) * dt
        });
        self.per_sec = (self.per_sec + probe.max(regain)).min(bounds.max_per_sec);
        self.changed = Some(now);
    }

    /// A 429 for a send slotted at `sent`: decrease once per congestion
    /// event, then ignore the 429s of sends already booked at the old rate
    /// (every slot up to `booked_until`).
    pub(super) fn on_throttle(
        &mut self,
        bounds: &AdaptiveRate,
        sent: Instant,
        now: Instant,
        booked_until: Instant,
    ) {
        if self.quiet_until.is_some_and(|quiet| sent <= quiet) {
            return;
        }
        self.last_throttled = Some(self.per_sec);
        self.per_sec = (self.per_sec * DECREASE).max(bounds.min_per_sec);
        self.quiet_until = Some(now.max(booked_until));
        self.changed = Some(now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BOUNDS: AdaptiveRate = AdaptiveRate {
        min_per_sec: 1.0,
        max_per_sec: 100.0,
    };

    #[test]
    fn after_a_decrease_the_rate_regains_quickly_then_probes_slowly() {
        let mut learned = BOUNDS.start();
        let t0 = Instant::now();
        learned.per_sec = 50.0;
        learned.on_throttle(&BOUNDS, t0, t0, t0);
        assert!((learned.per_sec() - 35.0).abs() < 1e-9);
        // Successes every 10 ms for 3 s: most of the gap to the target closes.
        let target = 50.0 * REGAIN_TARGET;
        let mut at = t0;
        for _ in 0..300 {
            at += Duration::from_millis(10);
            learned.on_success(&BOUNDS, at);
        }
        let regained = learned.per_sec();
        assert!(regained > target - 1.0 && regained <= target, "{regained}");
        // Past the regain target only the slow probe (1 /s per second) remains.
        for _ in 0..100 {
            at += Duration::from_millis(10);
            learned.on_success(&BOUNDS, at);
        }
        assert!(learned.per_sec() - regained < 1.1, "{}", learned.per_sec());
    }

    #[tokio::test(start_paused = true)]
    async fn a_burst_of_429s_is_one_decrease() {
        let mut learned = BOUNDS.start();
        let sent = Instant::now();
        tokio::time::advance(Duration::from_millis(10)).await;
        for _ in 0..50 {
            learned.on_throttle(&BOUNDS, sent, Instant::now(), sent);
        }
        assert!((learned.per_sec() - 70.0).abs() < 1e-9);
        tokio::time::advance(Duration::from_millis(10)).await;
        learned.on_throttle(&BOUNDS, Instant::now(), Instant::now(), sent);
        assert!(
            (learned.per_sec() - 49.0).abs() < 1e-9,
            "a later send's 429 is a new event"
        );
    }

    #[test]
    fn the_rate_stays_inside_its_bounds() {
        let mut learned = BOUNDS.start();
        let now = Instant::now();
        for _ in 0..100 {
            learned.quiet_until = None;
            learned.on_throttle(&BOUNDS, now, now, now);
        }
        assert_eq!(learned.per_sec(), 1.0);
        let mut at = now;
        learned.on_success(&BOUNDS, at);
        for _ in 0..200 {
            at += Duration::from_secs(1);
            learned.on_success(&BOUNDS, at);
        }
        assert_eq!(learned.per_sec(), 100.0);
        assert_eq!(learned.interval(), Duration::from_millis(10));
        assert!(AdaptiveRate {
            min_per_sec: 0.0,
            max_per_sec: 1.0
        }
        .checked()
        .is_none());
        assert!(AdaptiveRate {
            min_per_sec: 2.0,
            max_per_sec: 1.0
        }
        .checked()
        .is_none());
        assert!(AdaptiveRate {
            min_per_sec: 1.0,
            max_per_sec: f64::NAN
        }
        .checked()
        .is_none());
    }
}
