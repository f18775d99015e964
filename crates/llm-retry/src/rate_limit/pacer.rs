//! A key's pacer: numbered tickets, first in, first out, spaced at the
//! key's one request pace (the configured quota's, or the learned rate's),
//! with a burst after idle time.
//!
//! A waiting send holds a ticket, not a time. The ticket's time is
//! `base_time + (ticket − base_ticket − credit) × interval` under the pacer
//! *as it is when the send looks* (no earlier than `base_time`): a change of
//! rate or a hold re-bases the pacer at the first unreleased ticket, so
//! waiting sends follow it. Times grow with ticket numbers under any
//! pacer, so the queue stays first in, first out whoever wakes first.
//!
//! `credit` is the burst: the tickets that go at `base_time` beyond the
//! first. Idle time earns it back one interval at a time, up to the pace's
//! burst, as a GCRA bucket refills; a hold spends it (the provider said its
//! bucket is empty). Tickets given up come back with the queue's tail.

use std::time::Duration;
use tokio::time::Instant;

/// Given-up tickets remembered at once; past that, the oldest is forgotten
/// and its place is never given back (one interval lost, no more).
const MAX_ABANDONED: usize = 64;

/// The key's request pace: time between sends, and how many may go at once
/// (the same shape a fleet shares).
pub(super) use super::shared::SharedPace as Pace;

/// One key's pacer.
#[derive(Debug, Clone)]
pub(super) struct Pacer {
    /// The ticket that goes at `base_time`.
    base_ticket: u64,
    base_time: Instant,
    /// Tickets past the first that go at `base_time` too.
    credit: u64,
    /// The next ticket handed out.
    next_ticket: u64,
    /// The highest ticket released so far, and when the last one was.
    released: Option<(u64, Instant)>,
    /// Tickets at or after `base_ticket` whose sends were dropped before
    /// going, in order, until the tail reaches them.
    abandoned: Vec<u64>,
}

fn times(interval: Duration, n: u64) -> Duration {
    interval
        .checked_mul(u32::try_from(n).unwrap_or(u32::MAX))
        .unwrap_or(Duration::from_secs(u64::from(u32::MAX)))
}

impl Pacer {
    /// A pacer whose bucket is full at `now`, as a provider's is before
    /// its first request: `burst` tickets may go at once.
    pub(super) fn new(now: Instant, burst: u32) -> Pacer {
        Pacer {
            base_ticket: 0,
            base_time: now,
            credit: u64::from(burst.saturating_sub(1)),
            next_ticket: 0,
            released: None,
            abandoned: Vec::new(),
        }
    }

    /// When `ticket` may go at `interval` between sends.
    pub(super) fn time_of(&self, ticket: u64, interval: Duration) -> Instant {
        let ahead = ticket
            .saturating_sub(self.base_ticket)
            .saturating_sub(self.credit);
        let at = self.base_time.checked_add(times(interval, ahead));
        at.unwrap_or(self.base_time)
    }

    /// When `ticket` would have gone had the pace no base: before
    /// `base_time` by the burst credit it leaves unused, which the bucket
    /// keeps (so idle time adds to it rather than replacing it).
    fn bucket_time(&self, ticket: u64, interval: Duration) -> Instant {
        let used = ticket.saturating_sub(self.base_ticket);
        match self.credit.checked_sub(used) {
            Some(unused) if unused > 0 => self
                .base_time
                .checked_sub(times(interval, unused))
                .unwrap_or(self.base_time),
            _ => self.time_of(ticket, interval),
        }
    }

    /// When the next ticket handed out would go (at the earliest): until
    /// then the pacer holds a send back that a fresh one would not.
    pub(super) fn next_time(&self, interval: Duration) -> Instant {
        self.time_of(self.next_ticket, interval)
    }

    /// Hands out the next ticket to a send arriving at `now` that may go no
    /// sooner than `from` (the end of a hold or a window it waits for). A
    /// pacer fallen behind restarts with the burst its idle time earned (a
    /// full one after `burst` intervals or more, never more): at `from`
    /// when no earlier ticket waits (so sends queued behind a floor leave
    /// paced from it), else at `now` (the waiting ones are due already).
    pub(super) fn take(&mut self, now: Instant, from: Instant, pace: Pace) -> u64 {
        let ticket = self.next_ticket;
        let due = self.bucket_time(ticket, pace.interval);
        let waiting = self
            .released
            .map_or(self.base_ticket, |(t, _)| t.saturating_add(1))
            < ticket;
        let restart = if waiting { now } else { from };
        if due < restart {
            let most = u64::from(pace.burst.saturating_sub(1));
            // A pace without a burst earns none: no division then.
            let earned = if most == 0 {
                0
            } else {
                let idle = restart.duration_since(due).as_nanos() / pace.interval.as_nanos().max(1);
                u64::try_from(idle).unwrap_or(u64::MAX)
            };
            self.base_ticket = ticket;
            self.base_time = restart;
            self.credit = earned.min(most);
            self.abandoned.clear();
        }
        self.next_ticket = ticket.saturating_add(1);
        ticket
    }

    /// Takes back the ticket just handed out (its send was refused).
    pub(super) fn untake(&mut self) {
        self.next_ticket = self.next_ticket.saturating_sub(1);
    }

    /// `ticket`'s send will never go (dropped, or refused for its
    /// deadline). Given back with the tail: a ticket given up in the middle
    /// keeps its place (the sends behind it keep their times, so the queue
    /// never goes faster than the pace, and no waiting send need be woken),
    /// and once every ticket behind it is given up too, they all are taken
    /// back, and the next send takes the first of them.
    pub(super) fn abandon(&mut self, ticket: u64) {
        if ticket < self.base_ticket || ticket >= self.next_ticket {
            return;
        }
        if let Err(at) = self.abandoned.binary_search(&ticket) {
            self.abandoned.insert(at, ticket);
        }
        while self
            .abandoned
            .last()
            .is_some_and(|&last| last.saturating_add(1) == self.next_ticket)
        {
            self.abandoned.pop();
            self.next_ticket = self.next_ticket.saturating_sub(1);
        }
        if self.abandoned.len() > MAX_ABANDONED {
            self.abandoned.remove(0);
        }
    }

    /// `ticket` was sent at `now`.
    pub(super) fn release(&mut self, ticket: u64, now: Instant) {
        let highest = self.released.map_or(ticket, |(t, _)| t.max(ticket));
        self.released = Some((highest, now));
    }

    /// The rate or the earliest start changed: the first unreleased ticket
    /// goes one `interval` after the last release, and not before `floor`.
    /// A hold (`spent`) leaves no burst: its 429 said the bucket is empty.
    pub(super) fn rebase(&mut self, interval: Duration, floor: Instant, spent: bool) {
        let (ticket, at) = match self.released {
            Some((ticket, at)) => (ticket.saturating_add(1), at + interval),
            None => (0, floor),
        };
        if spent {
            self.credit = 0;
        }
        // Burst credit is counted from the base: what was released since
        // spent it.
        self.credit = self
            .credit
            .saturating_sub(ticket.saturating_sub(self.base_ticket));
        self.base_ticket = ticket.min(self.next_ticket);
        self.base_time = at.max(floor);
        self.abandoned.retain(|&a| a >= self.base_ticket);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    const MS: fn(u64) -> Duration = Duration::from_millis;

    fn pace(interval_ms: u64, burst: u32) -> Pace {
        Pace {
            interval: MS(interval_ms),
            burst,
        }
    }

    /// Offsets from `t0` of `n` tickets taken at `now`.
    fn take(p: &mut Pacer, n: usize, t0: Instant, now: Instant, pace: Pace) -> Vec<u64> {
        (0..n)
            .map(|_| {
                let t = p.take(now, now, pace);
                let at = p.time_of(t, pace.interval).max(now);
                p.release(t, at);
                u64::try_from((at - t0).as_millis()).unwrap()
            })
            .collect()
    }

    #[tokio::test(start_paused = true)]
    async fn a_burst_goes_at_once_then_the_rest_are_spaced() {
        let t0 = Instant::now();
        let mut p = Pacer::new(t0, 3);
        assert_eq!(take(&mut p, 5, t0, t0, pace(100, 3)), [0, 0, 0, 100, 200]);
    }

    #[tokio::test(start_paused = true)]
    async fn idle_time_earns_the_burst_back_one_interval_at_a_time() {
        // As a GCRA bucket refills: 3 at once, then 2 s idle at one a second
        // earn two back, not three.
        let t0 = Instant::now();
        let mut p = Pacer::new(t0, 3);
        let one_a_second = pace(1_000, 3);
        assert_eq!(take(&mut p, 3, t0, t0, one_a_second), [0, 0, 0]);
        let t2 = t0 + Duration::from_secs(2);
        assert_eq!(take(&mut p, 3, t0, t2, one_a_second), [2_000, 2_000, 3_000]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_burst_not_all_used_is_kept_and_idle_time_adds_to_it() {
        // 4 at once, one used at 0: 50 ms later the three left still go at
        // once (a bucket keeps what was not taken), then the pace.
        let t0 = Instant::now();
        let mut p = Pacer::new(t0, 4);
        let four = pace(100, 4);
        assert_eq!(take(&mut p, 1, t0, t0, four), [0]);
        let t50 = t0 + MS(50);
        assert_eq!(take(&mut p, 4, t0, t50, four), [50, 50, 50, 150]);
        // Never more than the burst, however long the idle time.
        let later = t0 + MS(10_000);
        assert_eq!(
            take(&mut p, 5, t0, later, four),
            [10_000, 10_000, 10_000, 10_000, 10_100]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn tickets_given_up_come_back_with_the_tail_and_a_floor_waits_for_the_queue() {
        let t0 = Instant::now();
        let one_a_second = pace(1_000, 1);
        let mut p = Pacer::new(t0, 1);
        let tickets: Vec<u64> = (0..4).map(|_| p.take(t0, t0, one_a_second)).collect();
        p.release(tickets[0], t0);
        p.abandon(tickets[1]);
        assert_eq!(
            p.next_time(one_a_second.interval),
            t0 + MS(4_000),
            "a gap keeps its place"
        );
        p.abandon(tickets[3]);
        p.abandon(tickets[2]);
        assert_eq!(
            p.next_time(one_a_second.interval),
            t0 + MS(1_000),
            "the tail took all back"
        );
        // A send waiting for a floor far off while an earlier ticket waits:
        // the earlier one keeps its time.
        let waiting = p.take(t0, t0, one_a_second);
        let floored = p.take(t0, t0 + MS(10_000), one_a_second);
        assert_eq!(p.time_of(waiting, one_a_second.interval), t0 + MS(1_000));
        assert_eq!(p.time_of(floored, one_a_second.interval), t0 + MS(2_000));
        // With none waiting, the queue behind a floor leaves paced from it.
        p.release(waiting, t0 + MS(1_000));
        p.release(floored, t0 + MS(10_000));
        let t20 = t0 + MS(20_000);
        let later = p.take(t0 + MS(15_000), t20, one_a_second);
        assert_eq!(p.time_of(later, one_a_second.interval), t20);
        let next = p.take(t0 + MS(15_000), t20, one_a_second);
        assert_eq!(p.time_of(next, one_a_second.interval), t20 + MS(1_000));
    }

    #[tokio::test(start_paused = true)]
    async fn a_ticket_taken_back_is_the_next_one_handed_out() {
        let t0 = Instant::now();
        let one_a_second = pace(1_000, 1);
        let mut p = Pacer::new(t0, 1);
        let first = p.take(t0, t0, one_a_second);
        let refused = p.take(t0, t0, one_a_second);
        p.untake();
        assert_eq!(p.take(t0, t0, one_a_second), refused);
        assert_eq!(p.time_of(refused, one_a_second.interval), t0 + MS(1_000));
        assert_ne!(first, refused);
    }

    #[tokio::test(start_paused = true)]
    async fn only_tickets_of_the_queue_are_given_back() {
        let t0 = Instant::now();
        let one_a_second = pace(1_000, 1);
        let mut p = Pacer::new(t0, 1);
        let tickets: Vec<u64> = (0..3).map(|_| p.take(t0, t0, one_a_second)).collect();
        // Not handed out yet: nothing to give back.
        p.abandon(tickets[2] + 1);
        assert_eq!(p.next_time(one_a_second.interval), t0 + MS(3_000));
        // Before the base (a hold re-based the pacer past it): nothing either.
        p.release(tickets[0], t0);
        p.rebase(one_a_second.interval, t0, false);
        p.abandon(tickets[0]);
        assert_eq!(p.next_time(one_a_second.interval), t0 + MS(3_000));
        // The tail itself, the base's own ticket included, comes back.
        p.abandon(tickets[2]);
        p.abandon(tickets[1]);
        assert_eq!(p.next_time(one_a_second.interval), t0 + MS(1_000));
    }

    #[tokio::test(start_paused = true)]
    async fn gaps_past_the_memory_bound_are_forgotten_oldest_first() {
        let t0 = Instant::now();
        let one_a_second = pace(1_000, 1);
        let mut p = Pacer::new(t0, 1);
        let n = MAX_ABANDONED as u64 + 2;
        let tickets: Vec<u64> = (0..=n).map(|_| p.take(t0, t0, one_a_second)).collect();
        // Every ticket but the last given up (two more than are kept), the
        // last one after: the two oldest gaps were forgotten, so the tail
        // stops short of them.
        for &ticket in &tickets[..tickets.len() - 1] {
            p.abandon(ticket);
        }
        assert_eq!(p.abandoned.len(), MAX_ABANDONED);
        p.abandon(tickets[tickets.len() - 1]);
        assert_eq!(p.next_ticket, tickets[2]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_rebase_goes_one_interval_after_the_last_release_not_before_its_floor() {
        let t0 = Instant::now();
        let one_a_second = pace(1_000, 1);
        let mut p = Pacer::new(t0, 1);
        let tickets: Vec<u64> = (0..3).map(|_| p.take(t0, t0, one_a_second)).collect();
        p.release(tickets[0], t0);
        p.abandon(tickets[1]);
        // Half the rate: the next unreleased ticket one new interval after
        // the release; the gap before the new base is forgotten.
        p.rebase(MS(2_000), t0, false);
        assert_eq!(p.time_of(tickets[1], MS(2_000)), t0 + MS(2_000));
        assert_eq!(p.time_of(tickets[2], MS(2_000)), t0 + MS(4_000));
        assert_eq!(p.abandoned, [tickets[1]]);
        // A hold to 10 s: the floor wins, and the gap is still the queue's.
        p.rebase(MS(2_000), t0 + MS(10_000), true);
        assert_eq!(p.time_of(tickets[1], MS(2_000)), t0 + MS(10_000));
        p.release(tickets[1], t0 + MS(10_000));
        p.rebase(MS(2_000), t0, false);
        assert!(p.abandoned.is_empty(), "behind the new base: forgotten");
        assert_eq!(p.time_of(tickets[2], MS(2_000)), t0 + MS(12_000));
    }
}
