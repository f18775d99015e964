//! A key's request window as its provider's answers state it: how many more
//! sends it admits, and when it resets, if they say.
//!
//! Past an exhausted window a send waits for its reset. When the answers
//! state no reset (Azure OpenAI's count only what is left), one send goes
//! as a probe: its 429 names the window's end, which holds the key, or its
//! success states a new window. The others wait for that news, and probe
//! again one a [`PROBE_EVERY`] only when none comes.

use std::time::Duration;
use tokio::time::Instant;

/// How far apart the sends past an exhausted window of unknown reset go
/// while no answer says more: one probe learns what every waiting send
/// needs, so the rest must not each spend a 429 on it.
pub(super) const PROBE_EVERY: Duration = Duration::from_secs(1);

/// What an answer said is left of the key's request window.
#[derive(Debug, Clone, Copy)]
pub(super) struct Window {
    /// When it resets; `None` when the answers do not say.
    resets_at: Option<Instant>,
    /// Sends it still admits, less those booked since.
    allowance: u64,
    /// Tells this answer's window from a later one's.
    epoch: u64,
    /// Exhausted with no reset stated: when the next probe may go.
    next_probe: Instant,
}

/// Where a window puts a send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Place {
    /// No window in force.
    Free,
    /// The send took a share of the window (with this epoch).
    Took(u64),
    /// Exhausted: the send waits for its reset.
    AfterReset(Instant),
    /// Exhausted, reset unknown: the send probes then, unless the window
    /// (this epoch) changes first, when it is placed anew.
    Probe { at: Instant, epoch: u64 },
}

impl Window {
    /// `remaining` more sends before a reset `resets_at`, if known.
    pub(super) fn new(
        resets_at: Option<Instant>,
        remaining: u64,
        epoch: u64,
        now: Instant,
    ) -> Window {
        Window {
            resets_at,
            allowance: remaining,
            epoch,
            next_probe: now,
        }
    }

    /// Whether it still holds anything back at `now`.
    pub(super) fn stands(&self, now: Instant) -> bool {
        self.resets_at.is_none_or(|at| at > now)
    }

    /// Whether its reset is unknown.
    pub(super) fn reset_unknown(&self) -> bool {
        self.resets_at.is_none()
    }

    /// Whether it admits no more and its reset is unknown.
    pub(super) fn spent_unknown(&self) -> bool {
        self.allowance == 0 && self.resets_at.is_none()
    }

    /// Where a send arriving at `now` goes; nothing is taken yet.
    pub(super) fn place(&self, now: Instant) -> Place {
        if !self.stands(now) {
            return Place::Free;
        }
        if self.allowance > 0 {
            return Place::Took(self.epoch);
        }
        match self.resets_at {
            Some(at) => Place::AfterReset(at),
            None => Place::Probe {
                at: self.next_probe.max(now),
                epoch: self.epoch,
            },
        }
    }

    /// A send was booked at `place`, which [`Window::place`] just gave
    /// it: it takes its share, or the probe's turn.
    pub(super) fn commit(&mut self, place: Place) {
        match place {
            Place::Took(_) => self.allowance = self.allowance.saturating_sub(1),
            Place::Probe { at, .. } => self.next_probe = at + PROBE_EVERY,
            _ => {}
        }
    }

    /// A send that took a share of the window with `epoch` never went.
    pub(super) fn give_back(&mut self, epoch: u64) {
        if epoch == self.epoch {
            self.allowance = self.allowance.saturating_add(1);
        }
    }

    pub(super) fn epoch(&self) -> u64 {
        self.epoch
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn an_exhausted_window_of_unknown_reset_lets_one_probe_go_a_second() {
        let now = Instant::now();
        let mut window = Window::new(None, 1, 7, now);
        let first = window.place(now);
        assert_eq!(first, Place::Took(7));
        window.commit(first);
        let probes: Vec<Place> = (0..3)
            .map(|_| {
                let place = window.place(now);
                window.commit(place);
                place
            })
            .collect();
        let at = |secs| Place::Probe {
            at: now + Duration::from_secs(secs),
            epoch: 7,
        };
        assert_eq!(probes, [at(0), at(1), at(2)]);
        assert!(window.stands(now + Duration::from_secs(3_600)));
    }

    #[tokio::test(start_paused = true)]
    async fn a_known_reset_ends_the_window() {
        let now = Instant::now();
        let reset = now + Duration::from_secs(2);
        let mut window = Window::new(Some(reset), 0, 1, now);
        assert_eq!(window.place(now), Place::AfterReset(reset));
        assert_eq!(window.place(reset), Place::Free);
        window.give_back(0);
        assert_eq!(
            window.place(now),
            Place::AfterReset(reset),
            "another epoch's share"
        );
        window.give_back(1);
        assert_eq!(window.place(now), Place::Took(1));
    }
}
