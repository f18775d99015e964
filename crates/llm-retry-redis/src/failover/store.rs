//! [`RedisTargetMarks`]: marks read and published in memory; Redis is
//! reached only by the sync task.

use crate::health::Health;
use crate::key::StateName;
use crate::options::SharedOptions;
use crate::task::{connection, sync_loop};
use llm_retry::failover::{Mark, MarkKind, SharedMarks};
use redis::aio::ConnectionManager;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use tokio::sync::Notify;

/// At most this many marks wait to be published: two a target.
const MAX_PENDING: usize = 1024;

/// Marks waiting to be sent, by target and kind.
pub(super) type Marks = HashMap<(String, MarkKind), Mark>;

/// Marks known, by target (looked up by `&str`, with no allocation):
/// `[cooldown, unhealthy]`.
pub(super) type Known = HashMap<String, [Option<Mark>; 2]>;

/// Failover marks shared by every replica that uses the same name on the
/// same Redis: a target one replica sets aside (a named wait, too many
/// failures) is skipped by the others from their next sync on. Give it to
/// each shared target with
/// [`Target::shared_marks`](llm_retry::failover::Target::shared_marks).
///
/// Publishing and reading touch memory only. A sync task sends new marks
/// and reads every live one back in one script call, at once after a
/// publish and every [`SharedOptions::sync_interval`]; the later end of a
/// target's mark wins, on the server's clock. Each mark is a field of one
/// hash whose TTL is its longest mark's.
///
/// Every call is bounded by [`SharedOptions::timeout`]. When one fails the
/// replica logs once at `warn`, sets the `llm_retry_shared_state_degraded`
/// gauge (feature `metrics`), keeps its unsent marks to send later and
/// goes on with the marks it knows and its own: a mark only ever sets a
/// target aside, so [`FailureMode`](crate::FailureMode) does not apply.
///
/// ```no_run
/// use llm_retry::failover::{SharedMarks, Target};
/// use llm_retry_redis::{RedisTargetMarks, SharedOptions, StateName};
/// use std::sync::Arc;
///
/// # async fn build<S>(primary: S) -> Result<Target<S>, Box<dyn std::error::Error>> {
/// let client = redis::Client::open("redis://127.0.0.1:6379")?;
/// let marks = RedisTargetMarks::start(client, StateName::new("gateway")?, SharedOptions::default())?;
/// let marks: Arc<dyn SharedMarks> = Arc::new(marks);
/// Ok(Target::new("primary", primary).cooldown().shared_marks(marks))
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct RedisTargetMarks {
    inner: Arc<Inner>,
}

#[derive(Debug)]
pub(super) struct Inner {
    pub(super) key: String,
    pub(super) options: SharedOptions,
    pub(super) health: Health,
    /// Every live mark as of the last sync, and this replica's since.
    pub(super) known: Mutex<Known>,
    /// Published here, not yet sent.
    pub(super) pending: Mutex<Marks>,
    pub(super) wake: Arc<Notify>,
    pub(super) connection: tokio::sync::Mutex<ConnectionManager>,
    pub(super) script: redis::Script,
}

impl RedisTargetMarks {
    /// Starts sharing the marks of the failover `name` (the same on every
    /// replica) through `client`'s Redis, and spawns its sync task, which
    /// ends when the last clone is dropped. Connects lazily.
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime.
    pub fn start(
        client: redis::Client,
        name: StateName,
        options: SharedOptions,
    ) -> Result<RedisTargetMarks, redis::RedisError> {
        let options = options.effective();
        let connection = connection(client, &options)?;
        let inner = Arc::new(Inner {
            key: name.key("failover"),
            options,
            health: Health::new("failover", name),
            known: Mutex::new(HashMap::new()),
            pending: Mutex::new(HashMap::new()),
            wake: Arc::new(Notify::new()),
            connection: tokio::sync::Mutex::new(connection),
            script: redis::Script::new(include_str!("marks.lua")),
        });
        tokio::spawn(sync_loop(Arc::downgrade(&inner), Arc::clone(&inner.wake)));
        Ok(RedisTargetMarks { inner })
    }

    /// Sends new marks and reads every live one now, bounded by the
    /// timeout; the sync task does this on its own. Says whether Redis
    /// answered.
    pub async fn sync(&self) -> bool {
        self.inner.sync().await
    }

    /// Whether the marks known may be stale: Redis has not answered yet,
    /// or its last call failed.
    pub fn is_degraded(&self) -> bool {
        !self.inner.health.is_shared()
    }
}

impl SharedMarks for RedisTargetMarks {
    fn publish(&self, target: &str, kind: MarkKind, mark: Mark) {
        let inner = &self.inner;
        let mut pending = lock(&inner.pending);
        if pending.len() < MAX_PENDING || pending.contains_key(&(target.to_owned(), kind)) {
            keep_later(&mut pending, (target.to_owned(), kind), mark);
        }
        drop(pending);
        know_later(&mut lock(&inner.known), target, kind, mark);
        inner.wake.notify_one();
    }

    fn read(&self, target: &str, kind: MarkKind) -> Option<Mark> {
        lock(&self.inner.known).get(target)?[index(kind)]
    }
}

/// Keeps the later of the mark there and `mark`.
pub(super) fn keep_later(marks: &mut Marks, key: (String, MarkKind), mark: Mark) {
    let entry = marks.entry(key).or_insert(mark);
    if mark.until > entry.until {
        *entry = mark;
    }
}

/// Keeps the later of the known mark and `mark`.
pub(super) fn know_later(known: &mut Known, target: &str, kind: MarkKind, mark: Mark) {
    let slot = &mut known.entry(target.to_owned()).or_default()[index(kind)];
    if slot.is_none_or(|known| mark.until > known.until) {
        *slot = Some(mark);
    }
}

fn index(kind: MarkKind) -> usize {
    match kind {
        MarkKind::Unhealthy => 1,
        _ => 0,
    }
}

/// Nothing under these locks panics, so a poisoned one is still sound.
pub(super) fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
