//! What the gate's holds and the failover's marks share: entries that end
//! at an instant, published and read in memory, and synced with one Redis
//! hash by one script call that sends the new entries and reads every live
//! one back (the later end of an entry wins, on the server's clock).

use crate::health::Health;
use crate::options::SharedOptions;
use crate::task::{bounded, whole_millis_up};
use redis::aio::ConnectionManager;
use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use tokio::sync::Notify;
use tokio::time::Instant;

/// One kind of entry: how it is keyed, known, and written to and read
/// from its script.
pub(crate) trait Entry: Send + Sync + 'static {
    /// What an entry is about (a key's fingerprint; a target and a kind).
    type Key: Eq + Hash + Send + Sync;
    /// The entry itself, which ends at [`Entry::until`].
    type Value: Copy + Send + Sync;
    /// Every live entry, as lookups want them.
    type Known: Default + Send;
    /// One live entry as the script returns it: its field, the
    /// milliseconds left, and whatever else the script stores with it.
    type Row: redis::FromRedisValue + Send;
    /// At most this many entries wait to be sent (one already waiting is
    /// always updated).
    const MAX_PENDING: usize;

    fn until(value: &Self::Value) -> Instant;

    /// Appends the entry's arguments: its field, `left_ms`, and whatever
    /// else the script stores with it.
    fn push(
        call: &mut redis::ScriptInvocation<'_>,
        key: &Self::Key,
        value: &Self::Value,
        left_ms: u64,
    );

    /// The entry a row returned `at` is; `None` for a row this replica
    /// cannot read.
    fn read(row: Self::Row, at: Instant) -> Option<(Self::Key, Self::Value)>;

    /// Keeps the later of what `known` holds for `key` and `value`.
    fn know(known: &mut Self::Known, key: &Self::Key, value: Self::Value);
}

/// Entries of kind `E` and their hash in Redis.
pub(crate) struct SyncedEnds<E: Entry> {
    /// The hash's key.
    pub(crate) key: String,
    pub(crate) options: SharedOptions,
    pub(crate) health: Health,
    /// Every live entry as of the last sync, and this replica's since.
    known: Mutex<E::Known>,
    /// Published here, not yet sent.
    pending: Mutex<HashMap<E::Key, E::Value>>,
    /// Wakes the sync task.
    pub(crate) wake: Arc<Notify>,
    pub(crate) connection: tokio::sync::Mutex<ConnectionManager>,
    script: redis::Script,
}

impl<E: Entry> std::fmt::Debug for SyncedEnds<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SyncedEnds")
            .field("key", &self.key)
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl<E: Entry> SyncedEnds<E> {
    pub(crate) fn new(
        key: String,
        options: SharedOptions,
        health: Health,
        connection: ConnectionManager,
        script: &'static str,
    ) -> SyncedEnds<E> {
        SyncedEnds {
            key,
            options,
            health,
            known: Mutex::default(),
            pending: Mutex::default(),
            wake: Arc::new(Notify::new()),
            connection: tokio::sync::Mutex::new(connection),
            script: redis::Script::new(script),
        }
    }

    /// Known here at once, sent by the next sync, which is woken.
    pub(crate) fn publish(&self, key: E::Key, value: E::Value) {
        E::know(&mut lock(&self.known), &key, value);
        keep_later::<E>(&mut lock(&self.pending), key, value);
        self.wake.notify_one();
    }

    /// What is known: every live entry as of the last sync, and this
    /// replica's since.
    pub(crate) fn known(&self) -> MutexGuard<'_, E::Known> {
        lock(&self.known)
    }

    /// [`SyncedEnds::sync_on`] its own connection.
    pub(crate) async fn sync(&self) -> bool {
        let mut connection = self.connection.lock().await;
        self.sync_on(&mut connection).await
    }

    /// Sends the new entries and reads every live one, through
    /// `connection`, bounded by the timeout. Says whether Redis answered;
    /// when it did not, the entries stay pending for the next sync.
    pub(crate) async fn sync_on(&self, connection: &mut ConnectionManager) -> bool {
        let sending = std::mem::take(&mut *lock(&self.pending));
        let now = Instant::now();
        let mut call = self.script.key(&self.key);
        let live: Vec<_> = sending
            .iter()
            .filter_map(|(key, value)| {
                let left = E::until(value).checked_duration_since(now)?;
                Some((key, value, whole_millis_up(left)))
            })
            .collect();
        call.arg(live.len());
        for (key, value, left_ms) in live {
            E::push(&mut call, key, value, left_ms);
        }
        let answer = bounded(
            self.options.timeout,
            call.invoke_async::<Vec<E::Row>>(connection),
        )
        .await;
        match answer {
            Ok(rows) => {
                let at = Instant::now();
                let mut known = E::Known::default();
                for row in rows {
                    if let Some((key, value)) = E::read(row, at) {
                        E::know(&mut known, &key, value);
                    }
                }
                // Published during the call: not in the answer yet.
                for (key, value) in lock(&self.pending).iter() {
                    E::know(&mut known, key, *value);
                }
                *lock(&self.known) = known;
                self.health.succeeded();
                true
            }
            Err(failure) => {
                let mut pending = lock(&self.pending);
                for (key, value) in sending {
                    keep_later::<E>(&mut pending, key, value);
                }
                drop(pending);
                self.health.failed(failure);
                false
            }
        }
    }
}

impl<E: Entry> crate::task::Synced for SyncedEnds<E> {
    fn options(&self) -> &SharedOptions {
        &self.options
    }

    async fn sync_once(&self) {
        self.sync().await;
    }
}

/// Keeps the later of the entry there and `value`, within
/// [`Entry::MAX_PENDING`] keys (a key already there is always updated).
pub(crate) fn keep_later<E: Entry>(
    pending: &mut HashMap<E::Key, E::Value>,
    key: E::Key,
    value: E::Value,
) {
    if pending.len() >= E::MAX_PENDING && !pending.contains_key(&key) {
        return;
    }
    let entry = pending.entry(key).or_insert(value);
    if E::until(&value) > E::until(entry) {
        *entry = value;
    }
}

/// Nothing under these locks panics, so a poisoned one is still sound.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
