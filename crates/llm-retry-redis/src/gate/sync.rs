//! The sync task of [`RedisGate`](super::RedisGate): new holds out,
//! every live hold back, in one script call.

use super::store::{keep_later, lock, Holds, Inner};
use crate::task::{bounded, whole_millis_up};
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::time::Instant;

impl crate::task::Synced for Inner {
    fn options(&self) -> &crate::options::SharedOptions {
        &self.options
    }

    async fn sync_once(&self) {
        self.sync().await;
    }
}

impl Inner {
    pub(super) async fn sync(&self) -> bool {
        let mut connection = self.connection.lock().await;
        // The sends' script, loaded ahead (once a Redis answers): a send's
        // first turn then costs one round trip, not a load as well.
        if !self.pace_loaded.load(Ordering::Acquire) {
            let invocation = self.pace_script.prepare_invoke();
            let load = invocation.load_async(&mut *connection);
            if let Ok(Ok(_)) = tokio::time::timeout(self.options.timeout, load).await {
                self.pace_loaded.store(true, Ordering::Release);
            }
        }
        let sending = std::mem::take(&mut *lock(&self.pending));
        let now = Instant::now();
        let mut call = self.script.key(&self.key);
        let live: Vec<_> = sending
            .iter()
            .filter_map(|(key, until)| {
                let left = until.checked_duration_since(now)?;
                Some((key, whole_millis_up(left)))
            })
            .collect();
        call.arg(live.len());
        for (key, left_ms) in &live {
            call.arg(format!("{key:016x}")).arg(*left_ms);
        }
        let answer = bounded(
            self.options.timeout,
            call.invoke_async::<Vec<(String, u64)>>(&mut *connection),
        )
        .await;
        match answer {
            Ok(holds) => {
                let at = Instant::now();
                let mut known = Holds::new();
                for (field, left_ms) in holds {
                    let (Ok(key), Some(until)) = (
                        u64::from_str_radix(&field, 16),
                        at.checked_add(Duration::from_millis(left_ms)),
                    ) else {
                        continue;
                    };
                    keep_later(&mut known, key, until);
                }
                // Published during the call: not in the answer yet.
                for (key, until) in lock(&self.pending).iter() {
                    keep_later(&mut known, *key, *until);
                }
                *lock(&self.known) = known;
                self.health.succeeded();
                true
            }
            Err(failure) => {
                let mut pending = lock(&self.pending);
                for (key, until) in sending {
                    keep_later(&mut pending, key, until);
                }
                drop(pending);
                self.health.failed(failure);
                false
            }
        }
    }
}
