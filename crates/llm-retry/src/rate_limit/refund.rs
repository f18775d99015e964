//! Giving quota slots back: a send that never went (dropped, refused past
//! its deadline, dropped before its first poll) must not keep the next
//! sends waiting for a slot nobody used.
//!
//! Quota slots are GCRA bookings: each moves the key's theoretical arrival
//! time (TAT) forward. A booking at the tail of the queue can be undone
//! exactly by putting the TAT back where it was before it. One in the
//! middle cannot (the sends behind it were placed after it); it is marked,
//! and given back once every booking behind it is given back too. Sends
//! behind a mark keep their slots, so the queue stays first in, first out
//! and never sends faster than the quota.

use super::gcra::{Pace, Tat};
use std::collections::VecDeque;
use std::time::Duration;
use tokio::time::Instant;

/// The TATs of a key's two quotas (requests, tokens).
pub(super) type Tats = [Tat; 2];

/// The key's bookings that may still be given back, in arrival order.
#[derive(Debug, Default)]
pub(super) struct Refunds {
    entries: VecDeque<Entry>,
    next: u64,
    /// Entries that went: a booking given up before one of them can no
    /// longer be given back.
    sent: usize,
}

#[derive(Debug)]
struct Entry {
    seq: u64,
    /// The TATs just before this booking was made.
    before: Tats,
    state: State,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Waiting,
    Sent,
    GivenUp,
}

impl Refunds {
    /// Records a booking made over the TATs `before`; returns its number.
    pub(super) fn book(&mut self, before: Tats, sent: bool) -> u64 {
        let seq = self.next;
        self.next += 1;
        let state = if sent { State::Sent } else { State::Waiting };
        self.sent += usize::from(sent);
        self.entries.push_back(Entry { seq, before, state });
        self.trim();
        seq
    }

    /// Booking `seq` went: its slot is used.
    pub(super) fn sent(&mut self, seq: u64) {
        if let Some(entry) = self.find(seq) {
            if entry.state == State::Waiting {
                entry.state = State::Sent;
                self.sent += 1;
            }
        }
        self.trim();
    }

    /// Booking `seq` will never go. Returns the TATs to restore when that
    /// gave back the tail of the queue.
    pub(super) fn give_up(&mut self, seq: u64) -> Option<Tats> {
        let entry = self.find(seq)?;
        if entry.state != State::Waiting {
            return None;
        }
        entry.state = State::GivenUp;
        let mut restore = None;
        while self
            .entries
            .back()
            .is_some_and(|entry| entry.state == State::GivenUp)
        {
            if let Some(entry) = self.entries.pop_back() {
                // Numbers stay contiguous: the next booking takes this one's.
                self.next = entry.seq;
                restore = Some(entry.before);
            }
        }
        self.trim();
        restore
    }

    /// A hold pushed the queue back (see [`Tat::push_back`]): what each
    /// booking would restore moves the same way.
    pub(super) fn push_back(
        &mut self,
        paces: [Option<&Pace>; 2],
        now: Instant,
        pushed: Duration,
        until: Instant,
    ) {
        for entry in &mut self.entries {
            for (tat, pace) in entry.before.iter_mut().zip(paces) {
                if let Some(pace) = pace {
                    tat.push_back(pace, now, pushed, until);
                }
            }
        }
    }

    /// Drops what can no longer be given back from the front: bookings
    /// that went, and bookings given up before one that went.
    fn trim(&mut self) {
        while let Some(front) = self.entries.front() {
            match front.state {
                State::Sent => self.sent -= 1,
                State::GivenUp if self.sent > 0 => {}
                _ => break,
            }
            self.entries.pop_front();
        }
    }

    fn find(&mut self, seq: u64) -> Option<&mut Entry> {
        let first = self.entries.front()?.seq;
        let index = usize::try_from(seq.checked_sub(first)?).ok()?;
        self.entries.get_mut(index).filter(|entry| entry.seq == seq)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use proptest::prelude::*;

    #[derive(Debug, Clone)]
    enum Op {
        Book,
        Send(usize),
        GiveUp(usize),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            2 => Just(Op::Book),
            1 => (0usize..40).prop_map(Op::Send),
            2 => (0usize..40).prop_map(Op::GiveUp),
        ]
    }

    #[test]
    fn a_booking_that_went_is_counted_once_and_dropped_once_nothing_before_it_waits() {
        let mut refunds = Refunds::default();
        let none: Tats = [Tat(None), Tat(None)];
        let seqs: Vec<u64> = (0..3).map(|_| refunds.book(none, false)).collect();
        refunds.sent(seqs[1]);
        refunds.sent(seqs[1]);
        assert_eq!(refunds.sent, 1, "sent twice, counted once");
        assert_eq!(refunds.entries.len(), 3, "the first still waits");
        assert!(
            refunds.give_up(seqs[1]).is_none(),
            "a booking that went is not given up"
        );
        assert_eq!((refunds.entries.len(), refunds.sent), (3, 1));
        refunds.sent(seqs[0]);
        assert_eq!(refunds.entries.len(), 1, "both that went are dropped");
        assert_eq!(refunds.sent, 0);
        refunds.sent(seqs[2]);
        assert!(refunds.entries.is_empty());
    }

    #[test]
    fn a_slot_given_up_in_the_middle_comes_back_with_the_tail() {
        let pace = Pace::per_minute(60, 1).unwrap();
        let now = Instant::now();
        let mut tat = Tat(None);
        let mut refunds = Refunds::default();
        let mut book = |tat: &mut Tat| {
            let before = [*tat, Tat(None)];
            let slot = tat.slot(&pace, now, 1);
            tat.book(&pace, slot, 1);
            refunds.book(before, false)
        };
        let first = book(&mut tat);
        let second = book(&mut tat);
        assert!(refunds.give_up(first).is_none(), "the second still waits");
        let restored = refunds.give_up(second).map(|tats| tats[0].0);
        assert_eq!(restored, Some(None), "both given back");
        assert!(refunds.entries.is_empty());
    }

    proptest! {
        /// Giving slots back never lets the quota send faster than it
        /// allows after a booking that went, and a queue whose bookings are
        /// all given up leaves the quota as it found it.
        #[test]
        fn refunds_never_undercut_a_sent_booking(ops in proptest::collection::vec(op(), 1..80)) {
            let pace = Pace::per_minute(60, 1).unwrap();
            let now = Instant::now();
            let mut tats: Tats = [Tat(None), Tat(None)];
            let mut refunds = Refunds::default();
            // (seq, end of its slot, state) of every booking made.
            let mut made: Vec<(u64, Instant, State)> = Vec::new();
            for op in ops {
                match op {
                    Op::Book => {
                        let slot = tats[0].slot(&pace, now, 1);
                        let before = tats;
                        tats[0].book(&pace, slot, 1);
                        let seq = refunds.book(before, false);
                        made.push((seq, slot + pace.per_unit, State::Waiting));
                    }
                    Op::Send(i) | Op::GiveUp(i) if made.is_empty() => { let _ = i; }
                    Op::Send(i) => {
                        let i = i % made.len();
                        if made[i].2 == State::Waiting {
                            refunds.sent(made[i].0);
                            made[i].2 = State::Sent;
                        }
                    }
                    Op::GiveUp(i) => {
                        let i = i % made.len();
                        if made[i].2 == State::Waiting {
                            if let Some(restored) = refunds.give_up(made[i].0) {
                                tats = restored;
                            }
                            made[i].2 = State::GivenUp;
                        }
                    }
                }
                let sent_end = made.iter().filter(|m| m.2 == State::Sent).map(|m| m.1).max();
                if let Some(end) = sent_end {
                    prop_assert!(tats[0].0.is_some_and(|tat| tat >= end), "{:?} < {end:?}", tats[0].0);
                }
                // The bookings that wait are the ones kept as waiting, and
                // only what may still be given back is kept: the queue
                // starts at one that waits, or at one given up with none
                // behind it that went.
                let kept = |state| refunds.entries.iter().filter(|e| e.state == state).count();
                let waiting = made.iter().filter(|m| m.2 == State::Waiting).count();
                prop_assert_eq!(kept(State::Waiting), waiting);
                prop_assert_eq!(kept(State::Sent), refunds.sent);
                if let Some(front) = refunds.entries.front() {
                    prop_assert!(
                        front.state == State::Waiting || (front.state == State::GivenUp && refunds.sent == 0),
                        "{:?} kept at the front", front.state
                    );
                }
                // Waiting bookings keep their slots: the TAT covers them.
                let waiting_end = made.iter().filter(|m| m.2 == State::Waiting).map(|m| m.1).max();
                if let Some(end) = waiting_end {
                    prop_assert!(tats[0].0.is_some_and(|tat| tat >= end));
                }
            }
            if made.iter().all(|m| m.2 == State::GivenUp) {
                prop_assert!(tats[0].0.is_none(), "all given back: {:?}", tats[0].0);
            }
        }
    }
}
