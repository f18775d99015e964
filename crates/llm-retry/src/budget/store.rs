//! Where a [`RetryBudget`](super::RetryBudget) keeps its counts: in this
//! process ([`LocalWindow`], the default) or in a [`BudgetStore`] shared by
//! several processes.

use super::config::BudgetRule;
use super::window::SlotRing;
use std::fmt;
use std::time::Duration;
use tokio::time::Instant;

/// First attempts and retries counted in a budget's window.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct WindowCounts {
    /// First attempts in the window.
    pub deposited: u64,
    /// Retries granted in the window.
    pub withdrawn: u64,
}

impl WindowCounts {
    /// Counts of `deposited` first attempts and `withdrawn` retries.
    pub fn new(deposited: u64, withdrawn: u64) -> WindowCounts {
        WindowCounts {
            deposited,
            withdrawn,
        }
    }
}

/// Holds a retry budget's counts: the seam through which replicas share one
/// budget (see [`RetryBudget::with_store`](super::RetryBudget::with_store)).
///
/// Every method is synchronous and must return promptly: it runs on the
/// request path, inside the retry decision. A store backed by a remote
/// service keeps what it needs to answer locally and talks to the service
/// off the request path.
pub trait BudgetStore: fmt::Debug + Send + Sync {
    /// Records a first attempt at `now`.
    fn deposit(&self, now: Instant);

    /// Records a retry at `now` if `rule` grants one more over the counts
    /// the store holds, as one step; otherwise returns those counts.
    fn try_withdraw(&self, now: Instant, rule: &BudgetRule) -> Result<(), WindowCounts>;

    /// The counts in the window at `now`.
    fn counts(&self, now: Instant) -> WindowCounts;
}

/// The counts of one process: a sliding window of ten slots. A deposit
/// adds to its slot's atomic counter without a lock (the first one past a
/// slot's end moves the window on, under a `std::sync::Mutex`); a
/// withdrawal or a reading takes that lock for an O(1), allocation-free
/// critical section. An event counts until its whole slot leaves the
/// window (for between 0.9 and 1 window). The default store of every
/// [`RetryBudget`](super::RetryBudget); a shared store may keep one to fall
/// back on.
#[derive(Debug)]
pub struct LocalWindow {
    ring: SlotRing,
}

impl LocalWindow {
    /// An empty window of `window` (whole milliseconds, at least 10 ms, as
    /// [`BudgetRule::window`] is) whose first slot starts now.
    pub fn new(window: Duration) -> LocalWindow {
        LocalWindow::starting_at(Instant::now(), window)
    }

    pub(super) fn starting_at(origin: Instant, window: Duration) -> LocalWindow {
        LocalWindow {
            ring: SlotRing::new(origin, window),
        }
    }

    /// Records a retry at `now` whatever the counts: for a shared store
    /// whose own grant keeps its fallback window warm.
    pub fn record_withdrawal(&self, now: Instant) {
        self.ring.turn(now).withdraw();
    }
}

impl BudgetStore for LocalWindow {
    #[inline]
    fn deposit(&self, now: Instant) {
        self.ring.deposit(now);
    }

    fn try_withdraw(&self, now: Instant, rule: &BudgetRule) -> Result<(), WindowCounts> {
        let mut ring = self.ring.turn(now);
        let (deposited, withdrawn) = ring.totals();
        if rule.grants(withdrawn, deposited) {
            ring.withdraw();
            return Ok(());
        }
        Err(WindowCounts::new(deposited, withdrawn))
    }

    fn counts(&self, now: Instant) -> WindowCounts {
        let (deposited, withdrawn) = self.ring.turn(now).totals();
        WindowCounts::new(deposited, withdrawn)
    }
}
