//! The pacing arithmetic of one key: GCRA slots handed out in arrival order.
//!
//! A key's *theoretical arrival time* (`tat`) moves forward by the cost of
//! every admitted send. A send of cost `c` arriving at `now` gets the slot
//! `max(now, tat + c·T − capacity·T)` (`T` the time per unit), so a full
//! bucket of `capacity` units may go at once and the rest follow at the
//! quota's rate. Slots are computed under one lock in arrival order, which
//! makes the queue first-in, first-out.

use std::time::Duration;
use tokio::time::Instant;

/// One quota's pace: time per unit of cost (`interval`), and how many
/// units the bucket holds (`burst`: how much may go at once). The same
/// shape a fleet shares.
pub(super) use super::shared::SharedPace as Pace;

impl Pace {
    /// `per_minute` units a minute, with `burst` units allowed at once.
    pub(super) fn per_minute(per_minute: u32, burst: u32) -> Option<Pace> {
        (per_minute > 0).then(|| Pace {
            interval: Duration::from_secs(60) / per_minute,
            burst: burst.max(1),
        })
    }

    /// Largest cost that can ever be admitted.
    pub(super) fn capacity(&self) -> u64 {
        u64::from(self.burst)
    }

    fn cost(&self, units: u64) -> Duration {
        self.interval
            .saturating_mul(u32::try_from(units).unwrap_or(u32::MAX))
    }
}

/// `at + by`, or as late as the clock can say: a quota's burst times its
/// period can be far beyond what an `Instant` holds on some platforms.
fn later(at: Instant, by: Duration) -> Instant {
    at.checked_add(by)
        .or_else(|| at.checked_add(Duration::from_secs(100 * 365 * 86_400)))
        .unwrap_or(at)
}

/// The theoretical arrival time of a bucket its owner says holds
/// `remaining` units at `now`, less `unseen` more booked here.
fn stated(pace: &Pace, remaining: u64, unseen: u64, now: Instant) -> Instant {
    let spent = pace
        .capacity()
        .saturating_sub(remaining)
        .saturating_add(unseen);
    later(now, pace.cost(spent))
}

/// The theoretical arrival time of one quota of one key.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Tat(pub(super) Option<Instant>);

impl Tat {
    /// The earliest slot for a send of `cost` units arriving at `now`.
    pub(super) fn slot(&self, pace: &Pace, now: Instant, cost: u64) -> Instant {
        let Some(tat) = self.0 else { return now };
        let due = later(tat, pace.cost(cost));
        now.max(due.checked_sub(pace.cost(pace.capacity())).unwrap_or(now))
    }

    /// Books `cost` units at `slot`.
    pub(super) fn book(&mut self, pace: &Pace, slot: Instant, cost: u64) {
        let start = self.0.map_or(slot, |tat| tat.max(slot));
        self.0 = Some(later(start, pace.cost(cost)));
    }

    /// A hold until `until` pushed the sends booked after `now` back by
    /// `pushed`, and the upstream's bucket is empty then (it answered 429):
    /// the next unit fits one period after `until` at the earliest.
    pub(super) fn push_back(
        &mut self,
        pace: &Pace,
        now: Instant,
        pushed: Duration,
        until: Instant,
    ) {
        let booked = self
            .0
            .filter(|tat| *tat > now)
            .map(|tat| later(tat, pushed));
        let empty = later(until, pace.cost(pace.capacity()));
        self.0 = Some(booked.map_or(empty, |tat| tat.max(empty)));
    }

    /// A hold that pushed the bookings back ended `by` early: they move
    /// forward again.
    pub(super) fn pull_forward(&mut self, by: Duration) {
        self.0 = self.0.map(|tat| tat.checked_sub(by).unwrap_or(tat));
    }

    /// The bucket's owner stated that it holds `remaining` units now: it
    /// holds no more than that (what the statement counted is spent, and
    /// what this side booked since stays booked).
    pub(super) fn resync(&mut self, pace: &Pace, remaining: u64, now: Instant) {
        let floor = stated(pace, remaining, 0, now);
        self.0 = Some(self.0.map_or(floor, |tat| tat.max(floor)));
    }

    /// The bucket's owner stated that it holds `remaining` units now, and
    /// `unreflected` units booked here since were not counted in that
    /// statement: it holds what the statement says less those, more or
    /// fewer than this side thought (its costs are estimates; the owner's
    /// count is not).
    pub(super) fn restate(&mut self, pace: &Pace, remaining: u64, unreflected: u64, now: Instant) {
        self.0 = Some(stated(pace, remaining, unreflected, now));
    }

    /// The bucket is `to`'s now, not `from`'s: what is booked ahead keeps
    /// its units.
    pub(super) fn repace(&mut self, from: &Pace, to: &Pace, now: Instant) {
        let Some(tat) = self.0.filter(|tat| *tat > now) else {
            return;
        };
        let units = tat.duration_since(now).as_secs_f64() / from.interval.as_secs_f64();
        let units = units.min(f64::from(u32::MAX));
        self.0 = Some(later(now, to.interval.mul_f64(units)));
    }

    /// A booking of `cost` units never went: they come back, up to a full
    /// bucket.
    pub(super) fn refund(&mut self, pace: &Pace, cost: u64, now: Instant) {
        if let Some(tat) = self.0 {
            let back = tat.checked_sub(pace.cost(cost)).unwrap_or(now);
            self.0 = Some(back.max(now));
        }
    }

    /// Whether no booking is owed past what a full bucket holds: nothing
    /// booked waits on the refill.
    pub(super) fn settled(&self, pace: &Pace, now: Instant) -> bool {
        let full = later(now, pace.cost(pace.capacity()));
        self.0.is_none_or(|tat| tat <= full)
    }

    /// Whether the key has no booking reaching past `now`.
    pub(super) fn idle(&self, now: Instant) -> bool {
        self.0.is_none_or(|tat| tat <= now)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_time_past_what_an_instant_holds_is_a_century_on() {
        let now = Instant::now();
        let century = Duration::from_secs(100 * 365 * 86_400);
        assert_eq!(
            later(now, Duration::from_secs(5)),
            now + Duration::from_secs(5)
        );
        assert_eq!(later(now, Duration::MAX), now + century);
    }

    #[tokio::test(start_paused = true)]
    async fn slots_are_spaced_at_the_rate_after_the_burst() {
        let pace = Pace::per_minute(600, 3).unwrap(); // 100 ms a send, 3 at once
        let now = Instant::now();
        let mut tat = Tat(None);
        let offsets: Vec<u128> = (0..6)
            .map(|_| {
                let slot = tat.slot(&pace, now, 1);
                tat.book(&pace, slot, 1);
                (slot - now).as_millis()
            })
            .collect();
        assert_eq!(offsets, [0, 0, 0, 100, 200, 300]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_hold_pushes_what_is_booked_ahead_and_empties_the_bucket_at_its_end() {
        let pace = Pace::per_minute(600, 3).unwrap(); // 100 ms a unit, 3 at once
        let now = Instant::now();
        let ms = Duration::from_millis;
        // Nothing booked ahead: the bucket is empty at the hold's end, so
        // the next unit goes one period after it.
        let mut tat = Tat(Some(now));
        tat.push_back(&pace, now, ms(5_000), now + ms(1_000));
        assert_eq!(tat.slot(&pace, now, 1), now + ms(1_100));
        // Booked ahead past the hold: those bookings move by the push.
        let mut tat = Tat(Some(now + ms(2_000)));
        tat.push_back(&pace, now, ms(1_000), now + ms(1_000));
        assert_eq!(tat.0, Some(now + ms(3_000)));
        // Booked ahead, but less than the hold's end: the empty bucket wins.
        let mut tat = Tat(Some(now + ms(200)));
        tat.push_back(&pace, now, ms(100), now + ms(1_000));
        assert_eq!(tat.0, Some(now + ms(1_300)));
        // Never used: the same empty bucket.
        let mut tat = Tat(None);
        tat.push_back(&pace, now, ms(5_000), now + ms(1_000));
        assert_eq!(tat.0, Some(now + ms(1_300)));
    }

    #[tokio::test(start_paused = true)]
    async fn a_key_is_idle_once_its_last_booking_is_due() {
        let pace = Pace::per_minute(600, 1).unwrap();
        let now = Instant::now();
        assert!(Tat(None).idle(now));
        let mut tat = Tat(None);
        tat.book(&pace, now, 1);
        assert!(!tat.idle(now), "booked until 100 ms on");
        assert!(tat.idle(now + Duration::from_millis(100)));
    }

    #[tokio::test(start_paused = true)]
    async fn a_new_pace_keeps_the_units_booked_ahead() {
        let slow = Pace::per_minute(600, 1).unwrap(); // 100 ms a unit
        let fast = Pace::per_minute(6_000, 1).unwrap(); // 10 ms a unit
        let now = Instant::now();
        let mut tat = Tat(Some(now + Duration::from_millis(500)));
        tat.repace(&slow, &fast, now);
        assert_eq!(tat.0, Some(now + Duration::from_millis(50)), "5 units");
        let mut past = Tat(Some(now));
        past.repace(&slow, &fast, now + Duration::from_secs(1));
        assert_eq!(past.0, Some(now), "nothing ahead: nothing moves");
    }

    #[test]
    fn capacity_is_the_burst() {
        assert_eq!(Pace::per_minute(600, 3).unwrap().capacity(), 3);
        assert_eq!(Pace::per_minute(60_000, 1).unwrap().capacity(), 1);
        assert!(Pace::per_minute(0, 1).is_none());
    }

    proptest::proptest! {
        #[test]
        fn any_arrivals_stay_inside_the_quota_and_in_order(
            per_minute in 1u32..100_000,
            capacity in 1u32..200,
            arrivals in proptest::collection::vec((0u64..5_000, 1u64..200), 1..60),
        ) {
            let pace = Pace::per_minute(per_minute, capacity).unwrap();
            let base = Instant::now();
            let mut tat = Tat(None);
            let mut now = base;
            let mut booked: Vec<(Instant, u64)> = Vec::new();
            for (gap_ms, cost) in arrivals {
                now += Duration::from_millis(gap_ms);
                let cost = cost.min(pace.capacity());
                let slot = tat.slot(&pace, now, cost);
                proptest::prop_assert!(slot >= now);
                if let Some((last, _)) = booked.last() {
                    proptest::prop_assert!(slot >= *last, "first in, first out");
                }
                tat.book(&pace, slot, cost);
                booked.push((slot, cost));
            }
            // Over any span of slots, the cost sent is at most a full bucket
            // plus what the rate refills in that span.
            for i in 0..booked.len() {
                let mut sent = 0u128;
                for j in i..booked.len() {
                    sent += u128::from(booked[j].1);
                    let span = (booked[j].0 - booked[i].0).as_nanos();
                    let refill = span / pace.interval.as_nanos().max(1);
                    proptest::prop_assert!(sent <= u128::from(pace.capacity()) + refill + 1);
                }
            }
        }
    }
}
