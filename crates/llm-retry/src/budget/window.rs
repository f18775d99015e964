//! Counts over a sliding window, kept in a ring of fixed time slots.

use std::time::Duration;
use tokio::time::Instant;

/// Slots per window. An event counts while its slot is one of the newest
/// `SLOTS`: for between nine tenths of the window and the whole window.
pub(super) const SLOTS: u32 = 10;

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Slot {
    deposited: u64,
    withdrawn: u64,
}

/// Deposits and withdrawals of the last `SLOTS` slots, with running sums so
/// every operation is O(1).
#[derive(Debug)]
pub(super) struct SlotRing {
    origin: Instant,
    /// At least 1; a window beyond `u64` nanoseconds (584 years) saturates.
    slot_nanos: u64,
    slots: [Slot; SLOTS as usize],
    /// Number of the newest slot, counted from `origin`.
    head: u64,
    deposited: u64,
    withdrawn: u64,
}

impl SlotRing {
    /// A ring whose slot 0 starts at `origin`. `window` is a whole number of
    /// milliseconds (checked by `BudgetRule`), so a slot is a whole number of
    /// nanoseconds and ten slots are exactly the window.
    pub(super) fn new(origin: Instant, window: Duration) -> SlotRing {
        SlotRing {
            origin,
            slot_nanos: u64::try_from(window.as_nanos() / u128::from(SLOTS))
                .unwrap_or(u64::MAX)
                .max(1),
            slots: [Slot::default(); SLOTS as usize],
            head: 0,
            deposited: 0,
            withdrawn: 0,
        }
    }

    /// Moves the window forward to `now`, expiring whole slots.
    ///
    /// A `now` older than the newest slot (a caller that read the clock
    /// before another caller took the lock) counts as the newest slot: the
    /// ring's clock never runs backwards.
    pub(super) fn advance(&mut self, now: Instant) {
        // In `u64` nanoseconds (saturating after 584 years): one division
        // instead of a 128-bit one on every deposit.
        let elapsed = now.saturating_duration_since(self.origin);
        let nanos = elapsed
            .as_secs()
            .saturating_mul(1_000_000_000)
            .saturating_add(u64::from(elapsed.subsec_nanos()));
        let slot = nanos / self.slot_nanos;
        if slot <= self.head {
            return;
        }
        let expired = (slot - self.head).min(u64::from(SLOTS));
        for n in 1..=expired {
            let index = self.index(self.head.saturating_add(n));
            let old = std::mem::take(&mut self.slots[index]);
            self.deposited = self.deposited.saturating_sub(old.deposited);
            self.withdrawn = self.withdrawn.saturating_sub(old.withdrawn);
        }
        self.head = slot;
    }

    /// Records a deposit in the newest slot.
    pub(super) fn deposit(&mut self) {
        let index = self.index(self.head);
        let slot = &mut self.slots[index];
        slot.deposited = slot.deposited.saturating_add(1);
        self.deposited = self.deposited.saturating_add(1);
    }

    /// Records a withdrawal in the newest slot.
    pub(super) fn withdraw(&mut self) {
        let index = self.index(self.head);
        let slot = &mut self.slots[index];
        slot.withdrawn = slot.withdrawn.saturating_add(1);
        self.withdrawn = self.withdrawn.saturating_add(1);
    }

    /// `(deposited, withdrawn)` in the window.
    pub(super) fn totals(&self) -> (u64, u64) {
        (self.deposited, self.withdrawn)
    }

    fn index(&self, slot: u64) -> usize {
        // Below SLOTS, so the cast is exact.
        (slot % u64::from(SLOTS)) as usize
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    const MS: fn(u64) -> Duration = Duration::from_millis;

    /// Steps of (time since origin in ms, deposits, withdrawals) and the
    /// totals expected after each, for a 1 s window of 100 ms slots.
    #[test]
    fn whole_slots_expire_as_time_moves() {
        let t0 = Instant::now();
        let mut ring = SlotRing::new(t0, MS(1000));
        let steps: [(u64, u64, u64, (u64, u64)); 9] = [
            (0, 3, 1, (3, 1)),
            (99, 1, 0, (4, 1)),
            (100, 2, 2, (6, 3)),
            (999, 0, 0, (6, 3)),
            // Slot 0 (0–99 ms) leaves the window at 1000 ms.
            (1000, 0, 0, (2, 2)),
            (1099, 1, 0, (3, 2)),
            (1100, 0, 0, (1, 0)),
            // A stale reading counts as the newest slot.
            (500, 1, 0, (2, 0)),
            // A jump past the whole window empties it.
            (60_000, 0, 0, (0, 0)),
        ];
        for (at, deposits, withdrawals, totals) in steps {
            ring.advance(t0 + MS(at));
            (0..deposits).for_each(|_| ring.deposit());
            (0..withdrawals).for_each(|_| ring.withdraw());
            assert_eq!(ring.totals(), totals, "at {at} ms");
        }
        assert!(ring.slots.iter().all(|s| *s == Slot::default()));
    }

    #[test]
    fn a_far_future_instant_saturates() {
        let t0 = Instant::now();
        let mut ring = SlotRing::new(t0, MS(10));
        ring.deposit();
        // 2^60 s is about 10^21 slots of 1 ms: more than a u64 counts.
        ring.advance(t0.checked_add(Duration::from_secs(1 << 60)).unwrap());
        ring.deposit();
        assert_eq!(ring.totals(), (1, 0));
        ring.advance(t0);
        assert_eq!(ring.totals(), (1, 0));
    }
}
