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
    /// (this epoch) changes first, when it is placed anew. `turn`: it took
    /// that turn as it entered (none past its deadline).
    Probe { at: Instant, epoch: u64, turn: bool },
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
                turn: false,
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
}

/// A key's sends as its provider counts them: those let through so far,
/// those queued with a share of the window or waiting to probe it, and
/// the window the last answer stated.
#[derive(Debug, Default)]
pub(super) struct Ledger {
    window: Option<Window>,
    /// Windows stated so far: the next one's epoch.
    windows: u64,
    /// Sends let through so far: a send's place among them.
    gone: u64,
    /// Queued sends holding a share of the window: the provider has not
    /// counted them yet.
    queued_shares: u64,
    /// Sends waiting for news of an exhausted window whose reset is
    /// unknown: booked, but neither sent nor counted by the provider yet.
    probing: u64,
}

impl Ledger {
    /// A ledger whose first send let through is the `gone`-th: the sends a
    /// quiet gate let go before the key had a state came before it.
    pub(super) fn after(gone: u64) -> Ledger {
        Ledger {
            gone,
            ..Ledger::default()
        }
    }

    /// Where the window puts a send arriving at `now`.
    pub(super) fn place(&self, now: Instant) -> Place {
        self.window.map_or(Place::Free, |w| w.place(now))
    }

    /// A send not yet gone enters the window at `place` (from
    /// [`Ledger::place`], under the same lock): it takes a share, or a
    /// probe's turn (none past its `deadline`, which it will not see), or
    /// waits for the reset. Counted until it leaves. The place as entered:
    /// a probe's says whether it took its turn.
    pub(super) fn enter(&mut self, mut place: Place, deadline: Option<Instant>) -> Place {
        let turn_in_time = match place {
            Place::Probe { at, .. } => deadline.is_none_or(|d| at <= d),
            _ => true,
        };
        if let (Some(w), true) = (&mut self.window, turn_in_time) {
            w.commit(place);
            if let Place::Probe { turn, .. } = &mut place {
                *turn = true;
            }
        }
        match place {
            Place::Probe { .. } => self.probing += 1,
            Place::Took(_) => self.queued_shares += 1,
            _ => {}
        }
        place
    }

    /// A send placed at `place` leaves the queue: it goes, or
    /// (`gives_back`) never will, and its share returns to the window.
    pub(super) fn leave(&mut self, place: Place, gives_back: bool) {
        match place {
            Place::Probe { .. } => {
                self.probing = self.probing.saturating_sub(1);
                if gives_back {
                    self.give_back(place);
                }
            }
            Place::Took(_) => {
                self.queued_shares = self.queued_shares.saturating_sub(1);
                if gives_back {
                    self.give_back(place);
                }
            }
            _ => {}
        }
    }

    /// A send let through and counted never went: its share goes back, if
    /// its window still stands.
    pub(super) fn give_back(&mut self, place: Place) {
        match (&mut self.window, place) {
            (Some(w), Place::Took(epoch)) => w.give_back(epoch),
            // The last probe turn handed out, taken by this send and never
            // used: the next send takes it.
            (
                Some(w),
                Place::Probe {
                    at,
                    epoch,
                    turn: true,
                },
            ) if w.epoch == epoch && w.next_probe == at + PROBE_EVERY => {
                w.next_probe = at;
            }
            _ => {}
        }
    }

    /// A send placed at `place` is let through: its place among the key's
    /// sends.
    pub(super) fn let_go(&mut self, place: Place) -> u64 {
        self.leave(place, false);
        let order = self.gone;
        self.gone = self.gone.wrapping_add(1);
        order
    }

    /// Whether a probe placed in the window of `epoch` must be placed
    /// anew: news of the window came since.
    pub(super) fn moved_on(&self, epoch: u64) -> bool {
        self.window.is_none_or(|w| w.epoch != epoch)
    }

    /// What the provider had not counted when it answered the key's
    /// `order`-th send: the sends let through after it, and those queued
    /// with a share of the window.
    pub(super) fn uncounted_after(&self, order: u64) -> u64 {
        self.gone
            .wrapping_sub(order)
            .saturating_sub(1)
            .saturating_add(self.queued_shares)
    }

    /// Whether a window stands whose reset the answers did not state.
    pub(super) fn reset_unknown(&self) -> bool {
        self.window.is_some_and(|w| w.resets_at.is_none())
    }

    /// States a new window (`None`: none in force). True when sends wait
    /// to probe the last one: they must look again.
    pub(super) fn restate(&mut self, window: Option<(Option<Instant>, u64)>, now: Instant) -> bool {
        // Spent, and still no reset: no news (the answer is to a send that
        // went before the probe); the probes keep their turns.
        if window == Some((None, 0))
            && self
                .window
                .is_some_and(|w| w.allowance == 0 && w.resets_at.is_none())
        {
            return false;
        }
        self.windows = self.windows.wrapping_add(1);
        self.window = window
            .map(|(resets_at, remaining)| Window::new(resets_at, remaining, self.windows, now));
        self.probing > 0
    }

    /// Nothing of it reaches past `now`: no probe waits, and no window
    /// with a known reset stands.
    pub(super) fn idle(&self, now: Instant) -> bool {
        self.probing == 0
            && self
                .window
                .is_none_or(|w| !w.stands(now) || w.resets_at.is_none())
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
            turn: false,
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

    #[tokio::test(start_paused = true)]
    async fn the_ledger_counts_probes_and_queued_shares_until_they_leave() {
        let now = Instant::now();
        let mut ledger = Ledger::default();
        assert!(!ledger.restate(Some((None, 0)), now), "no probe waited");
        let probe = ledger.place(now);
        assert!(matches!(probe, Place::Probe { .. }));
        ledger.enter(probe, None);
        ledger.enter(probe, None);
        assert!(!ledger.idle(now), "two probes wait");
        ledger.leave(probe, false);
        assert!(!ledger.idle(now), "one probe waits");

        let reset = now + Duration::from_secs(60);
        assert!(
            ledger.restate(Some((Some(reset), 2)), now),
            "the probe looks again"
        );
        ledger.leave(probe, false);
        let share = ledger.place(now);
        assert_eq!(share, Place::Took(2));
        ledger.enter(share, None);
        ledger.enter(share, None);
        assert_eq!(ledger.place(now), Place::AfterReset(reset));
        assert_eq!(ledger.uncounted_after(0), 2, "two queued, uncounted");
        ledger.leave(share, true);
        assert_eq!(ledger.place(now), Place::Took(2), "the share came back");
        assert_eq!(ledger.let_go(share), 0, "the key's first send");
        assert_eq!(
            ledger.uncounted_after(0),
            0,
            "it is counted: nothing after it"
        );
        assert_eq!(ledger.let_go(Place::Free), 1);
        assert_eq!(
            ledger.uncounted_after(0),
            1,
            "one let through after the first"
        );
        assert!(!ledger.idle(now) && ledger.idle(reset));
    }

    #[tokio::test(start_paused = true)]
    async fn a_probe_whose_deadline_comes_before_its_turn_leaves_the_turn_to_the_next() {
        let now = Instant::now();
        let secs = |n| now + Duration::from_secs(n);
        let mut ledger = Ledger::default();
        assert!(!ledger.reset_unknown(), "no window");
        ledger.restate(Some((None, 0)), now);
        assert!(ledger.reset_unknown());
        let first = ledger.place(now);
        assert_eq!(
            first,
            Place::Probe {
                at: now,
                epoch: 1,
                turn: false
            }
        );
        ledger.enter(first, Some(now));
        let second = ledger.place(now);
        assert_eq!(
            second,
            Place::Probe {
                at: secs(1),
                epoch: 1,
                turn: false,
            },
            "a deadline at the turn takes it"
        );
        ledger.enter(second, Some(now + Duration::from_millis(500)));
        assert_eq!(
            ledger.place(now),
            second,
            "it will not see its turn: the next takes it"
        );
        ledger.enter(second, None);
        assert_eq!(
            ledger.place(now),
            Place::Probe {
                at: secs(2),
                epoch: 1,
                turn: false,
            }
        );
        ledger.restate(Some((Some(secs(60)), 0)), now);
        assert!(!ledger.reset_unknown(), "an answer stated the reset");
    }

    /// A send whose deadline came before its turn took none: given up, it
    /// gives back nothing, and the turn the next send took stays taken.
    #[tokio::test(start_paused = true)]
    async fn a_probe_that_took_no_turn_gives_none_back() {
        let now = Instant::now();
        let secs = |n| now + Duration::from_secs(n);
        let probe = |n, turn| Place::Probe {
            at: secs(n),
            epoch: 1,
            turn,
        };
        let mut ledger = Ledger::default();
        ledger.restate(Some((None, 0)), now);
        let place = ledger.place(now);
        assert_eq!(ledger.enter(place, None), probe(0, true));
        let place = ledger.place(now);
        let late = ledger.enter(place, Some(now + Duration::from_millis(500)));
        assert_eq!(late, probe(1, false), "its deadline comes before its turn");
        let place = ledger.place(now);
        let next = ledger.enter(place, None);
        assert_eq!(next, probe(1, true));
        ledger.leave(late, true);
        assert_eq!(ledger.place(now), probe(2, false), "the turn stays taken");
        let place = ledger.place(now);
        let last = ledger.enter(place, None);
        ledger.leave(next, true);
        assert_eq!(
            ledger.place(now),
            probe(3, false),
            "a turn in the middle keeps its place"
        );
        ledger.leave(last, true);
        assert_eq!(
            ledger.place(now),
            probe(2, false),
            "the last turn comes back"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn an_answer_of_a_spent_window_with_no_reset_is_news_unless_it_was_so_already() {
        let now = Instant::now();
        let later = now + Duration::from_secs(10);
        // What a send finds after the window was `before` and an answer
        // then said none is left, and no reset.
        let after_spent_news = |before: (Option<Instant>, u64)| {
            let mut ledger = Ledger::default();
            ledger.restate(Some(before), now);
            assert!(
                !ledger.moved_on(1),
                "the first window stated is the first epoch"
            );
            ledger.restate(Some((None, 0)), now);
            (ledger.place(now), !ledger.moved_on(1))
        };
        let probe = |place| matches!(place, Place::Probe { .. });
        // A window with shares left, or with a known reset: now spent with
        // none known, so a send probes, in a new window.
        let (place, kept) = after_spent_news((Some(later), 5));
        assert!(probe(place) && !kept, "{place:?}");
        let (place, kept) = after_spent_news((None, 5));
        assert!(probe(place) && !kept, "{place:?}");
        let (place, kept) = after_spent_news((Some(later), 0));
        assert!(probe(place) && !kept, "{place:?}");
        // Already spent with no reset: no news, the probes keep their turns.
        let (place, kept) = after_spent_news((None, 0));
        assert!(probe(place) && kept, "{place:?}");
    }
}
