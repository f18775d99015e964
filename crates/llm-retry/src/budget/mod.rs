//! May we spend another attempt?
//!
//! Two kinds of bound, checked together by the policy:
//!
//! - Per request, [`Limits`]: attempts, total elapsed time (waits included)
//!   and the longest server-named wait honoured.
//! - Shared by every request of a client or route, [`RetryBudget`]: retries
//!   may add at most a share of the recent first attempts (default 20%) plus
//!   a small floor (default 10 a second, over a 10 s window), so a crowd of
//!   clients cannot turn an outage into a retry storm; and, optionally, at
//!   most `n` retries of the budget may be waiting at once
//!   ([`RetryBudget::with_max_waiting`]).
//!
//! A request deposits once, on its first send; each retry must withdraw and,
//! if it is going to sleep first, hold a [`WaitPermit`] for the whole sleep.
//! Take the permit first: a refused withdrawal then costs nothing, and a
//! dropped permit frees its place at once.
//!
//! ```
//! use llm_retry::budget::{RetryBudget, WaitPermit};
//! use llm_retry::BoxError;
//!
//! /// Before a retry that sleeps: a place to wait, then a retry's worth.
//! fn admit(budget: &RetryBudget) -> Result<WaitPermit, BoxError> {
//!     let permit = budget.try_admit_wait()?;
//!     budget.try_withdraw()?;
//!     Ok(permit) // hold it until the resend
//! }
//!
//! let budget = RetryBudget::default().with_max_waiting(64);
//! budget.deposit(); // the first send of a request
//! let permit = admit(&budget)?;
//! assert_eq!(budget.level().withdrawn, 1);
//! drop(permit);
//! # Ok::<(), BoxError>(())
//! ```

mod admission;
mod config;
mod limits;
#[cfg(test)]
mod proptests;
mod retry_budget;
mod store;
mod window;

pub use admission::{AdmissionFull, WaitPermit};
pub use config::BudgetRule;
pub(crate) use limits::Refusal;
pub use limits::{Limits, DEFAULT_MAX_ELAPSED, DEFAULT_MAX_RETRIES, DEFAULT_MAX_SERVER_WAIT};
pub use retry_budget::{BudgetExhausted, BudgetLevel, RetryBudget};
pub use store::{BudgetStore, LocalWindow, WindowCounts};
