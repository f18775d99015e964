//! [`SharedGate`]: what a gate shares with other replicas.

use std::fmt;
use std::future::Future;
use std::hash::BuildHasher;
use std::pin::Pin;
use std::time::Duration;
use tokio::time::Instant;

/// Where a gate shares what a provider tells it about a key with the other
/// replicas sending with the same keys: the holds it sets (a 429's named
/// wait on one key and model), and a pace for the fleet's sends to a key
/// whose quota the gate was told or the provider stated. Give it to a gate
/// with [`RateLimitLayer::share_with`](super::RateLimitLayer::share_with);
/// `llm-retry-redis` has one that shares through Redis.
///
/// [`publish_hold`](SharedGate::publish_hold) and
/// [`read_hold`](SharedGate::read_hold) are on the send path: they must
/// touch memory only, never wait on a network (a store syncs in a task of
/// its own). [`turn`](SharedGate::turn) is the one call a send waits on,
/// once its turn in its own gate came, and must bound its own wait.
///
/// A key is a fingerprint of a send's authority, credential headers and
/// model, keyed by [`key_secret`](SharedGate::key_secret): every replica
/// that shares one store must give the same secret, so that one provider
/// key and model is one fingerprint everywhere. No credential leaves the
/// gate in any other form.
pub trait SharedGate: Send + Sync + fmt::Debug {
    /// The secret the gate's key fingerprints are made with.
    fn key_secret(&self) -> [u8; 16];

    /// The gate holds `key` until `until`: tell the other replicas.
    fn publish_hold(&self, key: u64, until: Instant);

    /// The latest end of a hold on `key` that any replica published and
    /// that the store knows of in memory, if one is known.
    fn read_hold(&self, key: u64) -> Option<Instant>;

    /// A send to `key` is about to go: how long it waits first, for a hold
    /// another replica set on the key (as the store knows it now, not as of
    /// its last sync; one longer than `max_hold`, the longest wait the send
    /// honours, does not keep it) and for its turn in the key's paces the
    /// fleet shares, counted from the hold's end (first come, first
    /// served): `pace`, one send every interval; `tokens`, a token quota
    /// (one token every interval, `burst` tokens at once) and the send's
    /// cost in it. `Ok(wait)`: the send goes after `wait`, its turns taken;
    /// `Err(wait)`: that would be later than `max_wait` (what the send's
    /// deadline leaves), and none was taken. The future must end within
    /// the store's own bound; where the store cannot reach the others it
    /// answers from what it knows and paces of its own.
    fn turn(
        &self,
        key: u64,
        pace: Option<SharedPace>,
        tokens: Option<(SharedPace, u32)>,
        max_wait: Option<Duration>,
        max_hold: Option<Duration>,
    ) -> Pin<Box<dyn Future<Output = Result<Duration, Duration>> + Send + 'static>>;
}

/// What [`SharedGate::turn`] returns, as a send holds it.
pub(crate) type TurnFuture =
    Pin<Box<dyn Future<Output = Result<Duration, Duration>> + Send + 'static>>;

/// A key's pace as the fleet shares it: one send (or token) every
/// `interval`, and `burst` at once after a quiet spell (a GCRA's bucket).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SharedPace {
    /// Time between two sends (or tokens) at the quota's rate.
    pub interval: Duration,
    /// Sends (or tokens) that may go at once (at least 1).
    pub burst: u32,
}

/// What a gate hashes its keys with: SipHash-1-3 under a secret, a random
/// one unless the gate shares its holds (then the store's, the same on
/// every replica).
#[derive(Clone, Copy)]
pub(super) struct KeyHasher {
    k0: u64,
    k1: u64,
}

impl KeyHasher {
    /// A secret of this process's own.
    pub(super) fn random() -> KeyHasher {
        let state = std::hash::RandomState::new();
        KeyHasher {
            k0: state.hash_one(0_u8),
            k1: state.hash_one(1_u8),
        }
    }

    /// The secret `secret`.
    pub(super) fn keyed(secret: [u8; 16]) -> KeyHasher {
        // Its first eight bytes, little-endian, and its last eight.
        let words = u128::from_le_bytes(secret);
        KeyHasher {
            k0: words as u64,
            k1: (words >> 64) as u64,
        }
    }
}

impl BuildHasher for KeyHasher {
    type Hasher = siphasher::sip::SipHasher13;

    fn build_hasher(&self) -> Self::Hasher {
        siphasher::sip::SipHasher13::new_with_keys(self.k0, self.k1)
    }
}

impl fmt::Debug for KeyHasher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("KeyHasher(<secret>)")
    }
}

/// A hold another replica published on `key`, as a floor for a send
/// booked at `now` that honours waits up to `max_wait`: `None` when there
/// is none, it is over, or it is longer than the send honours (the send
/// then goes, and learns the provider's wait for itself).
pub(super) fn shared_floor(
    holds: &dyn SharedGate,
    key: u64,
    now: Instant,
    max_wait: Option<Duration>,
) -> Option<Instant> {
    let until = holds.read_hold(key)?;
    let left = until
        .checked_duration_since(now)
        .filter(|left| !left.is_zero())?;
    max_wait.is_none_or(|max| left <= max).then_some(until)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::Hash;

    #[test]
    fn one_secret_makes_one_fingerprint_everywhere_and_another_does_not() {
        let fingerprint = |hasher: KeyHasher| {
            let mut h = hasher.build_hasher();
            "api.anthropic.com".hash(&mut h);
            std::hash::Hasher::finish(&h)
        };
        let secret = *b"sixteen byte key";
        assert_eq!(
            fingerprint(KeyHasher::keyed(secret)),
            fingerprint(KeyHasher::keyed(secret))
        );
        assert_ne!(
            fingerprint(KeyHasher::keyed(secret)),
            fingerprint(KeyHasher::keyed(*b"another 16 bytes"))
        );
        assert_ne!(
            fingerprint(KeyHasher::random()),
            fingerprint(KeyHasher::random())
        );
        assert_eq!(
            format!("{:?}", KeyHasher::keyed(secret)),
            "KeyHasher(<secret>)"
        );
    }

    /// Holds as another replica published them.
    #[derive(Debug)]
    struct Published(Option<Instant>);

    impl SharedGate for Published {
        fn key_secret(&self) -> [u8; 16] {
            [0; 16]
        }

        fn publish_hold(&self, _: u64, _: Instant) {}

        fn read_hold(&self, _: u64) -> Option<Instant> {
            self.0
        }

        fn turn(
            &self,
            _: u64,
            _: Option<SharedPace>,
            _: Option<(SharedPace, u32)>,
            _: Option<Duration>,
            _: Option<Duration>,
        ) -> TurnFuture {
            Box::pin(std::future::ready(Ok(Duration::ZERO)))
        }
    }

    #[tokio::test(start_paused = true)]
    async fn another_replicas_hold_is_a_floor_while_it_lasts_and_the_send_honours_it() {
        let now = Instant::now();
        let s = Duration::from_secs;
        let until = now + s(5);
        let held = Published(Some(until));
        assert_eq!(shared_floor(&held, 1, now, None), Some(until));
        assert_eq!(
            shared_floor(&held, 1, now, Some(s(5))),
            Some(until),
            "exactly its wait"
        );
        assert_eq!(
            shared_floor(&held, 1, now, Some(s(4))),
            None,
            "longer than the send honours: it goes, and learns the wait itself"
        );
        assert_eq!(shared_floor(&held, 1, until, None), None, "over at its end");
        assert_eq!(shared_floor(&held, 1, until + s(1), None), None);
        assert_eq!(shared_floor(&Published(None), 1, now, None), None);
    }
}
