//! [`RedisHolds`]: holds read and published in memory; Redis is reached
//! only by the sync task.

use crate::health::Health;
use crate::key::StateName;
use crate::options::SharedOptions;
use crate::task::{connection, sync_loop};
use llm_retry::rate_limit::SharedHolds;
use redis::aio::ConnectionManager;
use std::collections::HashMap;
use std::hash::Hasher;
use std::sync::{Arc, Mutex, PoisonError};
use tokio::sync::Notify;
use tokio::time::Instant;

/// At most this many holds wait to be sent, and are known.
pub(super) const MAX_HOLDS: usize = 4096;

/// Holds by key fingerprint: their ends.
pub(super) type Holds = HashMap<u64, Instant>;

/// The holds of gates on several replicas that send with the same provider
/// keys, shared through Redis: a 429 one replica's gate takes as the key's
/// named wait keeps the other replicas' sends to that key and model until
/// it ends, from their next sync on, instead of each replica learning the
/// wait from refusals of its own. Give it to each replica's gate with
/// [`RateLimitLayer::share_holds`](llm_retry::rate_limit::RateLimitLayer::share_holds).
///
/// Keys are SipHash fingerprints of a send's authority, credential headers
/// and model under a secret derived from the `secret` given to
/// [`start`](RedisHolds::start): the same on every replica, and never a
/// credential. Publishing and reading touch memory only. A sync task sends
/// new holds and reads every live one back in one script call, at once
/// after a publish and every [`SharedOptions::sync_interval`]; the later end
/// of a key's hold wins, on the server's clock. All holds are fields of one
/// hash whose TTL is its longest hold's.
///
/// Every call is bounded by [`SharedOptions::timeout`]. When one fails the
/// replica logs once at `warn`, sets the `llm_retry_shared_state_degraded`
/// gauge (feature `metrics`), keeps its unsent holds to send later and goes
/// on with the holds it knows and its own: a hold only ever delays a send
/// the provider would refuse, so [`FailureMode`](crate::FailureMode) does
/// not apply.
///
/// ```no_run
/// use llm_retry::rate_limit::RateLimitLayer;
/// use llm_retry_redis::{RedisHolds, SharedOptions, StateName};
/// use std::sync::Arc;
///
/// # async fn build() -> Result<RateLimitLayer, Box<dyn std::error::Error>> {
/// let client = redis::Client::open("redis://127.0.0.1:6379")?;
/// let secret = std::env::var("FLEET_SECRET")?;
/// let holds = RedisHolds::start(client, StateName::new("api")?, SharedOptions::default(), secret.as_bytes())?;
/// Ok(RateLimitLayer::learned().share_holds(Arc::new(holds)))
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct RedisHolds {
    inner: Arc<Inner>,
}

#[derive(Debug)]
pub(super) struct Inner {
    pub(super) key: String,
    pub(super) options: SharedOptions,
    pub(super) health: Health,
    /// The secret fingerprints are keyed by.
    secret: [u8; 16],
    /// Every live hold as of the last sync, and this replica's since.
    pub(super) known: Mutex<Holds>,
    /// Published here, not yet sent.
    pub(super) pending: Mutex<Holds>,
    pub(super) wake: Arc<Notify>,
    pub(super) connection: tokio::sync::Mutex<ConnectionManager>,
    pub(super) script: redis::Script,
}

impl RedisHolds {
    /// Starts sharing the holds of the gates named `name` (the same on
    /// every replica) through `client`'s Redis, their keys fingerprinted
    /// under `secret` (the same on every replica; at least 16 bytes of it
    /// that an outsider cannot guess keep a credential's fingerprint from
    /// being tested against guesses), and spawns its sync task, which ends
    /// when the last clone is dropped. Connects lazily.
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime.
    pub fn start(
        client: redis::Client,
        name: StateName,
        options: SharedOptions,
        secret: &[u8],
    ) -> Result<RedisHolds, redis::RedisError> {
        let options = options.effective();
        let connection = connection(client, &options)?;
        let inner = Arc::new(Inner {
            key: name.key("holds"),
            options,
            health: Health::new("holds", name),
            secret: derive_secret(secret),
            known: Mutex::new(HashMap::new()),
            pending: Mutex::new(HashMap::new()),
            wake: Arc::new(Notify::new()),
            connection: tokio::sync::Mutex::new(connection),
            script: redis::Script::new(include_str!("holds.lua")),
        });
        tokio::spawn(sync_loop(Arc::downgrade(&inner), Arc::clone(&inner.wake)));
        Ok(RedisHolds { inner })
    }

    /// Sends new holds and reads every live one now, bounded by the
    /// timeout; the sync task does this on its own. Says whether Redis
    /// answered.
    pub async fn sync(&self) -> bool {
        self.inner.sync().await
    }

    /// Whether the holds known may be stale: Redis has not answered yet,
    /// or its last call failed.
    pub fn is_degraded(&self) -> bool {
        !self.inner.health.is_shared()
    }
}

/// Sixteen bytes of key from a secret of any length: SipHash-1-3 of it
/// under two fixed keys.
fn derive_secret(secret: &[u8]) -> [u8; 16] {
    let half = |k0: u64| {
        let mut hasher = siphasher::sip::SipHasher13::new_with_keys(k0, u64::MAX - k0);
        hasher.write(secret);
        hasher.finish().to_le_bytes()
    };
    let mut key = [0; 16];
    key[..8].copy_from_slice(&half(0x6c6c_6d2d_7265_7472));
    key[8..].copy_from_slice(&half(0x686f_6c64_732d_6b31));
    key
}

impl SharedHolds for RedisHolds {
    fn key_secret(&self) -> [u8; 16] {
        self.inner.secret
    }

    fn publish(&self, key: u64, until: Instant) {
        let inner = &self.inner;
        keep_later(&mut lock(&inner.pending), key, until);
        keep_later(&mut lock(&inner.known), key, until);
        inner.wake.notify_one();
    }

    fn read(&self, key: u64) -> Option<Instant> {
        lock(&self.inner.known).get(&key).copied()
    }
}

/// Keeps the later of the hold there and `until`, within [`MAX_HOLDS`]
/// keys (a key already there is always updated).
pub(super) fn keep_later(holds: &mut Holds, key: u64, until: Instant) {
    if holds.len() >= MAX_HOLDS && !holds.contains_key(&key) {
        return;
    }
    let entry = holds.entry(key).or_insert(until);
    if until > *entry {
        *entry = until;
    }
}

/// Nothing under these locks panics, so a poisoned one is still sound.
pub(super) fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_secret_derives_one_key_and_another_another() {
        assert_eq!(derive_secret(b"fleet"), derive_secret(b"fleet"));
        assert_ne!(derive_secret(b"fleet"), derive_secret(b"fleet2"));
        assert_ne!(derive_secret(b""), [0; 16]);
    }
}
