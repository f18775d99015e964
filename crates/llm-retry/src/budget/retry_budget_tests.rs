//! Unit tests of `RetryBudget`: the rule, the window on a paused clock, the
//! message, and many threads on one budget.
#![allow(clippy::unwrap_used)]

use super::*;
use std::sync::Barrier;

const S: fn(u64) -> Duration = Duration::from_secs;
const MS: fn(u64) -> Duration = Duration::from_millis;

/// Withdraws until refused; returns how many were granted.
fn drain(budget: &RetryBudget) -> u64 {
    let mut granted = 0;
    while budget.try_withdraw().is_ok() {
        granted += 1;
        assert!(granted <= 1_000_000, "the budget never ran out");
    }
    granted
}

/// (ratio, min/s, window, deposits) → retries the deposits buy at once.
#[test]
fn deposits_buy_exactly_their_share() {
    let cases: [(f64, u32, Duration, u64, u64); 11] = [
        // tower's TpsBudget rounds 0.6 up to a whole retry per deposit.
        (0.6, 0, S(10), 1, 0),
        (0.6, 0, S(10), 2, 1),
        (0.6, 0, S(10), 5, 3),
        (0.6, 0, S(10), 10, 6),
        (0.2, 0, S(10), 4, 0),
        (0.2, 0, S(10), 50, 10),
        (0.2, 10, S(10), 0, 100),
        (0.2, 10, S(10), 50, 110),
        (0.0, 1, MS(2500), 7, 2),
        (1.5, 0, S(1), 3, 4),
        (0.0, 0, S(1), 1000, 0),
    ];
    for (ratio, min, window, deposits, retries) in cases {
        let budget = RetryBudget::new(ratio, min, window).unwrap();
        (0..deposits).for_each(|_| budget.deposit());
        let case = format!("{ratio} + {min}/s over {window:?}, {deposits} deposits");
        assert_eq!(budget.level().available, retries, "{case}");
        assert_eq!(drain(&budget), retries, "{case}");
        let level = budget.level();
        assert_eq!((level.withdrawn, level.available), (retries, 0), "{case}");
    }
}

#[test]
fn default_is_twenty_percent_plus_ten_a_second_over_ten_seconds() {
    let budget = RetryBudget::default();
    assert_eq!(budget.level().available, 100);
    (0..50).for_each(|_| budget.deposit());
    assert_eq!(drain(&budget), 110);
    assert_eq!(
        budget.level(),
        BudgetLevel {
            deposited: 50,
            withdrawn: 110,
            available: 0
        }
    );
    let refused = budget.try_withdraw().unwrap_err();
    assert_eq!(refused, WindowCounts::new(50, 110));
    let exhausted = budget.withdraw().unwrap_err();
    assert_eq!(
        exhausted.to_string(),
        "retry budget exhausted: 110 retries already spent against 50 requests \
         in the last 10 s (20% + 10/s)"
    );
}

#[test]
fn the_message_reads_well_in_the_singular_and_odd_windows() {
    let budget = RetryBudget::new(0.6, 0, MS(1500)).unwrap();
    budget.deposit();
    assert_eq!(
        budget.withdraw().unwrap_err().to_string(),
        "retry budget exhausted: 0 retries already spent against 1 request \
         in the last 1.5 s (60% + 0/s)"
    );
    // The refusal cost nothing: five deposits buy three.
    (0..4).for_each(|_| budget.deposit());
    assert_eq!(drain(&budget), 3);
    assert!(budget.try_withdraw().is_err());
}

#[test]
fn clones_share_one_budget() {
    fn shareable<T: Send + Sync + Clone + 'static>() {}
    shareable::<RetryBudget>();
    let budget = RetryBudget::new(0.5, 0, S(10)).unwrap();
    let clone = budget.clone();
    (0..4).for_each(|_| clone.deposit());
    assert_eq!(budget.try_withdraw(), Ok(()));
    assert_eq!(clone.try_withdraw(), Ok(()));
    assert!(budget.try_withdraw().is_err());
    assert_eq!(clone.level().withdrawn, 2);
}

/// Deposits fund retries until their slot leaves the window, on tokio's
/// paused clock: (advance, deposits, retries asked, retries granted).
#[tokio::test(start_paused = true)]
async fn deposits_expire_with_their_slot() {
    let budget = RetryBudget::new(0.5, 0, S(10)).unwrap();
    let steps: [(Duration, u64, u64, u64); 7] = [
        // 0 s: four deposits fund two retries.
        (S(0), 4, 1, 1),
        // Slot 0 is [0 s, 1 s): still in the window at 9.999 s.
        (MS(9999), 0, 5, 1),
        // 10 s: slot 0 has gone; the retry taken at 9.999 s has not.
        (MS(1), 0, 1, 0),
        (S(0), 4, 2, 1),
        // 15 s: six deposits fund three, two are spent.
        (S(5), 2, 5, 1),
        // 20 s: slots 9 and 10 have gone; 15 s funded one and spent it.
        (S(5), 0, 5, 0),
        // 25 s: only the new deposits count.
        (S(5), 2, 5, 1),
    ];
    let start = Instant::now();
    for (n, (advance, deposits, asked, granted)) in steps.into_iter().enumerate() {
        tokio::time::advance(advance).await;
        (0..deposits).for_each(|_| budget.deposit());
        let got = (0..asked).filter(|_| budget.try_withdraw().is_ok()).count();
        assert_eq!(got as u64, granted, "step {n} at {:?}", start.elapsed());
    }
    assert_eq!(start.elapsed(), S(25));
}

#[tokio::test(start_paused = true)]
async fn the_floor_refills_as_the_window_slides() {
    let budget = RetryBudget::new(0.0, 2, S(5)).unwrap();
    assert_eq!(drain(&budget), 10);
    tokio::time::advance(MS(4999)).await;
    assert_eq!(drain(&budget), 0);
    tokio::time::advance(MS(1)).await;
    assert_eq!(drain(&budget), 10);
    tokio::time::advance(S(2)).await;
    assert_eq!(budget.level().withdrawn, 10);
    tokio::time::advance(S(3)).await;
    assert_eq!(budget.level().available, 10);
}

#[test]
fn the_injected_clock_drives_the_window() {
    let t0 = Instant::now();
    let budget = RetryBudget::from_config(BudgetRule::new(1.0, 0, S(1)).unwrap(), t0);
    budget.deposit_at(t0);
    assert!(budget.try_withdraw_at(t0 + MS(999)).is_ok());
    budget.deposit_at(t0 + MS(999));
    assert_eq!(budget.level_at(t0 + MS(999)).available, 1);
    // The deposit of 0 ms expires; the retry it funded at 999 ms stays.
    assert_eq!(budget.level_at(t0 + S(1)).available, 0);
    assert_eq!(budget.level_at(t0 + S(2)).deposited, 0);
}

/// All threads deposit, then all withdraw until refused: the grants add up
/// to exactly what the deposits and floor allow — none lost, none extra.
#[test]
fn threads_share_the_budget_exactly() {
    const THREADS: usize = 8;
    const DEPOSITS: u64 = 5000;
    let budget = RetryBudget::new(0.3, 2, S(60)).unwrap();
    let barrier = Barrier::new(THREADS);
    let granted: u64 = std::thread::scope(|s| {
        let workers: Vec<_> = (0..THREADS)
            .map(|_| {
                let (budget, barrier) = (budget.clone(), &barrier);
                s.spawn(move || {
                    (0..DEPOSITS).for_each(|_| budget.deposit());
                    barrier.wait();
                    drain(&budget)
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().unwrap()).sum()
    });
    let deposits = THREADS as u64 * DEPOSITS;
    assert_eq!(granted, deposits * 3 / 10 + 2 * 60);
    let level = budget.level();
    assert_eq!((level.deposited, level.withdrawn), (deposits, granted));
}

/// Threads interleave deposits and retries: every grant fits the rule.
#[test]
fn threads_interleaving_stay_within_the_bound() {
    let budget = RetryBudget::new(0.25, 1, S(60)).unwrap();
    let granted: u64 = std::thread::scope(|s| {
        let workers: Vec<_> = (0..6)
            .map(|_| {
                let budget = budget.clone();
                s.spawn(move || {
                    let mut granted = 0;
                    for i in 0..20_000u64 {
                        if i % 3 == 0 {
                            budget.deposit();
                        } else if budget.try_withdraw().is_ok() {
                            granted += 1;
                        }
                    }
                    granted
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().unwrap()).sum()
    });
    let deposits = 6 * 20_000_u64.div_ceil(3);
    assert!(granted * 4 <= deposits + 4 * 60, "{granted} of {deposits}");
    let level = budget.level();
    assert_eq!((level.deposited, level.withdrawn), (deposits, granted));
    // Nothing lost either: what is left adds up to the exact allowance.
    assert_eq!(granted + drain(&budget), deposits / 4 + 60);
}

#[test]
fn a_name_is_kept_by_clones_which_still_share_the_counts() {
    assert_eq!(RetryBudget::default().name(), None);
    let budget = RetryBudget::new(0.0, 1, Duration::from_secs(10))
        .unwrap()
        .named("claude/primary");
    let clone = budget.clone();
    assert_eq!(clone.name(), Some("claude/primary"));
    let before = budget.level().available;
    clone.try_withdraw().unwrap();
    assert_eq!(
        budget.level().available,
        before - 1,
        "the counts are shared"
    );
}

/// Two budgets over one store count together, each by its own rule: the
/// seam a shared store plugs into. The store's name survives `named`.
#[test]
fn budgets_over_one_store_share_its_counts_and_keep_their_rules() {
    let store: Arc<dyn BudgetStore> = Arc::new(LocalWindow::new(S(10)));
    let generous = RetryBudget::new(0.6, 0, S(10))
        .unwrap()
        .with_store(Arc::clone(&store));
    let strict = RetryBudget::new(0.2, 0, S(10))
        .unwrap()
        .named("strict")
        .with_store(Arc::clone(&store));
    assert_eq!(strict.name(), Some("strict"));
    (0..5).for_each(|_| generous.deposit());
    assert_eq!(strict.level().deposited, 5, "the deposits are the store's");
    // 20% of five buys one retry, 60% three; the strict one is spent first.
    assert!(strict.try_withdraw().is_ok());
    let refused = strict.try_withdraw().unwrap_err();
    assert_eq!(refused, WindowCounts::new(5, 1));
    assert_eq!(drain(&generous), 2);
    assert_eq!(store.counts(Instant::now()), WindowCounts::new(5, 3));
    assert_eq!(generous.rule().ratio_ppm(), 600_000);
    assert_eq!(RetryBudget::default().rule().to_string(), "20% + 10/s");
}
