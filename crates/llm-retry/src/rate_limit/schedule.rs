//! The release schedule of a learned rate: numbered tickets, first in,
//! first out, whose times follow the rate as it changes.
//!
//! A fixed quota can hand out fixed slots. A learned rate cannot: it moves
//! while sends wait, and a slot computed at yesterday's rate keeps a queue
//! too slow after an increase or too fast after a 429. So a waiting send
//! holds a ticket, not a time. The ticket's time is `base_time + (ticket −
//! base_ticket) × interval` under the schedule *as it is when the send
//! looks*; every change of rate or hold re-bases the schedule at the first
//! unreleased ticket. Times grow with ticket numbers under any schedule,
//! so the queue stays first in, first out whoever wakes first.

use std::time::Duration;
use tokio::time::Instant;

/// Abandoned tickets remembered at once; past that, the oldest is
/// forgotten and its place stays empty (one interval lost, no more).
const MAX_ABANDONED: usize = 64;

/// One key's schedule.
#[derive(Debug, Clone)]
pub(super) struct Schedule {
    /// The ticket that goes at `base_time`.
    base_ticket: u64,
    base_time: Instant,
    /// The next ticket handed out.
    next_ticket: u64,
    /// The highest ticket released so far, and when the last one was.
    released: Option<(u64, Instant)>,
    /// Tickets at or after `base_ticket` whose sends were dropped before
    /// going, in order: the tickets behind them move up.
    abandoned: Vec<u64>,
}

impl Schedule {
    pub(super) fn new(now: Instant) -> Schedule {
        Schedule {
            base_ticket: 0,
            base_time: now,
            next_ticket: 0,
            released: None,
            abandoned: Vec::new(),
        }
    }

    /// When `ticket` may go at `interval` between sends.
    pub(super) fn time_of(&self, ticket: u64, interval: Duration) -> Instant {
        let skipped = self.abandoned.partition_point(|&a| a < ticket) as u64;
        let ahead = ticket
            .saturating_sub(self.base_ticket)
            .saturating_sub(skipped);
        let offset = interval
            .checked_mul(u32::try_from(ahead).unwrap_or(u32::MAX))
            .unwrap_or(Duration::from_secs(u64::from(u32::MAX)));
        self.base_time.checked_add(offset).unwrap_or(self.base_time)
    }

    /// When the next ticket handed out would go (at the earliest): until
    /// then the schedule holds a send back that a fresh one would not.
    pub(super) fn next_time(&self, interval: Duration) -> Instant {
        self.time_of(self.next_ticket, interval)
    }

    /// Hands out the next ticket at `now`. A schedule fallen behind (an
    /// idle key) restarts at `now`, so idle time never becomes a burst.
    pub(super) fn take(&mut self, now: Instant, interval: Duration) -> u64 {
        let ticket = self.next_ticket;
        if self.time_of(ticket, interval) < now {
            self.base_ticket = ticket;
            self.base_time = now;
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
    /// deadline) at `now`: the tickets behind it move up one place, unless
    /// its time had passed. Then its place is behind the queue: the ones
    /// behind it are due by their own times, and moved up they would go
    /// at once after the send before them.
    pub(super) fn abandon(&mut self, ticket: u64, now: Instant, interval: Duration) {
        if ticket < self.base_ticket
            || ticket >= self.next_ticket
            || self.time_of(ticket, interval) < now
        {
            return;
        }
        if let Err(at) = self.abandoned.binary_search(&ticket) {
            self.abandoned.insert(at, ticket);
            if self.abandoned.len() > MAX_ABANDONED {
                self.abandoned.remove(0);
            }
        }
    }

    /// `ticket` was sent at `now`.
    pub(super) fn release(&mut self, ticket: u64, now: Instant) {
        let highest = self.released.map_or(ticket, |(t, _)| t.max(ticket));
        self.released = Some((highest, now));
    }

    /// The rate or the earliest start changed: the first unreleased ticket
    /// goes one `interval` after the last release, and not before `floor`.
    pub(super) fn rebase(&mut self, interval: Duration, floor: Instant) {
        let (ticket, at) = match self.released {
            Some((ticket, at)) => (ticket.saturating_add(1), at + interval),
            None => (0, floor),
        };
        self.base_ticket = ticket.min(self.next_ticket);
        self.base_time = at.max(floor);
        let base = self.base_ticket;
        self.abandoned.retain(|&a| a >= base);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    const MS: fn(u64) -> Duration = Duration::from_millis;

    #[tokio::test(start_paused = true)]
    async fn tickets_follow_the_rate_in_force_when_they_look() {
        let t0 = Instant::now();
        let mut s = Schedule::new(t0);
        let tickets: Vec<u64> = (0..5).map(|_| s.take(t0, MS(100))).collect();
        assert_eq!(tickets, [0, 1, 2, 3, 4]);
        assert_eq!(s.time_of(4, MS(100)) - t0, MS(400));
        // Ticket 0 goes; then the rate doubles: the rest move earlier, in order.
        s.release(0, t0);
        s.rebase(MS(50), t0);
        let times: Vec<Duration> = (1..5).map(|t| s.time_of(t, MS(50)) - t0).collect();
        assert_eq!(times, [MS(50), MS(100), MS(150), MS(200)]);
        // A hold until 1 s: the queue starts there, paced.
        s.rebase(MS(50), t0 + MS(1000));
        assert_eq!(s.time_of(1, MS(50)) - t0, MS(1000));
        assert_eq!(s.time_of(3, MS(50)) - t0, MS(1100));
        assert_eq!(s.next_time(MS(50)) - t0, MS(1200), "one after the last");
    }

    #[tokio::test(start_paused = true)]
    async fn an_idle_key_does_not_bank_a_burst() {
        let t0 = Instant::now();
        let mut s = Schedule::new(t0);
        let first = s.take(t0, MS(100));
        s.release(first, t0);
        let later = t0 + Duration::from_secs(60);
        let a = s.take(later, MS(100));
        let b = s.take(later, MS(100));
        assert_eq!(s.time_of(a, MS(100)), later);
        assert_eq!(s.time_of(b, MS(100)) - later, MS(100));
    }

    #[tokio::test(start_paused = true)]
    async fn an_abandoned_ticket_gives_its_place_up() {
        let t0 = Instant::now();
        let mut s = Schedule::new(t0);
        let tickets: Vec<u64> = (0..4).map(|_| s.take(t0, MS(100))).collect();
        s.abandon(tickets[1], t0, MS(100));
        let times: Vec<Duration> = tickets[2..]
            .iter()
            .map(|&t| s.time_of(t, MS(100)) - t0)
            .collect();
        assert_eq!(times, [MS(100), MS(200)]);
        // Out of range or twice: nothing more moves.
        s.abandon(tickets[1], t0, MS(100));
        s.abandon(99, t0, MS(100));
        assert_eq!(s.time_of(tickets[3], MS(100)) - t0, MS(200));
        // Once the schedule moves past it, it is forgotten.
        s.release(tickets[0], t0);
        s.release(tickets[2], t0 + MS(100));
        s.rebase(MS(100), t0 + MS(100));
        assert!(s.abandoned.is_empty());
        assert_eq!(s.time_of(tickets[3], MS(100)) - t0, MS(200));
    }

    #[tokio::test(start_paused = true)]
    async fn the_next_ticket_takes_the_place_of_a_dropped_last_one() {
        // Tickets at 0, 100 and 200 ms; the last is dropped: the next
        // would go at 200 ms, and not sooner.
        let t0 = Instant::now();
        let mut s = Schedule::new(t0);
        let tickets: Vec<u64> = (0..3).map(|_| s.take(t0, MS(100))).collect();
        s.abandon(tickets[2], t0, MS(100));
        assert_eq!(s.next_time(MS(100)) - t0, MS(200));
        let next = s.take(t0, MS(100));
        assert_eq!(s.time_of(next, MS(100)) - t0, MS(200));
    }

    #[tokio::test(start_paused = true)]
    async fn only_a_ticket_still_in_the_queue_can_be_abandoned() {
        let t0 = Instant::now();
        let mut s = Schedule::new(t0);
        let tickets: Vec<u64> = (0..4).map(|_| s.take(t0, MS(100))).collect();
        // The first in the queue: all behind it move up.
        s.abandon(tickets[0], t0, MS(100));
        assert_eq!(s.time_of(tickets[1], MS(100)), t0);
        // Past the queue's start: nothing moves.
        s.release(tickets[1], t0);
        s.rebase(MS(100), t0);
        let before = s.time_of(tickets[3], MS(100));
        s.abandon(tickets[0], t0, MS(100));
        s.abandon(tickets[1], t0, MS(100));
        assert_eq!(s.time_of(tickets[3], MS(100)), before);
        assert!(s.abandoned.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn at_most_the_last_64_abandoned_tickets_are_remembered() {
        let t0 = Instant::now();
        let mut s = Schedule::new(t0);
        let tickets: Vec<u64> = (0..70).map(|_| s.take(t0, MS(1))).collect();
        for &ticket in &tickets[..66] {
            s.abandon(ticket, t0, MS(1));
        }
        assert_eq!(s.abandoned.len(), MAX_ABANDONED);
        // Of the 66 ahead of it, the 64 remembered move it up.
        assert_eq!(s.time_of(tickets[69], MS(1)) - t0, MS(69 - 64));
    }

    #[tokio::test(start_paused = true)]
    async fn a_dropped_ticket_whose_time_had_come_moves_no_one_up() {
        // A send past its turn (waiting for its tokens, say) is dropped:
        // the ones behind it keep their places, or they would go sooner
        // than the rate, at once after the send before them.
        let t0 = Instant::now();
        let mut s = Schedule::new(t0);
        let stale = s.take(t0, MS(100));
        let now = t0 + MS(100);
        let first = s.take(now, MS(100));
        s.abandon(stale, now, MS(100));
        let second = s.take(now, MS(100));
        let at = |s: &Schedule, ticket| s.time_of(ticket, MS(100)).max(now);
        assert_eq!(at(&s, second) - at(&s, first), MS(100));

        // The same with the one behind it already sent at its time.
        let mut s = Schedule::new(t0);
        let tickets: Vec<u64> = (0..3).map(|_| s.take(t0, MS(100))).collect();
        s.release(tickets[1], t0 + MS(100));
        let now = t0 + MS(150);
        s.abandon(tickets[0], now, MS(100));
        assert_eq!(
            at(&s, tickets[2]) - t0,
            MS(200),
            "100 ms after the last send"
        );
    }

    proptest::proptest! {
        #[test]
        fn times_grow_with_tickets_under_any_changes(
            steps in proptest::collection::vec((0u8..4, 1u64..200, 0u64..300), 1..80),
        ) {
            let t0 = Instant::now();
            let mut s = Schedule::new(t0);
            let mut now = t0;
            let mut interval = MS(10);
            let mut waiting: Vec<u64> = Vec::new();
            for (op, ms, gap) in steps {
                now += MS(gap);
                match op {
                    0 => waiting.push(s.take(now, interval)),
                    1 => {
                        if !waiting.is_empty() {
                            let ticket = waiting.remove(0);
                            s.release(ticket, now);
                        }
                    }
                    2 => {
                        interval = MS(ms);
                        s.rebase(interval, now);
                    }
                    _ => s.rebase(interval, now + MS(ms)),
                }
                for pair in waiting.windows(2) {
                    let (a, b) = (pair[0], pair[1]);
                    let (ta, tb) = (s.time_of(a, interval), s.time_of(b, interval));
                    proptest::prop_assert!(ta <= tb, "first in, first out");
                    let spacing = interval * u32::try_from(b - a).unwrap();
                    proptest::prop_assert!(tb - ta <= spacing, "never slower than the rate");
                    if a >= s.base_ticket {
                        proptest::prop_assert_eq!(tb - ta, spacing, "never faster either");
                    }
                }
            }
        }
    }
}
