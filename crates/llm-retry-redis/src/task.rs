//! What the shared stores (the gate's, the budget's and the failover's
//! marks) do alike: one lazy connection whose calls each
//! sync bounds, and a task that syncs on a timer or when woken, until the
//! store is dropped.

use crate::health::Failure;
use crate::options::SharedOptions;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use std::future::Future;
use std::sync::{Arc, Weak};
use std::time::Duration;
use tokio::sync::Notify;

/// A connection made lazily (Redis may be down when a store starts). Each
/// sync bounds its whole call, reconnecting included, by the timeout; the
/// manager's own bound covers one connection attempt.
pub(crate) fn connection(
    client: redis::Client,
    options: &SharedOptions,
) -> Result<ConnectionManager, redis::RedisError> {
    let config = ConnectionManagerConfig::new()
        .set_connection_timeout(Some(options.timeout))
        .set_response_timeout(None)
        .set_number_of_retries(1);
    ConnectionManager::new_lazy_with_config(client, config)
}

/// A store's state that its task syncs with Redis.
pub(crate) trait Synced: Send + Sync + 'static {
    /// The store's options (its interval and timeout).
    fn options(&self) -> &SharedOptions;

    /// One sync, bounded by the timeout; failures are the store's to note.
    fn sync_once(&self) -> impl Future<Output = ()> + Send;
}

/// Syncs at once, then every `sync_interval` or when woken, until the
/// store is dropped; holds the store only while a sync runs. Woken often,
/// the task still leaves a gap (the timeout, at most the interval), so a
/// busy store costs Redis a bounded rate of calls.
pub(crate) async fn sync_loop<T: Synced>(store: Weak<T>, wake: Arc<Notify>) {
    loop {
        let Some(inner) = store.upgrade() else {
            return;
        };
        inner.sync_once().await;
        let interval = inner.options().sync_interval;
        let gap = inner.options().timeout.min(interval);
        drop(inner);
        tokio::select! {
            () = tokio::time::sleep(interval) => {}
            () = wake.notified() => tokio::time::sleep(gap).await,
        }
    }
}

/// One Redis call bounded by `timeout`: its answer, or why it failed.
pub(crate) async fn bounded<T>(
    timeout: Duration,
    call: impl Future<Output = redis::RedisResult<T>>,
) -> Result<T, Failure> {
    match tokio::time::timeout(timeout, call).await {
        Ok(Ok(answer)) => Ok(answer),
        Ok(Err(error)) => Err(Failure::Redis(error.kind())),
        Err(_elapsed) => Err(Failure::TimedOut),
    }
}

/// `left` in milliseconds, rounded up: a mark or hold never ends early.
pub(crate) fn whole_millis_up(left: Duration) -> u64 {
    let ms = left.as_micros().div_ceil(1000);
    u64::try_from(ms).unwrap_or(u64::MAX)
}
