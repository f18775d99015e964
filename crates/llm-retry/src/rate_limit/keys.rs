//! The gate's map of keys, bounded, with O(1) amortized upkeep.
//!
//! Idle keys (nothing booked, held or scheduled ahead) are dropped in a
//! sweep that runs only when the map has doubled since the last one, so a
//! send never scans the map on its own. When half of [`HARD_CAP`] keys are
//! still live after a sweep, the least recently used are dropped down to
//! a quarter of it: their pacing starts over, which at such cardinalities
//! is the lesser harm than unbounded memory.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::ops::{Deref, DerefMut};
use tokio::time::Instant;

/// Keys kept before the first sweep.
pub(super) const SWEEP_FROM: usize = 4096;
/// Keys kept at most.
pub(super) const HARD_CAP: usize = 65_536;

/// What the sweep needs to know of a key's state.
pub(super) trait Sweepable {
    /// Nothing of the key reaches past `now`: dropping it changes nothing.
    fn idle(&self, now: Instant) -> bool;
    /// When a send last used the key.
    fn last_used(&self) -> Instant;
}

/// Hashes a key that is already a hash keyed with the gate's secret (the
/// default key, and a [`RateKey`](super::RateKey) hashed in turn), so no
/// caller can aim keys at one bucket: one multiply-and-fold spreads them
/// over the table, at a tenth of what SipHash costs a send.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Spread(u64);

impl Hasher for Spread {
    fn finish(&self) -> u64 {
        let mixed = u128::from(self.0) * 0x9E37_79B9_7F4A_7C15;
        (mixed as u64) ^ ((mixed >> 64) as u64)
    }

    fn write(&mut self, bytes: &[u8]) {
        // Keys are `u64`s, hashed with `write_u64`; anything else still
        // hashes, byte by byte.
        for byte in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(*byte);
        }
    }

    fn write_u64(&mut self, key: u64) {
        self.0 = key;
    }
}

/// The per-key states of one gate.
#[derive(Debug)]
pub(super) struct Keys<S> {
    map: HashMap<u64, S, BuildHasherDefault<Spread>>,
    sweep_at: usize,
    sweeps: u64,
}

impl<S> Default for Keys<S> {
    fn default() -> Self {
        Keys {
            map: HashMap::default(),
            sweep_at: SWEEP_FROM,
            sweeps: 0,
        }
    }
}

impl<S: Sweepable> Keys<S> {
    /// Makes room for one more key: sweeps when the map has grown to the
    /// next threshold.
    pub(super) fn make_room(&mut self, now: Instant) {
        if self.map.len() < self.sweep_at {
            return;
        }
        self.sweeps += 1;
        self.map.retain(|_, state| !state.idle(now));
        if self.map.len() >= HARD_CAP / 2 {
            let mut by_use: Vec<(Instant, u64)> = self
                .map
                .iter()
                .map(|(key, state)| (state.last_used(), *key))
                .collect();
            // The `drop_count`-th oldest (by use, then key: a total order)
            // is the newest to go; everything after it stays.
            let drop_count = self.map.len() - HARD_CAP / 4;
            let newest_dropped = *by_use.select_nth_unstable(drop_count - 1).1;
            self.map
                .retain(|key, state| (state.last_used(), *key) > newest_dropped);
        }
        self.sweep_at = (self.map.len() * 2).clamp(SWEEP_FROM, HARD_CAP);
    }
}

impl<S> Deref for Keys<S> {
    type Target = HashMap<u64, S, BuildHasherDefault<Spread>>;

    fn deref(&self) -> &Self::Target {
        &self.map
    }
}

impl<S> DerefMut for Keys<S> {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.map
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    impl<S> Keys<S> {
        /// Sweeps so far.
        pub(in crate::rate_limit) fn sweeps(&self) -> u64 {
            self.sweeps
        }
    }

    /// A key state that is idle or not, as told.
    struct Told(bool, Instant);

    impl Sweepable for Told {
        fn idle(&self, _now: Instant) -> bool {
            self.0
        }
        fn last_used(&self) -> Instant {
            self.1
        }
    }

    #[tokio::test(start_paused = true)]
    async fn the_first_sweep_comes_when_the_map_reaches_its_threshold_and_drops_the_idle() {
        let now = Instant::now();
        let mut keys = Keys::default();
        for key in 0..SWEEP_FROM as u64 - 1 {
            keys.make_room(now);
            keys.insert(key, Told(key % 2 == 0, now));
        }
        assert_eq!(keys.sweeps(), 0, "{} keys: no sweep yet", keys.len());
        keys.make_room(now);
        keys.insert(SWEEP_FROM as u64, Told(false, now));
        assert_eq!(keys.sweeps(), 0, "the map holds its threshold now");
        keys.make_room(now);
        assert_eq!(keys.sweeps(), 1, "reaching it sweeps");
        assert_eq!(keys.len(), SWEEP_FROM / 2, "the idle half is gone");
    }

    #[tokio::test(start_paused = true)]
    async fn past_half_the_cap_the_least_recently_used_go() {
        let start = Instant::now();
        let mut keys = Keys::default();
        let used = |key: u64| start + std::time::Duration::from_millis(key);
        for key in 0..HARD_CAP as u64 / 2 {
            keys.make_room(used(key));
            keys.insert(key, Told(false, used(key)));
        }
        keys.make_room(used(HARD_CAP as u64));
        assert_eq!(keys.len(), HARD_CAP / 4);
        let oldest_kept = keys.keys().min().copied();
        assert_eq!(
            oldest_kept,
            Some(HARD_CAP as u64 / 4),
            "the newest quarter stays"
        );
        // Used all at once: the keys' own order decides, and exactly a
        // quarter stays.
        let mut keys = Keys::default();
        for key in 0..HARD_CAP as u64 / 2 {
            keys.make_room(start);
            keys.insert(key, Told(false, start));
        }
        keys.make_room(start);
        assert_eq!(keys.len(), HARD_CAP / 4);
        assert_eq!(keys.keys().min().copied(), Some(HARD_CAP as u64 / 4));
    }

    #[test]
    fn small_chosen_keys_spread_over_the_whole_hash() {
        let hash = |key: u64| {
            let mut hasher = Spread::default();
            hasher.write_u64(key);
            hasher.finish()
        };
        let hashes: std::collections::HashSet<u64> = (0..4096).map(hash).collect();
        assert_eq!(hashes.len(), 4096, "no two small keys collide");
        // The table picks a group by the low bits and tags by the top seven:
        // both must vary across consecutive keys.
        let top: std::collections::HashSet<u64> = (0..4096).map(|k| hash(k) >> 57).collect();
        let low: std::collections::HashSet<u64> = (0..4096).map(|k| hash(k) & 0xfff).collect();
        assert_eq!(top.len(), 128, "every tag is used");
        assert!(low.len() > 2_000, "{} of 4096 low patterns", low.len());
        // Keys that differ only in their high bits still pick different
        // groups: the product's high half is folded into the low bits.
        let high: std::collections::HashSet<u64> =
            (0..4096).map(|k| hash(k << 52) & 0xfff).collect();
        assert!(high.len() > 2_000, "{} of 4096 low patterns", high.len());
    }

    #[test]
    fn keys_hashed_as_bytes_still_spread() {
        let hash = |bytes: &[u8]| {
            let mut hasher = Spread::default();
            hasher.write(bytes);
            hasher.finish()
        };
        let hashes: std::collections::HashSet<u64> =
            (0u16..4096).map(|k| hash(&k.to_le_bytes())).collect();
        assert_eq!(hashes.len(), 4096, "no two short byte keys collide");
        // Past eight bytes, later bytes fold onto earlier ones without
        // masking them: all-ones bytes on top of the key keep it whole.
        let long: std::collections::HashSet<u64> = (0u16..4096)
            .map(|k| {
                let [lo, hi] = k.to_le_bytes();
                hash(&[lo, hi, 0, 0, 0, 0, 0, 0, 0xff, 0xff])
            })
            .collect();
        assert_eq!(long.len(), 4096, "no two long byte keys collide");
    }
}
