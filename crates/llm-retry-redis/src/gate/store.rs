//! [`RedisGate`]: holds published in memory and synced by a task, and
//! each send's one call before it goes (its key's hold, its turn in a
//! shared pace).

use super::pace::LocalPaces;
use super::sync::Holds;
use crate::ends::SyncedEnds;
use crate::health::Health;
use crate::key::StateName;
use crate::options::SharedOptions;
use crate::task::{connection, sync_loop};
use llm_retry::rate_limit::{SharedGate, SharedPace};
use redis::aio::ConnectionManager;
use std::future::Future;
use std::hash::Hasher;
use std::pin::Pin;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

/// What the gates of several replicas that send with the same provider
/// keys share through Redis. Give it to each replica's gate with
/// [`RateLimitLayer::share_with`](llm_retry::rate_limit::RateLimitLayer::share_with).
///
/// - **Holds**: a 429 one replica's gate takes as the key's named wait
///   keeps the other replicas' sends to that key and model until it ends,
///   instead of each replica learning the wait from refusals of its own.
///   Publishing touches memory only: a sync task sends new holds and reads
///   every live one back in one script call, at once after a publish and
///   every [`SharedOptions::sync_interval`]; the later end of a key's hold
///   wins, on the server's clock. All holds are fields of one hash whose
///   TTL is its longest hold's. Each send, before it goes, reads its key's
///   hold in Redis itself (below), so a stored hold keeps every send that
///   asks after it, synced or not.
/// - **A send's turn**: one script call a send (one round trip, on the
///   server's clock) reads the key's hold and, where the key has a quota
///   the gate was told or its provider stated, takes the send's turn in one
///   GCRA for the whole fleet, from the hold's end (a turn past its
///   deadline is never taken: the send is refused), first come first
///   served; each key's turn is a key whose TTL ends when its bucket is
///   full again. Where that call fails or outlasts the timeout, the send
///   waits for the holds this replica knows and takes its turn in its own
///   pace of the quota divided by [`SharedOptions::replicas`], and so do
///   the replica's sends for half a second after, before one asks Redis
///   again.
///
/// Keys are SipHash fingerprints of a send's authority, credential headers
/// and model under a secret derived from the `secret` given to
/// [`start`](RedisGate::start): the same on every replica, and never a
/// credential.
///
/// Every call is bounded by [`SharedOptions::timeout`]. When one fails the
/// replica logs once at `warn`, sets the `llm_retry_shared_state_degraded`
/// gauge (feature `metrics`), keeps its unsent holds to send later and goes
/// on with the holds it knows and its own, and its own share of each pace:
/// neither refuses a send that Redis's absence alone would cost (a turn
/// past the send's deadline is refused, shared or not), so
/// [`FailureMode`](crate::FailureMode) does not apply.
///
/// ```no_run
/// use llm_retry::rate_limit::RateLimitLayer;
/// use llm_retry_redis::{RedisGate, SharedOptions, StateName};
/// use std::sync::Arc;
///
/// # async fn build() -> Result<RateLimitLayer, Box<dyn std::error::Error>> {
/// let client = redis::Client::open("redis://127.0.0.1:6379")?;
/// let secret = std::env::var("FLEET_SECRET")?;
/// let shared = RedisGate::start(client, StateName::new("api")?, SharedOptions::default(), secret.as_bytes())?;
/// Ok(RateLimitLayer::learned().share_with(Arc::new(shared)))
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct RedisGate {
    inner: Arc<Inner>,
}

pub(super) struct Inner {
    /// The holds, and the hash they are synced with.
    pub(super) holds: SyncedEnds<Holds>,
    /// The secret fingerprints are keyed by.
    secret: [u8; 16],
    /// The sends' own connection for their turns (multiplexed: many calls
    /// at once, none waiting behind the sync's).
    pub(super) turns: ConnectionManager,
    /// Whether the sends' turns are shared: their calls' health, apart
    /// from the syncs'.
    pub(super) turn_health: Health,
    /// Until when sends answer alone after a call of theirs failed.
    pub(super) turns_paused: Mutex<Option<Instant>>,
    pub(super) turn_script: redis::Script,
    /// Whether a sync loaded `turn_script` into Redis.
    pub(super) turn_loaded: AtomicBool,
    /// `{<namespace>:<name>}:pace`: each key's turn is a key of its own
    /// under it.
    pub(super) pace_prefix: String,
    /// The paces this replica keeps while Redis does not answer.
    pub(super) local: Mutex<LocalPaces>,
}

impl std::fmt::Debug for Inner {
    /// Never the secret.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisGate")
            .field("holds", &self.holds)
            .finish_non_exhaustive()
    }
}

impl RedisGate {
    /// Starts sharing the holds and paces of the gates named `name` (the same on
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
    ) -> Result<RedisGate, redis::RedisError> {
        let options = options.effective();
        let connection = connection(client.clone(), &options)?;
        let inner = Arc::new(Inner {
            turns: super::super::task::connection(client.clone(), &options)?,
            turn_health: Health::new("gate pace", name.clone()),
            turns_paused: Mutex::new(None),
            turn_script: redis::Script::new(include_str!("turn.lua")),
            turn_loaded: AtomicBool::new(false),
            pace_prefix: name.key("pace"),
            local: Mutex::default(),
            secret: derive_secret(secret),
            holds: SyncedEnds::new(
                name.key("holds"),
                options,
                Health::new("gate", name),
                connection,
                include_str!("holds.lua"),
            ),
        });
        tokio::spawn(sync_loop(
            Arc::downgrade(&inner),
            Arc::clone(&inner.holds.wake),
        ));
        tokio::spawn(super::news::listen(
            client,
            format!("{}:news", inner.holds.key),
            inner.holds.options.timeout,
            Arc::downgrade(&inner),
            Arc::clone(&inner.holds.wake),
        ));
        Ok(RedisGate { inner })
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
        !self.inner.holds.health.is_shared()
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

impl SharedGate for RedisGate {
    fn key_secret(&self) -> [u8; 16] {
        self.inner.secret
    }

    fn publish_hold(&self, key: u64, until: Instant) {
        self.inner.holds.publish(key, until);
    }

    fn read_hold(&self, key: u64) -> Option<Instant> {
        self.inner.holds.known().get(&key).copied()
    }

    fn turn(
        &self,
        key: u64,
        pace: Option<SharedPace>,
        tokens: Option<(SharedPace, u32)>,
        max_wait: Option<Duration>,
        max_hold: Option<Duration>,
    ) -> Pin<Box<dyn Future<Output = Result<Duration, Duration>> + Send>> {
        let inner = Arc::clone(&self.inner);
        let wanted = super::pace::Wanted {
            pace,
            tokens,
            max_wait,
            max_hold,
        };
        Box::pin(async move { inner.turn(key, wanted).await })
    }
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
