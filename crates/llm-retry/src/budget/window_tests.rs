//! The ring's slots on an injected clock, and deposits racing its turns.
#![allow(clippy::unwrap_used)]

use super::*;
use std::sync::Barrier;

const MS: fn(u64) -> Duration = Duration::from_millis;

/// Steps of (time since origin in ms, deposits, withdrawals) and the
/// totals expected after each, for a 1 s window of 100 ms slots.
#[test]
fn whole_slots_expire_as_time_moves() {
    let t0 = Instant::now();
    let ring = SlotRing::new(t0, MS(1000));
    let steps: [(u64, u64, u64, (u64, u64)); 10] = [
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
        // Deposits alone turn the ring too: 1300 ms expires 200–399 ms.
        (1300, 1, 0, (3, 0)),
        // A jump past the whole window empties it.
        (60_000, 0, 0, (0, 0)),
    ];
    for (at, deposits, withdrawals, totals) in steps {
        let now = t0 + MS(at);
        (0..deposits).for_each(|_| ring.deposit(now));
        let mut turned = ring.turn(now);
        (0..withdrawals).for_each(|_| turned.withdraw());
        assert_eq!(turned.totals(), totals, "at {at} ms");
    }
    assert!(ring.deposits.iter().all(|d| d.load(Ordering::Relaxed) == 0));
    assert_eq!(ring.locked.lock().unwrap().slots, [0; RING]);
}

#[test]
fn a_far_future_instant_saturates() {
    let t0 = Instant::now();
    let ring = SlotRing::new(t0, MS(10));
    ring.deposit(t0);
    // 2^60 s is about 10^21 slots of 1 ms: more than a u64 counts.
    let far = t0.checked_add(Duration::from_secs(1 << 60)).unwrap();
    ring.deposit(far);
    assert_eq!(ring.turn(far).totals(), (1, 0));
    ring.deposit(far);
    assert_eq!(ring.turn(t0).totals(), (2, 0));
}

/// Threads deposit at times that walk through one window's ten slots, so
/// the ring turns under them while they add, and a reader turns it too:
/// every deposit stays in the window, so every one is counted, none twice.
#[test]
fn deposits_racing_the_turns_are_all_counted() {
    const THREADS: u64 = 4;
    const PER_SLOT: u64 = 2_000;
    let t0 = Instant::now();
    let ring = SlotRing::new(t0, MS(1000));
    let barrier = Barrier::new(THREADS as usize + 1);
    std::thread::scope(|s| {
        for thread in 0..THREADS {
            let (ring, barrier) = (&ring, &barrier);
            s.spawn(move || {
                barrier.wait();
                for slot in 0..u64::from(SLOTS) {
                    for i in 0..PER_SLOT {
                        // Spread over the slot, offset per thread, so some
                        // threads pass a slot's end while others add.
                        let at = slot * 100_000 + (i * 50 + thread * 13) % 100_000;
                        ring.deposit(t0 + Duration::from_micros(at));
                    }
                }
            });
        }
        let (ring, barrier) = (&ring, &barrier);
        s.spawn(move || {
            barrier.wait();
            for at in (0..1000).step_by(7) {
                let _ = ring.turn(t0 + MS(at)).totals();
            }
        });
    });
    let end = t0 + MS(999);
    let expected = THREADS * PER_SLOT * u64::from(SLOTS);
    assert_eq!(ring.turn(end).totals(), (expected, 0));
}
