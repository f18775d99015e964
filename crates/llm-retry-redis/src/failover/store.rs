//! [`RedisTargetMarks`]: marks read and published in memory; Redis is
//! reached only by the sync task.

use super::sync::{index, Marks};
use crate::ends::SyncedEnds;
use crate::health::Health;
use crate::key::StateName;
use crate::options::SharedOptions;
use crate::task::{connection, sync_loop};
use llm_retry::failover::{Mark, MarkKind, SharedMarks};
use std::sync::Arc;

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
    inner: Arc<SyncedEnds<Marks>>,
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
        let inner = Arc::new(SyncedEnds::new(
            name.key("failover"),
            options,
            Health::new("failover", name),
            connection,
            include_str!("marks.lua"),
        ));
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
        self.inner.publish((target.to_owned(), kind), mark);
    }

    fn read(&self, target: &str, kind: MarkKind) -> Option<Mark> {
        self.inner.known().get(target)?[index(kind)]
    }
}
