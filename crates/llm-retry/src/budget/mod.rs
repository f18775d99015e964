//! May we spend another attempt?
//!
//! Two kinds of bound, checked together by the policy:
//!
//! - Per request, the limits set on the
//!   [`RetryPolicyBuilder`](crate::RetryPolicyBuilder): attempts, total
//!   elapsed time (waits included) and the longest server-named wait
//!   honoured.
//! - Shared by every request of a client or route, [`RetryBudget`]: retries
//!   may add at most a share of the recent first attempts (default 20%) plus
//!   a small floor (default 10 a second, over a 10 s window), so a crowd of
//!   clients cannot turn an outage into a retry storm; and, optionally, at
//!   most `n` retries of the budget may be waiting at once
//!   ([`RetryBudget::with_max_waiting`]).
//!
//! A request deposits once, on its first send; each retry must withdraw
//! and, if it is going to sleep first, hold a place among the waiting
//! retries for the whole sleep (taken first: a refused withdrawal then
//! costs nothing, and a cancelled sleep frees its place at once). The retry
//! layer does all of this; share one budget by handing clones of it to
//! every policy ([`RetryPolicyBuilder::budget`](crate::RetryPolicyBuilder::budget)).
//!
//! ```
//! use llm_retry::budget::RetryBudget;
//!
//! let budget = RetryBudget::default().with_max_waiting(64);
//! budget.deposit(); // the first send of a request
//! assert!(budget.try_withdraw().is_ok()); // a retry's worth
//! assert_eq!(budget.level().withdrawn, 1);
//! assert_eq!(budget.waiting(), 0);
//! ```

mod admission;
mod config;
mod limits;
#[cfg(test)]
mod property_tests;
mod retry_budget;
mod store;
mod window;

pub(crate) use admission::WaitPermit;
pub use config::BudgetRule;
pub(crate) use limits::{Limits, Refusal};
pub use retry_budget::{BudgetLevel, RetryBudget};
pub use store::{BudgetStore, LocalWindow, WindowCounts};
