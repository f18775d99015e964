//! A key's hold: a provider named a wait for the key, and the key's own
//! answers since either corroborate it or contest it.
//!
//! Data and pure transitions on the caller's instant: the gate applies
//! what they return to its queue (the pacer, the token slots, the
//! waiting sends), so a second store can hold the same state.

use super::doubt::Doubt;
use super::error::GateError;
use std::time::Duration;
use tokio::time::Instant;

/// Answers to later sends a contest needs before it can go against a hold.
const CONTEST_ANSWERS: u32 = 4;

/// What may hold a key's sends back because its provider named a wait.
#[derive(Debug, Default)]
pub(super) struct Hold {
    /// No send before this instant.
    until: Option<Instant>,
    /// When the hold was put, and the wait the provider named then, which
    /// may be longer than the hold: a request that honours less fails fast.
    asked: Option<(Instant, Duration)>,
    /// The answers to the sends that left after the one whose refusal put
    /// the hold: when most of them are served, the key was not out.
    contest: Option<Contest>,
    /// A hold was lost to the key's own answers: while in doubt, a named
    /// wait holds the key only once later sends were refused too.
    doubt: Doubt,
    /// How far holds have pushed the key's queue so far: a waiting send's
    /// quota slot moves by what was added since it was booked, so the
    /// queue keeps its order and spacing behind a hold.
    shift: Duration,
}

/// The evidence against a hold: answers to the sends let through after
/// the refused one (its `order`).
#[derive(Debug, Clone, Copy)]
struct Contest {
    order: u64,
    /// Until when the refusal's wait lasts: the contest with it.
    until: Instant,
    served: u32,
    refused: u32,
    /// The longest wait named so far (capped): the claim a request that
    /// honours less fails on.
    claim: Duration,
    /// Of the refusals since that claim was first made (`since`: the
    /// served and refused counts then), those that named about as long:
    /// corroboration of the wait itself.
    long: u32,
    since: (u32, u32),
}

impl Contest {
    /// Whether the later sends were mostly served: of at least
    /// [`CONTEST_ANSWERS`] answers, three served for each refused. A key
    /// out of capacity serves few (a bucket's trickle of tokens), one that
    /// refused a request for a reason of its own serves most.
    fn lost(&self) -> bool {
        self.served.saturating_add(self.refused) >= CONTEST_ANSWERS
            && self.served >= self.refused.saturating_mul(3)
    }

    /// Whether later sends were refused too, three for each served: the
    /// key is out.
    fn won(&self) -> bool {
        self.refused >= 2 && self.refused >= self.served.saturating_mul(3)
    }

    /// A later send was refused naming `wait` (capped): about as long as
    /// the claim corroborates it (a tenth either way: the same wait, named
    /// a little later); longer is a new claim, which the refusals before it
    /// do not corroborate.
    fn corroborate(&mut self, wait: Duration) {
        let slack = self.claim / 10;
        if wait > self.claim.saturating_add(slack) {
            self.claim = wait;
            self.long = 0;
            self.since = (self.served, self.refused);
        } else if wait.saturating_add(slack) >= self.claim {
            self.long += 1;
        }
    }

    /// Whether later sends were refused for as long, three for each answer
    /// that was not: the wait is the key's, not one answer's (a bogus
    /// `Retry-After` among short ones is not).
    fn long_won(&self) -> bool {
        let answers = (self.served - self.since.0) + (self.refused - self.since.1);
        let others = answers.saturating_sub(self.long);
        self.long >= 2 && self.long >= others.saturating_mul(3)
    }
}

/// What a named wait did to the key ([`Hold::refused`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Placed {
    /// Not held: the key lost a hold lately and nothing corroborates this
    /// one yet. The request that was told waits its own wait.
    Doubted,
    /// Already held at least as long.
    Covered,
    /// Held until later than before: the queue moves back by `pushed`.
    Extended { pushed: Duration },
}

impl Hold {
    /// The earliest any send may go: now, or the end of the hold.
    pub(super) fn floor(&self, now: Instant) -> Instant {
        self.until.map_or(now, |until| until.max(now))
    }

    /// Whether the key is held past `now`.
    pub(super) fn holds(&self, now: Instant) -> bool {
        self.until.is_some_and(|until| until > now)
    }

    /// How far holds have pushed the queue so far.
    pub(super) fn shift(&self) -> Duration {
        self.shift
    }

    /// Why a send with this `deadline` and longest honoured wait cannot
    /// wait out the hold, if it cannot: it honours less of the named wait
    /// than is left, or the hold ends past its deadline.
    fn past(
        &self,
        now: Instant,
        deadline: Option<Instant>,
        max_server_wait: Option<Duration>,
    ) -> Option<GateError> {
        let until = self.until.filter(|until| *until > now)?;
        if let (Some(limit), Some((at, asked))) = (max_server_wait, self.asked) {
            let left = asked.saturating_sub(now.saturating_duration_since(at));
            if left > limit {
                return Some(GateError::HeldTooLong { asked: left, limit });
            }
        }
        deadline.filter(|deadline| until > *deadline)?;
        Some(GateError::PastDeadline {
            wait: until.saturating_duration_since(now),
        })
    }

    /// The earliest a send with these bounds may go, as far as the hold
    /// goes, and whether it goes past the hold: one that cannot wait it out
    /// ([`Hold::past`]) is refused when later sends corroborated the hold,
    /// else it goes now, as without a gate (its answer is news of the hold).
    pub(super) fn admits(
        &self,
        now: Instant,
        deadline: Option<Instant>,
        max_server_wait: Option<Duration>,
    ) -> Result<(Instant, bool), GateError> {
        match self.past(now, deadline, max_server_wait) {
            Some(refused @ GateError::HeldTooLong { .. }) if self.wait_corroborated() => {
                Err(refused)
            }
            Some(refused @ GateError::PastDeadline { .. }) if self.corroborated() => Err(refused),
            Some(_) => Ok((now, true)),
            None => Ok((self.floor(now), false)),
        }
    }

    /// Whether later sends corroborated the hold: refused too, far more
    /// than were served.
    fn corroborated(&self) -> bool {
        self.contest.is_some_and(|c| c.won())
    }

    /// Whether later sends corroborated the wait itself: refused for as
    /// long, far more than answered otherwise. Only then does a request
    /// that honours less fail at once.
    fn wait_corroborated(&self) -> bool {
        self.contest.is_some_and(|c| c.long_won())
    }

    /// The refusal of the key's `order`-th send named `wait` at `now`,
    /// which holds the key until `until` (the wait, capped): the contest
    /// counts it, and the key is held unless it doubts its holds and
    /// nothing corroborates this one.
    pub(super) fn refused(
        &mut self,
        order: u64,
        now: Instant,
        wait: Duration,
        until: Instant,
    ) -> Placed {
        let contest = match &mut self.contest {
            Some(contest) if contest.until > now => {
                if order > contest.order {
                    contest.refused = contest.refused.saturating_add(1);
                    contest.corroborate(until.saturating_duration_since(now));
                }
                contest.until = contest.until.max(until);
                contest
            }
            other => other.insert(Contest {
                order,
                until,
                served: 0,
                refused: 0,
                claim: until.saturating_duration_since(now),
                long: 0,
                since: (0, 0),
            }),
        };
        let later = order > contest.order;
        if !contest.won() && self.doubt.holds(now) {
            return Placed::Doubted;
        }
        if self.until.is_some_and(|held| held >= until) {
            // The provider's latest word on the key is what a request must
            // honour to wait the hold out: a later send's shorter wait
            // replaces an absurd one that put the hold.
            if later {
                self.asked = Some((now, wait));
            }
            return Placed::Covered;
        }
        self.asked = Some((now, wait));
        let pushed = until.saturating_duration_since(self.floor(now));
        self.until = Some(until);
        self.shift = self.shift.saturating_add(pushed);
        Placed::Extended { pushed }
    }

    /// The key served its `order`-th send at `now`: evidence against a
    /// hold put for an earlier send's refusal. Once most later sends were
    /// served the hold ends (true): the queue moves forward by what it had
    /// left.
    pub(super) fn served(&mut self, order: u64, now: Instant) -> bool {
        let Some(contest) = self.contest.as_mut().filter(|c| order > c.order) else {
            return false;
        };
        if contest.until <= now {
            self.contest = None;
            return false;
        }
        contest.served = contest.served.saturating_add(1);
        if !contest.lost() {
            return false;
        }
        self.contest = None;
        self.doubt.proved_wrong(now);
        let Some(until) = self.until.filter(|until| *until > now) else {
            return false;
        };
        self.until = None;
        self.asked = None;
        self.shift = self
            .shift
            .saturating_sub(until.saturating_duration_since(now));
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rate_limit::doubt::DOUBT_FOR;

    const S: fn(u64) -> Duration = Duration::from_secs;

    #[test]
    fn a_named_wait_holds_the_key_and_a_longer_one_extends_it() {
        let now = Instant::now();
        let mut hold = Hold::default();
        assert_eq!(hold.floor(now), now);
        assert_eq!(
            hold.refused(0, now, S(10), now + S(10)),
            Placed::Extended { pushed: S(10) }
        );
        assert!(hold.holds(now) && !hold.holds(now + S(10)));
        assert_eq!(hold.floor(now), now + S(10));
        assert_eq!(hold.refused(1, now, S(5), now + S(5)), Placed::Covered);
        assert_eq!(
            hold.refused(2, now, S(12), now + S(12)),
            Placed::Extended { pushed: S(2) }
        );
        assert_eq!(hold.shift(), S(12));
    }

    #[test]
    fn a_send_that_honours_less_or_ends_sooner_cannot_wait_it_out() {
        let now = Instant::now();
        let mut hold = Hold::default();
        assert_eq!(hold.past(now, Some(now), Some(S(1))), None, "not held");
        // The wait named 60 s; the hold is capped at 30 s.
        hold.refused(0, now, S(60), now + S(30));
        assert_eq!(
            hold.past(now + S(10), None, Some(S(45))),
            Some(GateError::HeldTooLong {
                asked: S(50),
                limit: S(45)
            })
        );
        assert_eq!(hold.past(now + S(10), None, Some(S(50))), None);
        assert_eq!(
            hold.past(now + S(10), Some(now + S(29)), Some(S(50))),
            Some(GateError::PastDeadline { wait: S(20) })
        );
        assert_eq!(hold.past(now + S(10), Some(now + S(30)), None), None);
        // Exactly the longest wait it honours: honoured.
        assert_eq!(hold.past(now + S(15), None, Some(S(45))), None);
        assert!(matches!(
            hold.past(now + S(15), None, Some(S(45) - Duration::from_millis(1))),
            Some(GateError::HeldTooLong { .. })
        ));
    }

    #[test]
    fn a_later_send_s_shorter_wait_is_what_a_request_must_honour() {
        // An absurd wait (capped at 5 s) holds the key; later sends are
        // refused naming a second. They corroborate the hold, and a request
        // that honours 5 s waits it out instead of failing on the absurd one.
        let now = Instant::now();
        let mut hold = Hold::default();
        hold.refused(0, now, S(1 << 40), now + S(5));
        assert!(matches!(hold.admits(now, None, Some(S(5))), Ok((_, true))));
        hold.refused(1, now, S(1), now + S(1));
        hold.refused(2, now, S(1), now + S(1));
        assert!(hold.corroborated());
        assert_eq!(hold.admits(now, None, Some(S(5))), Ok((now + S(5), false)));
        // A refusal of the send that put the hold, or of one before it,
        // is no later word.
        let mut early = Hold::default();
        early.refused(7, now, S(1 << 40), now + S(5));
        early.refused(3, now, S(1), now + S(1));
        assert!(matches!(
            early.past(now, None, Some(S(5))),
            Some(GateError::HeldTooLong { .. })
        ));
    }

    #[test]
    fn only_refusals_as_long_corroborate_a_wait_a_request_cannot_honour() {
        let now = Instant::now();
        // A bogus wait among short ones: the key is refused, but not for
        // as long. A request honouring 5 s goes past it, as without a gate.
        let mut bogus = Hold::default();
        bogus.refused(0, now, S(1 << 40), now + S(5));
        for order in 1..4 {
            bogus.refused(order, now, S(1 << 40), now + S(1));
        }
        assert!(bogus.corroborated(), "the key is refused");
        assert!(matches!(bogus.admits(now, None, Some(S(5))), Ok((_, true))));
        // Later sends told the same: the wait is the key's, and a request
        // that honours less fails at once.
        let mut out = Hold::default();
        out.refused(0, now, S(1 << 40), now + S(5));
        out.refused(1, now, S(1 << 40), now + S(5));
        out.refused(2, now, S(1 << 40), now + S(5));
        assert!(matches!(
            out.admits(now, None, Some(S(5))),
            Err(GateError::HeldTooLong { .. })
        ));
    }

    #[test]
    fn short_refusals_before_a_long_wait_do_not_corroborate_it() {
        // Refused for a second, twice; then a later send is told 10^9 s
        // (capped at 5 s). The refusals before it named a second: a request
        // that honours 5 s goes, as without a gate.
        let now = Instant::now();
        let mut hold = Hold::default();
        hold.refused(0, now, S(1), now + S(1));
        hold.refused(1, now, S(1), now + S(1));
        hold.refused(2, now, S(1), now + S(1));
        hold.refused(3, now, S(1 << 30), now + S(5));
        assert!(matches!(hold.admits(now, None, Some(S(5))), Ok((_, true))));
        // Two later sends told the same: now it is the key's wait.
        hold.refused(4, now, S(1 << 30), now + S(5));
        hold.refused(5, now, S(1 << 30), now + S(5));
        assert!(matches!(
            hold.admits(now, None, Some(S(5))),
            Err(GateError::HeldTooLong { .. })
        ));
    }

    #[test]
    fn mostly_served_later_sends_end_the_hold_and_doubt_the_next() {
        let now = Instant::now();
        let mut hold = Hold::default();
        hold.refused(5, now, S(30), now + S(30));
        assert!(!hold.served(5, now), "the refused send itself");
        assert!(!hold.served(4, now), "a send let through before it");
        for order in 6..9 {
            assert!(!hold.served(order, now + S(1)), "three answers");
        }
        assert!(!hold.corroborated());
        assert!(hold.served(9, now + S(1)), "the fourth ends it");
        assert!(!hold.holds(now + S(1)));
        assert_eq!(hold.shift(), S(1), "the queue moved forward by 29 s");
        // Doubted for a minute: a named wait does not hold, until corroborated.
        let later = now + S(2);
        assert_eq!(
            hold.refused(20, later, S(30), later + S(30)),
            Placed::Doubted
        );
        assert_eq!(
            hold.refused(21, later, S(30), later + S(30)),
            Placed::Doubted
        );
        assert!(matches!(
            hold.refused(22, later, S(30), later + S(30)),
            Placed::Extended { .. }
        ));
        assert!(hold.corroborated());
        // A minute after the loss, holds are trusted again.
        let trusted = now + S(1) + S(61);
        let mut fresh = Hold::default();
        fresh.refused(0, now, S(1), now + S(1));
        for order in 1..5 {
            fresh.served(order, now);
        }
        assert!(matches!(
            fresh.refused(9, trusted, S(5), trusted + S(5)),
            Placed::Extended { .. }
        ));
    }

    #[test]
    fn refusals_of_later_sends_corroborate_and_a_spent_wait_ends_the_contest() {
        let now = Instant::now();
        let mut hold = Hold::default();
        hold.refused(0, now, S(5), now + S(5));
        hold.served(1, now);
        hold.refused(2, now, S(5), now + S(5));
        assert!(!hold.corroborated(), "one refusal against one success");
        hold.refused(3, now, S(5), now + S(5));
        hold.refused(4, now, S(5), now + S(5));
        assert!(hold.corroborated(), "three refused for one served");
        assert!(!hold.served(5, now + S(5)), "the wait is over");
        assert!(!hold.corroborated());
    }

    #[test]
    fn a_hold_that_ends_now_holds_no_one() {
        let now = Instant::now();
        let mut hold = Hold::default();
        hold.refused(0, now, S(10), now + S(10));
        let end = now + S(10);
        assert!(!hold.holds(end));
        assert_eq!(hold.past(end, Some(end - S(1)), None), None, "over");
    }

    #[test]
    fn doubt_lasts_exactly_a_minute() {
        let now = Instant::now();
        let mut hold = Hold::default();
        hold.refused(0, now, S(1), now + S(1));
        for order in 1..5 {
            hold.served(order, now);
        }
        let at = now + DOUBT_FOR;
        assert!(matches!(
            hold.refused(9, at, S(5), at + S(5)),
            Placed::Extended { .. }
        ));
    }

    #[test]
    fn a_spent_wait_starts_a_new_contest_with_the_new_refusal() {
        let t0 = Instant::now();
        for gap in [S(5), S(10)] {
            let mut hold = Hold::default();
            hold.refused(0, t0, S(5), t0 + S(5));
            // The first wait is over (just, or long since): a new refusal,
            // of the key's 10th send, puts a hold of its own.
            let t1 = t0 + gap;
            hold.refused(10, t1, S(30), t1 + S(30));
            // Sends let through before the 10th say nothing against it.
            for order in 5..10 {
                assert!(!hold.served(order, t1));
            }
            assert!(hold.holds(t1), "after {gap:?}");
        }
    }

    #[test]
    fn the_refused_send_itself_does_not_corroborate_its_hold() {
        let now = Instant::now();
        let mut hold = Hold::default();
        for _ in 0..3 {
            hold.refused(5, now, S(5), now + S(5));
        }
        assert!(!hold.corroborated());
    }

    #[test]
    fn a_send_past_its_deadline_is_refused_only_once_later_sends_corroborate_the_hold() {
        let now = Instant::now();
        let mut hold = Hold::default();
        hold.refused(0, now, S(30), now + S(30));
        let deadline = Some(now + S(10));
        // One refusal: maybe the request's own. The send goes, as without
        // a gate, and its answer is news of the hold.
        assert_eq!(hold.admits(now, deadline, None), Ok((now, true)));
        hold.refused(1, now, S(30), now + S(30));
        hold.refused(2, now, S(30), now + S(30));
        assert_eq!(
            hold.admits(now, deadline, None),
            Err(GateError::PastDeadline { wait: S(30) })
        );
    }

    #[test]
    fn a_claim_counts_only_the_answers_since_it_was_made() {
        let now = Instant::now();
        let mut contest = Contest {
            order: 0,
            until: now + S(60),
            served: 5,
            refused: 4,
            claim: S(60),
            long: 2,
            since: (4, 2),
        };
        // Since the claim: one served, two refused as long: two of three,
        // not three for each other answer.
        assert!(!contest.long_won());
        contest.refused += 4;
        contest.long += 4;
        // Then six refused as long against one served: won.
        assert!(contest.long_won());
        // A wait a tenth longer is still the claim; more is a new one.
        contest.corroborate(S(66));
        assert_eq!((contest.claim, contest.long), (S(60), 7));
        contest.corroborate(S(67));
        assert_eq!((contest.claim, contest.long), (S(67), 0));
        assert_eq!(contest.since, (5, 8));
    }
}
