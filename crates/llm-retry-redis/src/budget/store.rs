//! [`RedisBudgetStore`]: the budget's decisions on the request path, made
//! from counts in memory; Redis is reached only by the sync task.

use super::sync::Report;
use crate::health::{Failure, Health};
use crate::key::StateName;
use crate::options::{FailureMode, SharedOptions};
use crate::task::{connection, sync_loop};
use llm_retry::budget::{BudgetRule, BudgetStore, LocalWindow, WindowCounts};
use redis::aio::ConnectionManager;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use tokio::sync::Notify;
use tokio::time::Instant;

/// The counts of a [`RetryBudget`](llm_retry::budget::RetryBudget) shared by
/// every replica that names the same budget on the same Redis: across the
/// fleet, retries stay within `ratio × first attempts + min_per_sec` of
/// the window, as they do for one process alone.
///
/// No decision waits for Redis. Each replica holds a few retries reserved
/// ahead from the fleet's room ([`SharedOptions::reserve`]); a retry spends
/// one of them, and a background task reports first attempts and spent
/// retries and tops the reserve up, one script call each time, every
/// [`SharedOptions::sync_interval`] or sooner when the reserve runs low.
/// A reservation is counted against the fleet until it is spent or its
/// replica stops renewing it, so the fleet never grants more than the rule
/// allows; it may grant a little less, as reserved retries sit unspent.
///
/// Every Redis call is bounded by [`SharedOptions::timeout`]. When one
/// fails, the replica logs once at `warn`, reports itself degraded
/// ([`is_degraded`](RedisBudgetStore::is_degraded), and the
/// `llm_retry_shared_state_degraded` gauge with feature `metrics`) and,
/// failing open, decides from its own window of the same rule; it goes back
/// to the shared counts at the next call Redis answers.
///
/// ```no_run
/// use llm_retry::budget::RetryBudget;
/// use llm_retry_redis::{RedisBudgetStore, SharedOptions, StateName};
/// use std::sync::Arc;
///
/// # async fn build() -> Result<(), Box<dyn std::error::Error>> {
/// let client = redis::Client::open("redis://127.0.0.1:6379")?;
/// let budget = RetryBudget::default();
/// let store = RedisBudgetStore::start(
///     client,
///     StateName::new("claude/primary")?,
///     budget.rule(),
///     SharedOptions::default(),
/// )?;
/// let budget = budget.with_store(Arc::new(store));
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct RedisBudgetStore {
    inner: Arc<Inner>,
}

#[derive(Debug)]
pub(super) struct Inner {
    pub(super) key: String,
    /// This replica's random name in the budget's hash.
    pub(super) replica: String,
    pub(super) rule: BudgetRule,
    /// The rule while degraded: the floor divided among the replicas.
    local_rule: BudgetRule,
    pub(super) options: SharedOptions,
    /// Kept warm with every event, decides while degraded.
    pub(super) local: LocalWindow,
    pub(super) health: Health,
    /// First attempts not yet reported (only those made while shared).
    pub(super) pending_deposits: AtomicU64,
    /// Retries granted and not yet reported.
    pub(super) unreported_used: AtomicU64,
    /// Reserved retries left. Redis counts `tokens + unreported_used`
    /// against the fleet as this replica's reservation.
    pub(super) tokens: AtomicU64,
    /// When the reservation lapses, in nanoseconds since `origin`: from the
    /// moment its sync was sent, so never after Redis stops counting it.
    pub(super) reserved_until: AtomicU64,
    pub(super) origin: Instant,
    /// The fleet's counts at the last sync.
    pub(super) fleet_deposited: AtomicU64,
    pub(super) fleet_withdrawn: AtomicU64,
    /// Wakes the sync task when the reserve runs low.
    pub(super) wake: Arc<Notify>,
    /// Held across a sync: one at a time, so reservations add up.
    pub(super) connection: tokio::sync::Mutex<ConnectionManager>,
    pub(super) script: redis::Script,
}

impl RedisBudgetStore {
    /// Starts sharing the budget `name` (the same on every replica, with
    /// the same `rule`) through `client`'s Redis, and spawns its sync task,
    /// which ends when the last clone of the store is dropped. Connects
    /// lazily: Redis may be down when this is called. The floors of
    /// [`SharedOptions`] apply.
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime.
    pub fn start(
        client: redis::Client,
        name: StateName,
        rule: BudgetRule,
        options: SharedOptions,
    ) -> Result<RedisBudgetStore, redis::RedisError> {
        let options = options.effective();
        let connection = connection(client, &options)?;
        let inner = Arc::new(Inner {
            key: name.key("budget"),
            replica: format!("{:016x}", rand::random::<u64>()),
            rule,
            local_rule: local_rule(rule, options.replicas),
            options,
            local: LocalWindow::new(rule.window()),
            health: Health::new("budget", name),
            pending_deposits: AtomicU64::new(0),
            unreported_used: AtomicU64::new(0),
            tokens: AtomicU64::new(0),
            reserved_until: AtomicU64::new(0),
            origin: Instant::now(),
            fleet_deposited: AtomicU64::new(0),
            fleet_withdrawn: AtomicU64::new(0),
            wake: Arc::new(Notify::new()),
            connection: tokio::sync::Mutex::new(connection),
            script: redis::Script::new(include_str!("sync.lua")),
        });
        tokio::spawn(sync_loop(Arc::downgrade(&inner), Arc::clone(&inner.wake)));
        Ok(RedisBudgetStore { inner })
    }

    /// Reports to Redis and tops the reserve up now, bounded by the
    /// timeout; the sync task does this on its own. Says whether Redis
    /// answered.
    pub async fn sync(&self) -> bool {
        self.inner.sync().await == Report::Shared
    }

    /// Whether decisions come from this replica alone: Redis has not
    /// answered yet, or its last call failed.
    pub fn is_degraded(&self) -> bool {
        !self.inner.health.is_shared()
    }

    /// Reserved retries this replica may grant without asking Redis.
    pub fn reserved(&self) -> u64 {
        self.inner.tokens.load(Ordering::Acquire)
    }

    fn shared_counts(&self) -> WindowCounts {
        let inner = &self.inner;
        WindowCounts::new(
            inner
                .fleet_deposited
                .load(Ordering::Acquire)
                .saturating_add(inner.pending_deposits.load(Ordering::Acquire)),
            inner
                .fleet_withdrawn
                .load(Ordering::Acquire)
                .saturating_add(inner.unreported_used.load(Ordering::Acquire)),
        )
    }
}

impl BudgetStore for RedisBudgetStore {
    fn deposit(&self, now: Instant) {
        let inner = &self.inner;
        inner.local.deposit(now);
        // Made while degraded, a deposit is never reported: reported late,
        // it would fund retries after its own window.
        if inner.health.is_shared() {
            inner.pending_deposits.fetch_add(1, Ordering::AcqRel);
        }
    }

    fn try_withdraw(&self, now: Instant, _rule: &BudgetRule) -> Result<(), WindowCounts> {
        let inner = &self.inner;
        if !inner.health.is_shared() {
            if inner.options.failure_mode == FailureMode::FailClosed {
                return Err(inner.local.counts(now));
            }
            inner.local.try_withdraw(now, &inner.local_rule)?;
            // Reported when Redis is back: late, it only makes the fleet
            // more careful.
            inner.unreported_used.fetch_add(1, Ordering::AcqRel);
            return Ok(());
        }
        let lapsed = inner.since_origin(now) >= inner.reserved_until.load(Ordering::Acquire);
        let spent = if lapsed {
            Err(0)
        } else {
            // Counted as spent before it is taken from the reserve: a sync
            // in between reports it at least once (twice at worst, never
            // not).
            inner.unreported_used.fetch_add(1, Ordering::AcqRel);
            inner
                .tokens
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1))
        };
        if let (Err(_), false) = (spent, lapsed) {
            // Not spent after all (a sync may have reported it: a retry
            // too many for the fleet, never one too few).
            let _ = inner
                .unreported_used
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1));
        }
        match spent {
            Ok(before) => {
                inner.local.record_withdrawal(now);
                if before <= u64::from(inner.options.reserve / 2).max(1) {
                    inner.wake.notify_one();
                }
                Ok(())
            }
            Err(_) => {
                inner.wake.notify_one();
                Err(self.shared_counts())
            }
        }
    }

    fn counts(&self, now: Instant) -> WindowCounts {
        if self.inner.health.is_shared() {
            self.shared_counts()
        } else {
            self.inner.local.counts(now)
        }
    }
}

/// `rule` with its floor divided among `replicas` (rounded down): what one
/// replica grants alone while Redis does not answer.
fn local_rule(rule: BudgetRule, replicas: u32) -> BudgetRule {
    rule.with_min_per_sec(rule.min_per_sec() / replicas.max(1))
}

impl Inner {
    /// `at` in nanoseconds since the store started (saturating).
    pub(super) fn since_origin(&self, at: Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.origin).as_nanos()).unwrap_or(u64::MAX)
    }

    pub(super) fn failed(&self, failure: Failure, used: u64) {
        // The reservation lapses in Redis on its own; spent retries are
        // reported once it answers again.
        self.tokens.store(0, Ordering::Release);
        self.unreported_used.fetch_add(used, Ordering::AcqRel);
        self.health.failed(failure);
    }
}
