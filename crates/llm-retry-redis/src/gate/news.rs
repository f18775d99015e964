//! The news channel of [`RedisGate`](super::RedisGate): a hold another
//! replica set wakes this replica's sync at once, so it reads the hold
//! before its next send rather than at its next interval.

use futures_util::StreamExt;
use std::sync::{Arc, Weak};
use std::time::Duration;
use tokio::sync::Notify;

/// How often a listener checks that its store still lives, and how long it
/// waits before it subscribes again after its connection failed.
const RECHECK: Duration = Duration::from_secs(1);

/// Shortest bound on subscribing: off every send's path, so a loaded
/// machine's slow connect need not cost the channel.
const SUBSCRIBE_AT_LEAST: Duration = Duration::from_millis(500);

/// Listens on `channel` through its own connection and wakes the sync task
/// on each message, until the store is dropped. A failed connection is
/// made again after [`RECHECK`]; meanwhile the interval's syncs still come.
pub(super) async fn listen<T: Send + Sync + 'static>(
    client: redis::Client,
    channel: String,
    timeout: Duration,
    store: Weak<T>,
    wake: Arc<Notify>,
) {
    while store.strong_count() > 0 {
        let subscribed = tokio::time::timeout(timeout.max(SUBSCRIBE_AT_LEAST), async {
            let mut pubsub = client.get_async_pubsub().await?;
            pubsub.subscribe(&channel).await?;
            Ok::<_, redis::RedisError>(pubsub)
        })
        .await;
        if let Ok(Ok(mut pubsub)) = subscribed {
            let mut messages = pubsub.on_message();
            // One tick a second however often news comes, so a listener
            // whose store is gone ends within a second.
            let mut recheck = tokio::time::interval(RECHECK);
            loop {
                tokio::select! {
                    message = messages.next() => match message {
                        Some(_) => wake.notify_one(),
                        // The connection closed: subscribe again.
                        None => break,
                    },
                    _ = recheck.tick() => {
                        if store.strong_count() == 0 {
                            return;
                        }
                    }
                }
            }
        }
        tokio::time::sleep(RECHECK).await;
    }
}
