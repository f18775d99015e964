//! Property: for any interleaving of deposits, retries and clock moves, the
//! budget grants exactly what a model keeping every timestamp grants, and
//! no grant ever takes more than the window that ends with it allows; and a
//! budget whose counts sit behind the [`BudgetStore`] seam answers the same.
#![allow(clippy::unwrap_used)]

use super::config::BudgetRule;
use super::window::SLOTS;
use super::{BudgetStore, LocalWindow, RetryBudget};
use proptest::prelude::*;
use proptest::test_runner::FileFailurePersistence;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

#[derive(Debug, Clone)]
enum Op {
    Deposit(u8),
    Withdraw(u8),
    /// Move the clock on by this many nanoseconds.
    Advance(u64),
}

/// `(ratio in ppm, min/s, window in ms)`, edges first.
fn config() -> impl Strategy<Value = (u32, u32, u64)> {
    let ppm = prop_oneof![
        Just(0u32),
        Just(200_000),
        Just(600_000),
        Just(1_000_000),
        0u32..=3_000_000,
        Just(1_000_000_000),
    ];
    let window = prop_oneof![Just(10u64), Just(1000), Just(1001), 10u64..=20_000];
    (ppm, 0u32..4, window)
}

fn ops(window_ms: u64) -> impl Strategy<Value = Vec<Op>> {
    let window = window_ms * 1_000_000;
    let slot = window / u64::from(SLOTS);
    let op = prop_oneof![
        3 => (1u8..8).prop_map(Op::Deposit),
        3 => (1u8..8).prop_map(Op::Withdraw),
        2 => (0..window / 4).prop_map(Op::Advance),
        1 => (0..window * 3).prop_map(Op::Advance),
        1 => prop_oneof![Just(slot), Just(slot - 1), Just(1)].prop_map(Op::Advance),
    ];
    proptest::collection::vec(op, 0..200)
}

/// The rule, over explicit timestamps (nanoseconds since the origin).
struct Model {
    ppm: u128,
    /// `min_per_sec × window_secs` in millionths.
    floor: u128,
    window: u128,
    deposits: Vec<u128>,
    grants: Vec<u128>,
}

impl Model {
    /// Events in the budget's window at `now`: those whose slot is one of
    /// the newest ten.
    fn counted(&self, events: &[u128], now: u128) -> u128 {
        let slot = self.window / u128::from(SLOTS);
        let newest = now / slot;
        events.iter().filter(|&&t| t / slot + 10 > newest).count() as u128
    }

    fn allowance(&self, deposits: u128) -> u128 {
        self.ppm * deposits + self.floor
    }

    fn allows(&self, now: u128) -> bool {
        let (d, w) = (
            self.counted(&self.deposits, now),
            self.counted(&self.grants, now),
        );
        (w + 1) * 1_000_000 <= self.allowance(d)
    }

    /// The grants of the last nine tenths of a window never exceed what
    /// the deposits of the whole window (plus the floor) allow.
    fn check_bound(&self, now: u128) -> Result<(), TestCaseError> {
        let recent = self.window * 9 / 10;
        let grants = self.grants.iter().filter(|&&t| t + recent >= now).count() as u128;
        let deposits = self
            .deposits
            .iter()
            .filter(|&&t| t + self.window > now)
            .count() as u128;
        prop_assert!(
            grants * 1_000_000 <= self.allowance(deposits),
            "{} grants against {} deposits at {} ns",
            grants,
            deposits,
            now
        );
        Ok(())
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        failure_persistence: Some(Box::new(FileFailurePersistence::WithSource("regressions"))),
        ..ProptestConfig::default()
    })]

    #[test]
    fn grants_are_exact_and_bounded(
        (ppm, min, window_ms, script) in config()
            .prop_flat_map(|(p, m, w)| (Just(p), Just(m), Just(w), ops(w)))
    ) {
        let ratio = f64::from(ppm) / 1e6;
        let window = Duration::from_millis(window_ms);
        let config = BudgetRule::new(ratio, min, window).unwrap();
        let origin = Instant::now();
        let budget = RetryBudget::from_config(config, origin);
        let store: Arc<dyn BudgetStore> = Arc::new(LocalWindow::starting_at(origin, window));
        let through_store = RetryBudget::from_config(config, origin).with_store(store);
        let mut model = Model {
            ppm: u128::from(ppm),
            floor: u128::from(min) * u128::from(window_ms) * 1000,
            window: window.as_nanos(),
            deposits: Vec::new(),
            grants: Vec::new(),
        };
        let mut now = 0u128;
        for op in script {
            let at = origin + Duration::from_nanos(u64::try_from(now).unwrap());
            match op {
                Op::Deposit(n) => (0..n).for_each(|_| {
                    budget.deposit_at(at);
                    through_store.deposit_at(at);
                    model.deposits.push(now);
                }),
                Op::Withdraw(n) => {
                    for _ in 0..n {
                        let expected = model.allows(now);
                        let got = budget.try_withdraw_at(at);
                        prop_assert_eq!(got.is_ok(), expected, "at {} ns", now);
                        prop_assert_eq!(through_store.try_withdraw_at(at), got);
                        if got.is_ok() {
                            model.grants.push(now);
                            model.check_bound(now)?;
                        }
                    }
                }
                Op::Advance(nanos) => now += u128::from(nanos),
            }
            let at = origin + Duration::from_nanos(u64::try_from(now).unwrap());
            let level = budget.level_at(at);
            prop_assert_eq!(through_store.level_at(at), level);
            let (d, w) = (model.counted(&model.deposits, now), model.counted(&model.grants, now));
            prop_assert_eq!(u128::from(level.deposited), d);
            prop_assert_eq!(u128::from(level.withdrawn), w);
            let whole = model.allowance(d) / 1_000_000;
            prop_assert_eq!(u128::from(level.available), whole.saturating_sub(w));
        }
    }

    /// Every ratio with at most six decimals is accepted as itself.
    #[test]
    fn every_whole_ppm_ratio_is_accepted(ppm in 0u32..=1_000_000_000) {
        let ratio = f64::from(ppm) / 1e6;
        let config = BudgetRule::new(ratio, 0, Duration::from_secs(1)).unwrap();
        prop_assert_eq!(config.available(0, 1_000_000), u64::from(ppm));
    }
}
