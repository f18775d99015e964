//! [`SharedHolds`]: the holds a gate sets, shared with other replicas.

use std::fmt;
use std::hash::BuildHasher;
use std::time::Duration;
use tokio::time::Instant;

/// Where a gate shares the holds it sets (a provider's named wait on one
/// key and model) with the other replicas sending with the same keys, and
/// reads theirs. Give it to a gate with
/// [`RateLimitLayer::share_holds`](super::RateLimitLayer::share_holds);
/// `llm-retry-redis` has one that shares through Redis.
///
/// Both calls are on the send path: they must touch memory only, never
/// wait on a network (a store syncs in a task of its own).
///
/// A key is a fingerprint of a send's authority, credential headers and
/// model, keyed by [`key_secret`](SharedHolds::key_secret): every replica
/// that shares one store must give the same secret, so that one provider
/// key and model is one fingerprint everywhere. No credential leaves the
/// gate in any other form.
pub trait SharedHolds: Send + Sync + fmt::Debug {
    /// The secret the gate's key fingerprints are made with.
    fn key_secret(&self) -> [u8; 16];

    /// The gate holds `key` until `until`: tell the other replicas.
    fn publish(&self, key: u64, until: Instant);

    /// The latest end of a hold on `key` that any replica published and
    /// that the store knows of, if one is known.
    fn read(&self, key: u64) -> Option<Instant>;
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
        let (k0, k1) = secret.split_at(8);
        let word = |bytes: &[u8]| {
            let mut word = [0; 8];
            word.copy_from_slice(bytes);
            u64::from_le_bytes(word)
        };
        KeyHasher {
            k0: word(k0),
            k1: word(k1),
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
    holds: &dyn SharedHolds,
    key: u64,
    now: Instant,
    max_wait: Option<Duration>,
) -> Option<Instant> {
    let until = holds.read(key)?;
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
        assert!(!format!("{:?}", KeyHasher::keyed(secret)).contains("sixteen"));
    }
}
