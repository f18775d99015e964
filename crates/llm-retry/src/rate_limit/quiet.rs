//! A learning gate before its first news: every send goes at once, keyed
//! by nothing.
//!
//! Until an answer says anything about a key (a 429, an overload, a stated
//! quota or window), a gate told no quotas, sharing with no store and
//! pacing nothing from the first send has nothing to pace by: its sends
//! need no key, no lock and no booking. Under a `ClientLayer` the retry
//! loop right above notes each such send itself and the gate lets it pass
//! (`Sent::unkeyed`, `offer::noted`); the sends are counted here instead,
//! for the first key the first news makes: when the gate's sends began and
//! how many were served (an unmeasured rate's first estimate reads them),
//! and how many are in flight (an overloaded key's first ceiling starts
//! under them). Any keyed send (news, or a hand-built stack's send) makes
//! the gate loud, for good.

use super::concurrency::Flight;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use tokio::time::Instant;

/// What the first key made takes over from a quiet gate: when its sends
/// began and how many were served (if any went), and those in flight.
pub(super) type Heard = (Option<(Instant, u32)>, Arc<Flight>);

/// What a quiet gate knows of its sends.
#[derive(Debug)]
pub(super) struct Quiet {
    /// Whether news came (or the gate paces by quotas or shares): every
    /// send is keyed.
    loud: AtomicBool,
    /// The instant the counts are read against.
    epoch: Instant,
    /// When the first quiet send went, in nanoseconds after `epoch` plus
    /// one (0: none yet).
    since: AtomicU64,
    /// Quiet sends served.
    served: AtomicU32,
    /// Quiet sends let go: the next one's place among them.
    gone: AtomicU64,
    /// Quiet sends in flight: the first key made takes them over.
    flight: Arc<Flight>,
}

impl Quiet {
    /// A gate that starts quiet, or (`loud`) keys every send from the first.
    pub(super) fn new(loud: bool) -> Quiet {
        Quiet {
            loud: AtomicBool::new(loud),
            epoch: Instant::now(),
            since: AtomicU64::new(0),
            served: AtomicU32::new(0),
            gone: AtomicU64::new(0),
            flight: Arc::default(),
        }
    }

    /// Whether sends still go unkeyed.
    pub(super) fn holds(&self) -> bool {
        !self.loud.load(Ordering::Acquire)
    }

    /// A quiet send goes at `now`: its place among the gate's sends.
    pub(super) fn send(&self, now: Instant) -> u64 {
        if self.since.load(Ordering::Relaxed) == 0 {
            let nanos = now.saturating_duration_since(self.epoch).as_nanos();
            let at = u64::try_from(nanos).map_or(u64::MAX, |n| n.saturating_add(1));
            // The first one wins; a later one only loses the race.
            let _ = self
                .since
                .compare_exchange(0, at, Ordering::Relaxed, Ordering::Relaxed);
        }
        self.gone.fetch_add(1, Ordering::Relaxed)
    }

    /// The place after every quiet send's: a key's own sends count on
    /// from it, so a quiet send's answer is read as news about the sends
    /// let go after it (it stops growing once the gate is loud).
    pub(super) fn gone(&self) -> u64 {
        self.gone.load(Ordering::Relaxed)
    }

    /// A quiet send was served, its answer stating nothing.
    pub(super) fn served(&self) {
        self.served.fetch_add(1, Ordering::Relaxed);
    }

    /// The quiet sends' count in flight.
    pub(super) fn flight(&self) -> &Arc<Flight> {
        &self.flight
    }

    /// News came: the gate keys every send from now on. The first caller
    /// (under the gate's lock of its keys) takes over the counts: when the
    /// quiet sends began and how many were served (if any went), and the
    /// quiet sends in flight.
    pub(super) fn hear(&self) -> Option<Heard> {
        if !self.holds() || self.loud.swap(true, Ordering::AcqRel) {
            return None;
        }
        let since = self.since.load(Ordering::Relaxed);
        let first = since.checked_sub(1).map(|nanos| {
            let at = self.epoch + std::time::Duration::from_nanos(nanos);
            (at, self.served.load(Ordering::Relaxed))
        });
        Some((first, Arc::clone(&self.flight)))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::time::Duration;

    #[tokio::test(start_paused = true)]
    async fn the_first_news_takes_over_when_the_quiet_sends_began_and_their_successes() {
        let quiet = Quiet::new(false);
        assert!(quiet.holds());
        tokio::time::advance(Duration::from_millis(5)).await;
        let began = Instant::now();
        assert_eq!(quiet.send(began), 0);
        assert_eq!(quiet.send(began + Duration::from_millis(3)), 1);
        assert_eq!(quiet.gone(), 2);
        quiet.served();
        quiet.served();
        let (first, flight) = quiet.hear().unwrap();
        assert_eq!(first, Some((began, 2)));
        assert!(Arc::ptr_eq(&flight, quiet.flight()));
        assert!(!quiet.holds());
        assert!(quiet.hear().is_none(), "taken over once");
    }

    #[tokio::test(start_paused = true)]
    async fn news_before_any_quiet_send_takes_over_no_start() {
        let quiet = Quiet::new(false);
        assert_eq!(quiet.hear().unwrap().0, None);
        assert!(
            Quiet::new(true).hear().is_none(),
            "a loud gate has nothing to hand over"
        );
    }
}
