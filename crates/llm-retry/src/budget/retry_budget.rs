//! [`RetryBudget`]: retries as a share of recent first attempts, shared by
//! every request of a client or route.

use super::admission::Admission;
use super::config::{write_decimal, BudgetRule};
use super::store::{BudgetStore, LocalWindow, WindowCounts};
use crate::ConfigError;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// A retry budget shared by every request of a client or route: retries may
/// add at most `ratio` extra load on top of the first attempts, plus a floor
/// of `min_per_sec` retries a second so a quiet client can still retry.
///
/// Each first attempt [deposits](RetryBudget::deposit); each retry
/// [withdraws](RetryBudget::try_withdraw). A withdrawal is granted iff
///
/// ```text
/// withdrawn_in_window + 1 <= ratio × deposited_in_window + min_per_sec × window_secs
/// ```
///
/// evaluated exactly in integers (the ratio is kept in parts per million), so
/// a 0.6 ratio buys three retries for five requests and none for one.
///
/// The window slides in ten slots of a tenth of the window each, timed by
/// [`tokio::time::Instant`] (a paused test clock moves it). An event counts
/// until its whole slot leaves the window: for between 0.9 and 1 window.
///
/// Cloning is cheap and clones share the budget. By default the counts sit
/// in a [`LocalWindow`]: a deposit adds to its slot's atomic counter, with
/// no lock (the first deposit past a slot's end, once a tenth of the
/// window, moves the window on under a `std::sync::Mutex`); a withdrawal
/// or a reading takes that lock for an O(1), allocation-free critical
/// section that never spans an `.await`. [`RetryBudget::with_store`] moves
/// the counts to a store shared by replicas. The
/// admission of waiting retries is lock-free.
#[derive(Debug, Clone)]
pub struct RetryBudget {
    pub(super) shared: Arc<Shared>,
    pub(super) admission: Arc<Admission>,
    /// The `budget` label of its gauge, when named.
    pub(super) name: Option<Arc<str>>,
}

#[derive(Debug)]
pub(super) struct Shared {
    config: BudgetRule,
    counts: Counts,
}

/// The default store inline (no virtual call on the common path), or one
/// given by the user.
#[derive(Debug)]
enum Counts {
    Local(LocalWindow),
    Store(Arc<dyn BudgetStore>),
}

impl Counts {
    fn store(&self) -> &dyn BudgetStore {
        match self {
            Counts::Local(local) => local,
            Counts::Store(store) => store.as_ref(),
        }
    }
}

/// What a [`RetryBudget`] holds right now, for metrics and tracing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct BudgetLevel {
    /// First attempts in the window.
    pub deposited: u64,
    /// Retries granted in the window.
    pub withdrawn: u64,
    /// Retries that would be granted now, one after the other.
    pub available: u64,
}

impl Default for RetryBudget {
    /// 20% extra load plus 10 retries a second, over a 10 s window.
    fn default() -> Self {
        RetryBudget::from_config(BudgetRule::DEFAULT, Instant::now())
    }
}

impl RetryBudget {
    /// A budget that lets retries add `ratio` extra load (0.2 = 20%; at most
    /// six decimal places, between 0 and 1000) plus `min_per_sec` retries a
    /// second, counted over `window` (whole milliseconds, 10 ms to 1 h).
    ///
    /// ```
    /// use llm_retry::budget::RetryBudget;
    /// use std::time::Duration;
    ///
    /// let budget = RetryBudget::new(0.1, 5, Duration::from_secs(10))?;
    /// assert!(RetryBudget::new(f64::NAN, 5, Duration::from_secs(10)).is_err());
    /// # Ok::<(), llm_retry::ConfigError>(())
    /// ```
    pub fn new(ratio: f64, min_per_sec: u32, window: Duration) -> Result<RetryBudget, ConfigError> {
        let config = BudgetRule::new(ratio, min_per_sec, window)?;
        Ok(RetryBudget::from_config(config, Instant::now()))
    }

    /// A budget whose first slot starts at `origin`.
    pub(super) fn from_config(config: BudgetRule, origin: Instant) -> RetryBudget {
        RetryBudget {
            shared: Arc::new(Shared {
                config,
                counts: Counts::Local(LocalWindow::starting_at(origin, config.window())),
            }),
            admission: Arc::new(Admission::unlimited()),
            name: None,
        }
    }

    /// Names the budget: its `llm_retry_budget_available` gauge carries the
    /// label `budget = name` (feature `metrics`), so several budgets in one
    /// process (one per upstream, say) each keep their own value. Keep the
    /// names few and fixed. Unnamed, the gauge has no label.
    pub fn named(mut self, name: impl Into<Arc<str>>) -> RetryBudget {
        self.name = Some(name.into());
        self
    }

    /// Keeps the counts in `store` instead of this process's own window:
    /// the rule stays this budget's, the counts are the store's (all the
    /// replicas' when it is shared). Set it while building the budget,
    /// before cloning it: clones taken earlier keep the former counts.
    pub fn with_store(mut self, store: Arc<dyn BudgetStore>) -> RetryBudget {
        self.shared = Arc::new(Shared {
            config: self.shared.config,
            counts: Counts::Store(store),
        });
        self
    }

    /// The rule this budget grants retries by.
    pub fn rule(&self) -> BudgetRule {
        self.shared.config
    }

    /// The budget's name, if it has one.
    pub fn name(&self) -> Option<&str> {
        self.name.as_deref()
    }

    /// Records a first attempt. Call it once per logical request, never for
    /// a retry.
    pub fn deposit(&self) {
        self.deposit_at(Instant::now());
    }

    /// Takes one retry from the budget; refused, returns the counts in
    /// the window that refused it, as a [`BudgetStore`] does. A refused
    /// retry costs nothing.
    pub fn try_withdraw(&self) -> Result<(), WindowCounts> {
        self.withdraw().map_err(|refused| refused.counts)
    }

    /// As [`try_withdraw`](Self::try_withdraw), a refusal saying why in
    /// words (a give-up's `StopReason::BudgetExhausted`).
    pub(crate) fn withdraw(&self) -> Result<(), BudgetExhausted> {
        self.try_withdraw_at(Instant::now())
    }

    /// The counts in the window now.
    pub fn level(&self) -> BudgetLevel {
        self.level_at(Instant::now())
    }

    pub(crate) fn deposit_at(&self, now: Instant) {
        self.shared.counts.store().deposit(now);
    }

    pub(crate) fn try_withdraw_at(&self, now: Instant) -> Result<(), BudgetExhausted> {
        let config = self.shared.config;
        self.shared
            .counts
            .store()
            .try_withdraw(now, &config)
            .map_err(|counts| BudgetExhausted { counts, config })
    }

    pub(crate) fn level_at(&self, now: Instant) -> BudgetLevel {
        let config = self.shared.config;
        let WindowCounts {
            deposited,
            withdrawn,
        } = self.shared.counts.store().counts(now);
        BudgetLevel {
            deposited,
            withdrawn,
            available: config.available(withdrawn, deposited),
        }
    }
}

/// A retry refused by a [`RetryBudget`]: the window's retries already use
/// all that its first attempts and the floor allow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BudgetExhausted {
    counts: WindowCounts,
    config: BudgetRule,
}

/// `retry budget exhausted: 12 retries already spent against 50 requests
/// in the last 10 s (20% + 10/s)`
impl fmt::Display for BudgetExhausted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let plural = |n: u64, one, many| if n == 1 { one } else { many };
        let WindowCounts {
            deposited,
            withdrawn,
        } = self.counts;
        write!(
            f,
            "retry budget exhausted: {} {} already spent against {} {} in the last ",
            withdrawn,
            plural(withdrawn, "retry", "retries"),
            deposited,
            plural(deposited, "request", "requests"),
        )?;
        write_decimal(f, self.config.window().as_millis(), 3)?;
        write!(f, " s ({})", self.config)
    }
}

impl std::error::Error for BudgetExhausted {}

#[cfg(test)]
#[path = "retry_budget_tests.rs"]
mod tests;
