//! Each builder setting reaches the built policy and its accessors, and the
//! budget is spent as documented.

use super::*;
use crate::budget::RetryBudget;
use crate::report::StopReason;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

#[test]
fn the_error_body_peek_defaults_to_64_kib_and_can_be_set() {
    assert_eq!(DEFAULT_ERROR_BODY_PEEK, 65_536);
    assert_eq!(RetryPolicy::default().error_body_peek(), 65_536);
    let policy = RetryPolicy::builder()
        .error_body_peek(10)
        .build()
        .expect("valid");
    assert_eq!(policy.error_body_peek(), 10);
}

#[test]
fn the_wall_clock_set_is_the_one_read() {
    let at = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
    let policy = RetryPolicy::builder()
        .wall_clock(move || at)
        .build()
        .expect("valid");
    assert_eq!(policy.now(), at);
}

#[test]
fn the_context_overflow_cut_can_be_turned_off() {
    assert!(RetryPolicy::default()
        .config
        .recovery
        .overflow_cut
        .is_some());
    let policy = RetryPolicy::builder()
        .context_overflow_cut(None)
        .build()
        .expect("valid");
    assert!(policy.config.recovery.overflow_cut.is_none());
}

#[test]
fn the_attempt_header_is_off_by_default_and_kept_when_set() {
    assert!(RetryPolicy::default().attempt_header().is_none());
    let name = http::HeaderName::from_static("x-stainless-retry-count");
    let policy = RetryPolicy::builder()
        .attempt_header(name.clone())
        .build()
        .expect("valid");
    assert_eq!(policy.attempt_header(), Some(&name));
}

#[test]
fn the_budget_read_is_the_one_configured_and_shared() {
    assert!(RetryPolicy::default().budget().is_some());
    assert!(RetryPolicy::builder()
        .no_budget()
        .build()
        .expect("valid")
        .budget()
        .is_none());
    let budget = RetryBudget::new(0.0, 3, Duration::from_secs(10)).expect("valid");
    let policy = RetryPolicy::builder()
        .budget(budget.clone())
        .build()
        .expect("valid");
    budget.try_withdraw().expect("3 a second");
    let level = policy.budget().expect("configured").level();
    assert_eq!(level, budget.level(), "the policy reads the same budget");
}

#[test]
fn spending_the_budget_withdraws_and_admits_a_waiting_retry() {
    let budget = RetryBudget::new(0.0, 1, Duration::from_secs(10))
        .expect("valid")
        .with_max_waiting(1);
    let policy = RetryPolicy::builder()
        .budget(budget.clone())
        .build()
        .expect("valid");
    let before = budget.level();
    let permit = policy
        .spend_budget(Duration::from_millis(5))
        .expect("the floor allows a retry")
        .expect("a wait is admitted");
    assert_eq!(budget.level().withdrawn, before.withdrawn + 1);
    assert_eq!(budget.waiting(), 1);
    assert!(
        matches!(
            policy.spend_budget(Duration::from_millis(5)),
            Err(StopReason::AdmissionFull { max_waiting: 1 })
        ),
        "one retry may wait"
    );
    drop(permit);
    assert_eq!(budget.waiting(), 0);
    while budget.try_withdraw().is_ok() {}
    assert!(matches!(
        policy.spend_budget(Duration::ZERO),
        Err(StopReason::BudgetExhausted { .. })
    ));
    let unbounded = RetryPolicy::builder().no_budget().build().expect("valid");
    assert!(matches!(
        unbounded.spend_budget(Duration::from_millis(5)),
        Ok(None)
    ));
}

#[test]
fn the_hooks_given_are_the_ones_called() {
    #[derive(Default)]
    struct Count(Arc<AtomicU32>);
    impl crate::hooks::RetryHooks for Count {
        fn on_give_up(&self, _report: &crate::RetryReport) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }
    let calls = Arc::new(AtomicU32::new(0));
    let policy = RetryPolicy::default().with_hooks(Count(Arc::clone(&calls)));
    let report = crate::RetryReport::new(StopReason::Succeeded);
    policy.hooks().on_give_up(&report);
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

#[test]
fn debug_shows_the_settings() {
    let policy = format!("{:?}", RetryPolicy::default());
    for field in [
        "RetryPolicy",
        "backoff",
        "limits",
        "error_body_peek",
        "fallback",
    ] {
        assert!(policy.contains(field), "{field} missing from {policy}");
    }
    let builder = format!("{:?}", RetryPolicy::builder());
    for field in ["RetryPolicyBuilder", "initial_backoff", "max_replay_body"] {
        assert!(builder.contains(field), "{field} missing from {builder}");
    }
}
