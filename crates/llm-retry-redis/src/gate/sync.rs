//! How [`RedisGate`](super::RedisGate) keeps its holds in Redis (each a
//! field of the holds' hash, the key's fingerprint in hex, with its end),
//! and its sync task, which loads the sends' turn script ahead as well.

use super::store::Inner;
use crate::ends::Entry;
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::time::Instant;

/// The holds on provider keys, as [`SyncedEnds`](crate::ends::SyncedEnds) keeps them.
pub(super) struct Holds;

/// At most this many holds wait to be sent, and are known.
const MAX_HOLDS: usize = 4096;

impl Entry for Holds {
    type Key = u64;
    type Value = Instant;
    type Known = HashMap<u64, Instant>;
    type Row = (String, u64);
    const MAX_PENDING: usize = MAX_HOLDS;

    fn until(until: &Instant) -> Instant {
        *until
    }

    fn push(call: &mut redis::ScriptInvocation<'_>, key: &u64, _: &Instant, left_ms: u64) {
        call.arg(format!("{key:016x}")).arg(left_ms);
    }

    fn read((field, left_ms): Self::Row, at: Instant) -> Option<(u64, Instant)> {
        let key = u64::from_str_radix(&field, 16).ok()?;
        Some((key, at.checked_add(Duration::from_millis(left_ms))?))
    }

    fn know(known: &mut Self::Known, key: &u64, until: Instant) {
        // Known holds are kept as pending ones are: by key, the later end,
        // within `MAX_HOLDS`.
        crate::ends::keep_later::<Holds>(known, *key, until);
    }
}

impl crate::task::Synced for Inner {
    fn options(&self) -> &crate::options::SharedOptions {
        &self.holds.options
    }

    async fn sync_once(&self) {
        self.sync().await;
    }
}

impl Inner {
    pub(super) async fn sync(&self) -> bool {
        let mut connection = self.holds.connection.lock().await;
        // The sends' script, loaded ahead (once a Redis answers): a send's
        // first turn then costs one round trip, not a load as well.
        if !self.turn_loaded.load(Ordering::Acquire) {
            let invocation = self.turn_script.prepare_invoke();
            let load = invocation.load_async(&mut *connection);
            let timeout = self.holds.options.timeout;
            if let Ok(Ok(_)) = tokio::time::timeout(timeout, load).await {
                self.turn_loaded.store(true, Ordering::Release);
            }
        }
        self.holds.sync_on(&mut connection).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_later_hold_wins_and_a_full_map_still_moves_a_known_one() {
        let now = Instant::now();
        let later = now + Duration::from_secs(3);
        let mut known = HashMap::new();
        Holds::know(&mut known, &7, later);
        Holds::know(&mut known, &7, now);
        assert_eq!(known[&7], later);
        for key in 100..100 + MAX_HOLDS as u64 {
            Holds::know(&mut known, &key, now);
        }
        assert_eq!(known.len(), MAX_HOLDS);
        let latest = later + Duration::from_secs(1);
        Holds::know(&mut known, &7, latest);
        assert_eq!(known[&7], latest);
    }

    #[test]
    fn a_row_reads_back_as_the_hold_it_was_written_as() {
        let at = Instant::now();
        let read = Holds::read((format!("{:016x}", u64::MAX - 1), 250), at);
        assert_eq!(read, Some((u64::MAX - 1, at + Duration::from_millis(250))));
        assert_eq!(Holds::read(("not hex".to_owned(), 250), at), None);
    }
}
