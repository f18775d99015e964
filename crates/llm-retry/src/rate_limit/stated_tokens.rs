//! A key's token quota as its provider states it: a bucket refilling at
//! the quota per minute, kept in step with the tokens each answer says are
//! left, that the key's costed sends book first in, first out. Small
//! requests keep flowing while a large one waits for its tokens, and the
//! large one is not starved by the small ones that came after it.

use std::time::Duration;
use tokio::time::Instant;

/// What the gate knows of one key's token quota.
#[derive(Debug, Clone, Copy)]
pub(super) struct StatedTokens {
    per_sec: f64,
    capacity: f64,
    /// Tokens at `at`, less those booked: below zero while sends queue.
    level: f64,
    at: Instant,
}

impl StatedTokens {
    /// A quota of `per_minute` with `remaining` left at `now`.
    pub(super) fn new(per_minute: u64, remaining: u64, now: Instant) -> StatedTokens {
        let capacity = per_minute as f64;
        StatedTokens {
            per_sec: capacity / 60.0,
            capacity,
            level: (remaining as f64).min(capacity),
            at: now,
        }
    }

    fn advance(&mut self, now: Instant) {
        if now > self.at {
            let refill = now.duration_since(self.at).as_secs_f64() * self.per_sec;
            self.level = (self.level + refill).min(self.capacity);
            self.at = now;
        }
    }

    /// An answer stated the quota at `now`: never more optimistic than the
    /// provider, who also counts what other clients of the key spent.
    pub(super) fn observed(&mut self, per_minute: u64, remaining: u64, now: Instant) {
        self.advance(now);
        let capacity = per_minute as f64;
        self.per_sec = capacity / 60.0;
        self.capacity = capacity;
        self.level = self.level.min(remaining as f64);
    }

    /// When a send of `cost` tokens may go if booked at `now`, not before
    /// `floor`.
    pub(super) fn slot(&mut self, cost: u64, now: Instant, floor: Instant) -> Instant {
        self.advance(now);
        let missing = cost as f64 - self.level;
        if missing <= 0.0 {
            return floor.max(now);
        }
        let wait = Duration::from_secs_f64((missing / self.per_sec).min(3_600.0));
        floor.max(now + wait)
    }

    /// Books `cost` tokens (after [`StatedTokens::slot`] at the same `now`).
    pub(super) fn book(&mut self, cost: u64) {
        self.level -= cost as f64;
    }

    /// A booked send never went: its tokens go back.
    pub(super) fn refund(&mut self, cost: u64) {
        self.level = (self.level + cost as f64).min(self.capacity);
    }

    /// Whether no booked send waits for its tokens any more at `now`.
    pub(super) fn settled(&self, now: Instant) -> bool {
        let refill = now.saturating_duration_since(self.at).as_secs_f64() * self.per_sec;
        self.level + refill >= 0.0
    }

    /// Whether a send of `cost` could ever fit.
    pub(super) fn fits(&self, cost: u64) -> bool {
        cost as f64 <= self.capacity
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: fn(u64) -> Duration = Duration::from_millis;

    #[tokio::test(start_paused = true)]
    async fn costed_sends_queue_for_their_tokens_in_order() {
        let t0 = Instant::now();
        // 60 000 a minute: 1 000 tokens a second, 500 left.
        let mut tokens = StatedTokens::new(60_000, 500, t0);
        assert_eq!(tokens.slot(300, t0, t0), t0, "a small one fits now");
        tokens.book(300);
        let large = tokens.slot(1_200, t0, t0);
        assert_eq!(large - t0, MS(1_000), "a large one waits for 1 000 more");
        tokens.book(1_200);
        let next = tokens.slot(100, t0, t0);
        assert_eq!(next - t0, MS(1_100), "and the next goes after it");
        // One that never went gives its tokens back.
        tokens.refund(1_200);
        assert_eq!(tokens.slot(100, t0, t0), t0);
    }

    #[tokio::test(start_paused = true)]
    async fn the_bucket_refills_at_the_quota_up_to_its_capacity() {
        let t0 = Instant::now();
        // 60 000 a minute, none left: 1 000 come back each second.
        let mut tokens = StatedTokens::new(60_000, 0, t0);
        assert_eq!(tokens.slot(1_000, t0, t0) - t0, MS(1_000));
        let t1 = t0 + MS(500);
        assert_eq!(tokens.slot(1_000, t1, t1) - t0, MS(1_000), "500 came back");
        tokens.book(500);
        let t2 = t0 + MS(2_000);
        assert_eq!(
            tokens.slot(1_000, t2, t2),
            t2,
            "1 500 more since, not counted twice"
        );
        assert_eq!(tokens.slot(1_501, t2, t2) - t2, MS(1));
        // Idle for two minutes: full, and no fuller.
        let t3 = t2 + Duration::from_secs(120);
        assert_eq!(tokens.slot(60_000, t3, t3), t3);
        tokens.book(60_000);
        assert_eq!(tokens.slot(1, t3, t3) - t3, MS(1));
    }

    #[tokio::test(start_paused = true)]
    async fn the_quota_is_settled_once_the_refill_covers_every_booking() {
        let t0 = Instant::now();
        let mut tokens = StatedTokens::new(60_000, 0, t0);
        assert!(tokens.settled(t0), "nothing booked");
        tokens.book(1_000);
        assert!(!tokens.settled(t0));
        assert!(!tokens.settled(t0 + MS(999)));
        assert!(tokens.settled(t0 + MS(1_000)), "1 000 came back");
    }

    #[tokio::test(start_paused = true)]
    async fn an_answer_can_only_lower_what_is_left() {
        let t0 = Instant::now();
        let mut tokens = StatedTokens::new(60_000, 5_000, t0);
        tokens.observed(60_000, 1_000, t0);
        assert_eq!(tokens.slot(2_000, t0, t0) - t0, MS(1_000));
        tokens.observed(60_000, 50_000, t0);
        assert_eq!(
            tokens.slot(2_000, t0, t0) - t0,
            MS(1_000),
            "others' spending is counted, our queue is kept"
        );
        assert!(tokens.fits(60_000) && !tokens.fits(60_001));
    }
}
