//! Counts over a sliding window, kept in a ring of fixed time slots: first
//! attempts counted without a lock, retries and the ring's turns under one.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;
use tokio::time::Instant;

/// Slots per window. An event counts while its slot is one of the newest
/// `SLOTS`: for between nine tenths of the window and the whole window.
pub(super) const SLOTS: u32 = 10;
const RING: usize = SLOTS as usize;

/// Deposits and withdrawals of the last `SLOTS` slots.
///
/// Slot `n` (counted from `origin`) lives at index `n % SLOTS`. A deposit
/// whose `now` falls in the newest slot, or before it, adds to the newest
/// slot's atomic counter and takes no lock: the lock is taken only by the
/// first deposit past the newest slot's end (once a slot, a tenth of the
/// window), by withdrawals and by readings.
///
/// Invariant: `head` moves forward only under `locked`, and only after the
/// slots it moves over are emptied. A deposit that reads `head` therefore
/// adds to a slot still in the window, or, if the ring has since turned a
/// whole window past it, to one emptied before its add (the deposit then
/// counts from a newer slot, as a stale `now` does) or after (it expires).
#[derive(Debug)]
pub(super) struct SlotRing {
    origin: Instant,
    /// At least 1; a window beyond `u64` nanoseconds (584 years) saturates.
    slot_nanos: u64,
    /// Number of the newest slot, counted from `origin`.
    head: AtomicU64,
    /// First attempts of each slot.
    deposits: [AtomicU64; RING],
    /// Retries of each slot, and their sum.
    locked: Mutex<Withdrawals>,
}

#[derive(Debug, Default)]
struct Withdrawals {
    slots: [u64; RING],
    total: u64,
}

/// The ring under its lock, moved to the time it was taken at.
pub(super) struct Turned<'a> {
    ring: &'a SlotRing,
    withdrawals: MutexGuard<'a, Withdrawals>,
    head: u64,
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
            head: AtomicU64::new(0),
            deposits: Default::default(),
            locked: Mutex::new(Withdrawals::default()),
        }
    }

    /// Records a deposit at `now`. Lock-free unless `now` is past the newest
    /// slot; a `now` older than the newest slot counts as the newest slot.
    #[inline]
    pub(super) fn deposit(&self, now: Instant) {
        let head = self.head.load(Ordering::Acquire);
        // The end of the newest slot, in nanoseconds since `origin`: a
        // multiplication, where finding `now`'s slot would be a division.
        if self.nanos(now) < head.saturating_add(1).saturating_mul(self.slot_nanos) {
            // Relaxed: the counter alone is shared; readers take the lock.
            self.deposits[index(head)].fetch_add(1, Ordering::Relaxed);
            return;
        }
        let turned = self.turn(now);
        self.deposits[index(turned.head)].fetch_add(1, Ordering::Relaxed);
    }

    /// Takes the lock and moves the window forward to `now`, expiring
    /// whole slots. A `now` older than the newest slot (a caller that read
    /// the clock before another caller moved the ring) counts as the newest
    /// slot: the ring's clock never runs backwards.
    pub(super) fn turn(&self, now: Instant) -> Turned<'_> {
        // Nothing under the lock panics (all arithmetic saturates), so a
        // poisoned lock still guards consistent counts.
        let mut withdrawals = self.locked.lock().unwrap_or_else(PoisonError::into_inner);
        // Written only under the lock, which this thread holds.
        let head = self.head.load(Ordering::Relaxed);
        let slot = self.nanos(now) / self.slot_nanos;
        if slot <= head {
            return Turned {
                ring: self,
                withdrawals,
                head,
            };
        }
        let expired = (slot - head).min(u64::from(SLOTS));
        for n in 1..=expired {
            let index = index(head.saturating_add(n));
            self.deposits[index].store(0, Ordering::Relaxed);
            let old = std::mem::take(&mut withdrawals.slots[index]);
            withdrawals.total = withdrawals.total.saturating_sub(old);
        }
        // Release: a deposit that reads the new head finds its slot
        // already emptied, and adds after the emptying.
        self.head.store(slot, Ordering::Release);
        Turned {
            ring: self,
            withdrawals,
            head: slot,
        }
    }

    /// `now` in `u64` nanoseconds since `origin` (saturating after 584
    /// years, and at 0 before `origin`).
    #[inline]
    fn nanos(&self, now: Instant) -> u64 {
        let elapsed = now.saturating_duration_since(self.origin);
        elapsed
            .as_secs()
            .saturating_mul(1_000_000_000)
            .saturating_add(u64::from(elapsed.subsec_nanos()))
    }
}

impl Turned<'_> {
    /// Records a withdrawal in the newest slot.
    pub(super) fn withdraw(&mut self) {
        let index = index(self.head);
        let withdrawals = &mut *self.withdrawals;
        withdrawals.slots[index] = withdrawals.slots[index].saturating_add(1);
        withdrawals.total = withdrawals.total.saturating_add(1);
    }

    /// `(deposited, withdrawn)` in the window. Deposits made while this is
    /// read are counted or not, each as a whole.
    pub(super) fn totals(&self) -> (u64, u64) {
        let deposited = self.ring.deposits.iter().fold(0u64, |sum, slot| {
            sum.saturating_add(slot.load(Ordering::Relaxed))
        });
        (deposited, self.withdrawals.total)
    }
}

#[inline]
fn index(slot: u64) -> usize {
    // Below SLOTS, so the cast is exact.
    (slot % u64::from(SLOTS)) as usize
}

#[cfg(test)]
#[path = "window_tests.rs"]
mod tests;
