//! Evidence against a mechanism of the gate, and its decay: when a hold, a
//! learned rate or an in-flight ceiling proved wrong for a key, the key
//! doubts that mechanism for [`DOUBT_FOR`] after, and trusts it again then.

use std::time::Duration;
use tokio::time::Instant;

/// How long a mechanism that proved wrong for a key stays in doubt.
pub(super) const DOUBT_FOR: Duration = Duration::from_secs(60);

/// When a mechanism last proved wrong for a key, if it did.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Doubt(Option<Instant>);

impl Doubt {
    /// The mechanism proved wrong at `now`.
    pub(super) fn proved_wrong(&mut self, now: Instant) {
        self.0 = Some(now);
    }

    /// Whether it is still in doubt at `now`.
    pub(super) fn holds(&self, now: Instant) -> bool {
        self.0
            .is_some_and(|at| now.saturating_duration_since(at) < DOUBT_FOR)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubt_lasts_exactly_its_time() {
        let now = Instant::now();
        let mut doubt = Doubt::default();
        assert!(!doubt.holds(now), "no evidence yet");
        doubt.proved_wrong(now);
        assert!(doubt.holds(now));
        assert!(doubt.holds(now + DOUBT_FOR - Duration::from_millis(1)));
        assert!(!doubt.holds(now + DOUBT_FOR), "evidence decays");
    }
}
