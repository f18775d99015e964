//! A key's quota bookings: its request pacer, the configured token quota's
//! slots, and the quotas its provider states (a token bucket, and the room
//! its request quota has left).

use super::gcra::{Pace, Tat};
use super::pacer::Pacer;
use std::time::Duration;
use tokio::time::Instant;

/// The longest a send waits for tokens a provider stated.
const LONGEST_TOKEN_WAIT: Duration = Duration::from_secs(3_600);

/// A gate's configured quotas: requests, and tokens, per minute.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Paces {
    pub(super) requests: Option<Pace>,
    pub(super) tokens: Option<Pace>,
}

impl Paces {
    /// Whether any quota is configured.
    pub(super) fn any(&self) -> bool {
        self.requests.is_some() || self.tokens.is_some()
    }
}

/// One key's bookings under its quotas.
#[derive(Debug)]
pub(super) struct QuotaBook {
    /// Its sends' tickets at the key's request pace.
    pub(super) pacer: Pacer,
    /// That pace: the configured quota's or the learned rate's, whichever
    /// is slower (`None`: the key's requests are not paced).
    pub(super) pace: Option<Pace>,
    /// Its bookings under the configured token quota, if there is one.
    pub(super) tokens: Tat,
    /// The token quota the provider's answers state, once one did: the
    /// same bucket as a configured quota's, resynced to each statement.
    stated_tokens: Option<(Pace, Tat)>,
    /// Stated tokens booked by sends that have not gone yet.
    stated_waiting: u64,
    /// Stated tokens of the sends gone so far (only ever grows): a send's
    /// mark is the count once it went, so an answer's count has not seen
    /// what went after its send, nor what still waits.
    stated_gone: u64,
    /// The place of the send whose answer last restated the bucket: an
    /// answer to an earlier send is older news, and only lowers it.
    stated_synced: Option<u64>,
    /// Sends its stated request quota has room for, beyond those let
    /// through since: they go at once, unpaced (`0`: none stated, or a
    /// refusal spent it).
    pub(super) stated_room: u64,
    /// Counts each time the room is stated anew (or spent by a refusal):
    /// room given back counts only within the statement it was taken from.
    room_epoch: u64,
}

impl QuotaBook {
    pub(super) fn new(now: Instant, pace: Option<Pace>) -> QuotaBook {
        QuotaBook {
            pacer: Pacer::new(now, pace.map_or(1, |pace| pace.burst)),
            pace,
            tokens: Tat::default(),
            stated_tokens: None,
            stated_waiting: 0,
            stated_gone: 0,
            stated_synced: None,
            stated_room: 0,
            room_epoch: 0,
        }
    }

    /// When the send of `ticket`, if any, is due at the key's pace.
    pub(super) fn ticket_time(&self, ticket: Option<u64>) -> Option<Instant> {
        Some(self.pacer.time_of(ticket?, self.pace?.interval))
    }

    /// Takes one send's room under the stated request quota, if any is
    /// left: that send goes unpaced.
    /// The statement it was taken from, if any.
    pub(super) fn take_room(&mut self) -> Option<u64> {
        let room = self.stated_room > 0;
        self.stated_room = self.stated_room.saturating_sub(1);
        room.then_some(self.room_epoch)
    }

    /// States the room anew: `room` sends go at once, unpaced.
    pub(super) fn set_room(&mut self, room: u64) {
        self.stated_room = room;
        self.room_epoch = self.room_epoch.wrapping_add(1);
    }

    /// A send that took room under the statement `epoch` never went: its
    /// room comes back, unless the room was stated anew (or spent) since.
    pub(super) fn give_back_room(&mut self, epoch: u64) {
        if epoch == self.room_epoch {
            self.stated_room = self.stated_room.saturating_add(1);
        }
    }

    /// When the stated token quota has `cost` tokens, no sooner than
    /// `floor`: `None` when no quota was stated, the send costs nothing,
    /// or it costs more than the quota ever holds.
    pub(super) fn stated_slot(&self, cost: u64, now: Instant, floor: Instant) -> Option<Instant> {
        let (pace, tat) = self.stated_tokens.as_ref()?;
        // No longer than an hour: a bogus statement must not queue a
        // request without a deadline for longer.
        let longest = now.checked_add(LONGEST_TOKEN_WAIT).unwrap_or(now);
        (cost > 0 && cost <= pace.capacity())
            .then(|| floor.max(tat.slot(pace, now, cost).min(longest)))
    }

    /// The stated token quota as the fleet shares it: its time per token,
    /// and the tokens its bucket has left at `now`.
    pub(super) fn stated_token_room(&self, now: Instant) -> Option<(Duration, u64)> {
        let (pace, tat) = self.stated_tokens.as_ref()?;
        let debt = tat
            .0
            .map_or(Duration::ZERO, |tat| tat.saturating_duration_since(now));
        let spent = debt.as_nanos() / pace.interval.as_nanos().max(1);
        let spent = u64::try_from(spent).unwrap_or(u64::MAX);
        Some((pace.interval, pace.capacity().saturating_sub(spent)))
    }

    /// A send booked `cost` stated tokens at `now`.
    pub(super) fn book_stated(&mut self, cost: u64, now: Instant) {
        if let Some((pace, tat)) = &mut self.stated_tokens {
            tat.book(pace, now, cost);
            self.stated_waiting = self.stated_waiting.saturating_add(cost);
        }
    }

    /// A send that booked `cost` stated tokens goes: its mark, the stated
    /// tokens gone so far, its own included.
    pub(super) fn go_stated(&mut self, cost: u64) -> u64 {
        self.stated_waiting = self.stated_waiting.saturating_sub(cost);
        self.stated_gone = self.stated_gone.saturating_add(cost);
        self.stated_gone
    }

    /// A send that booked `cost` stated tokens will never reach the
    /// provider: dropped while it waited, or after it went (`gone`).
    pub(super) fn refund_stated(&mut self, cost: u64, gone: bool, now: Instant) {
        if let Some((pace, tat)) = &mut self.stated_tokens {
            tat.refund(pace, cost, now);
        }
        if !gone {
            self.stated_waiting = self.stated_waiting.saturating_sub(cost);
        }
    }

    /// An answer to the send that went `at` (its place among the key's
    /// sends, and its mark from [`go_stated`](Self::go_stated); `None`
    /// for a send of an earlier state of the key) stated the token quota:
    /// `per_minute`, with `remaining` left. The newest answer's count is
    /// the bucket's, less what went after its send and what still waits
    /// (a provider's count of room is evidence, and this side's costs are
    /// only estimates); an older answer's only lowers it. True when it is
    /// the first.
    pub(super) fn observe_tokens(
        &mut self,
        per_minute: u64,
        remaining: u64,
        now: Instant,
        at: Option<(u64, u64)>,
    ) -> bool {
        let per_minute = u32::try_from(per_minute).unwrap_or(u32::MAX);
        let Some(stated) = Pace::per_minute(per_minute, per_minute) else {
            return false;
        };
        let first = self.stated_tokens.is_none();
        let (pace, tat) = self.stated_tokens.get_or_insert((stated, Tat::default()));
        if *pace != stated {
            tat.repace(pace, &stated, now);
            *pace = stated;
        }
        let newest = at.filter(|(order, _)| self.stated_synced.is_none_or(|o| *order > o));
        if let Some((order, mark)) = newest {
            let unseen = self
                .stated_gone
                .saturating_sub(mark)
                .saturating_add(self.stated_waiting);
            tat.restate(pace, remaining, unseen, now);
            self.stated_synced = Some(order);
        } else {
            tat.resync(pace, remaining, now);
        }
        first
    }

    /// Nothing booked reaches past `now`.
    pub(super) fn idle(&self, now: Instant) -> bool {
        self.pace
            .is_none_or(|pace| self.pacer.next_time(pace.interval) <= now)
            && self.tokens.idle(now)
            && self
                .stated_tokens
                .is_none_or(|(pace, tat)| tat.settled(&pace, now))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    const MS: fn(u64) -> Duration = Duration::from_millis;

    /// A key whose provider stated 60 000 tokens a minute (one a
    /// millisecond), `remaining` of them left at `now`.
    fn stated(remaining: u64, now: Instant) -> QuotaBook {
        let mut book = QuotaBook::new(now, None);
        assert!(
            book.observe_tokens(60_000, remaining, now, Some((0, 0))),
            "the first statement"
        );
        book
    }

    #[tokio::test(start_paused = true)]
    async fn the_fleet_reads_the_stated_tokens_left_and_their_pace() {
        let t0 = Instant::now();
        assert_eq!(QuotaBook::new(t0, None).stated_token_room(t0), None);
        let mut book = stated(5_000, t0);
        assert_eq!(book.stated_token_room(t0), Some((MS(1), 5_000)));
        book.book_stated(3_000, t0);
        assert_eq!(book.stated_token_room(t0), Some((MS(1), 2_000)));
        // A second refills 1,000.
        assert_eq!(book.stated_token_room(t0 + MS(1_000)), Some((MS(1), 3_000)));
    }

    fn wait(book: &QuotaBook, cost: u64, now: Instant) -> Duration {
        book.stated_slot(cost, now, now).unwrap() - now
    }

    #[tokio::test(start_paused = true)]
    async fn the_configured_token_quota_books_refunds_and_moves_with_a_hold() {
        let t0 = Instant::now();
        // 600 tokens a minute (one per 100 ms), 300 at once.
        let tokens = Pace::per_minute(600, 300).unwrap();
        let paces = Paces {
            requests: None,
            tokens: Some(tokens),
        };
        assert!(paces.any(), "a token quota alone is a quota");
        assert!(!Paces::default().any());
        let requests_only = Paces {
            requests: Some(tokens),
            tokens: None,
        };
        assert!(requests_only.any(), "a request quota alone is a quota");
        let mut book = QuotaBook::new(t0, None).tokens;
        assert_eq!(book.slot(&tokens, t0, 300), t0, "a full bucket");
        book.book(&tokens, t0, 300);
        assert_eq!(book.slot(&tokens, t0, 10), t0 + MS(1_000), "spent");
        book.refund(&tokens, 300, t0);
        assert_eq!(book.slot(&tokens, t0, 10), t0, "given back");
        // A hold to 2 s said the upstream's bucket is empty then: the next
        // token comes one period after it.
        book.push_back(&tokens, t0, MS(2_000), t0 + MS(2_000));
        assert_eq!(book.slot(&tokens, t0, 1), t0 + MS(2_100));
    }

    #[test]
    fn stated_room_lets_that_many_sends_through_and_no_more() {
        let mut book = QuotaBook::new(Instant::now(), None);
        assert!(book.take_room().is_none(), "nothing stated: no room");
        book.set_room(2);
        assert_eq!(book.stated_room, 2);
        let first = book.take_room();
        assert!(first.is_some());
        assert_eq!(book.stated_room, 1);
        assert!(book.take_room().is_some());
        assert!(book.take_room().is_none(), "spent");
        assert_eq!(book.stated_room, 0);
        book.give_back_room(first.unwrap());
        assert_eq!(book.stated_room, 1, "room not used comes back");
        let taken = book.take_room().unwrap();
        book.set_room(0);
        book.give_back_room(taken);
        assert_eq!(
            book.stated_room, 0,
            "not into a room stated (or spent) since"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn costed_sends_queue_for_their_stated_tokens_in_order() {
        let t0 = Instant::now();
        let mut book = stated(500, t0);
        assert_eq!(wait(&book, 300, t0), MS(0), "a small one fits now");
        book.book_stated(300, t0);
        assert_eq!(
            wait(&book, 1_200, t0),
            MS(1_000),
            "a large one waits for 1 000 more"
        );
        book.book_stated(1_200, t0);
        assert_eq!(
            wait(&book, 100, t0),
            MS(1_100),
            "and the next goes after it"
        );
        book.refund_stated(1_200, false, t0);
        assert_eq!(wait(&book, 100, t0), MS(0));
        assert_eq!(
            book.stated_slot(0, t0, t0),
            None,
            "a send that costs nothing"
        );
        assert_eq!(
            book.stated_slot(60_001, t0, t0),
            None,
            "one that never fits"
        );
        assert_eq!(
            book.stated_slot(60_000, t0, t0 + MS(5)),
            Some(t0 + MS(59_800))
        );
        assert_eq!(
            book.stated_slot(1, t0, t0 + MS(5)),
            Some(t0 + MS(5)),
            "the floor"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn the_stated_bucket_refills_at_the_quota_up_to_its_capacity() {
        let t0 = Instant::now();
        let mut book = stated(0, t0);
        assert_eq!(wait(&book, 1_000, t0), MS(1_000));
        let t1 = t0 + MS(500);
        assert_eq!(wait(&book, 1_000, t1), MS(500), "500 came back");
        book.book_stated(500, t1);
        let t2 = t0 + MS(2_000);
        assert_eq!(
            wait(&book, 1_000, t2),
            MS(0),
            "1 500 more since, not counted twice"
        );
        assert_eq!(wait(&book, 1_501, t2), MS(1));
        let t3 = t2 + Duration::from_secs(120);
        assert_eq!(wait(&book, 60_000, t3), MS(0));
        book.book_stated(60_000, t3);
        assert_eq!(wait(&book, 1, t3), MS(1));
    }

    #[tokio::test(start_paused = true)]
    async fn the_stated_quota_is_settled_once_the_refill_covers_every_booking() {
        let t0 = Instant::now();
        let mut book = stated(0, t0);
        assert!(book.idle(t0), "nothing booked");
        book.book_stated(1_000, t0);
        assert!(!book.idle(t0));
        assert!(!book.idle(t0 + MS(999)));
        assert!(book.idle(t0 + MS(1_000)), "1 000 came back");
    }

    /// Exactly `tokens` are left at `t0`: that many go at once, and 1 000
    /// more wait the second the quota takes to give them.
    #[track_caller]
    fn assert_left(book: &QuotaBook, tokens: u64, t0: Instant) {
        assert_eq!(wait(book, tokens, t0), MS(0), "{tokens} left");
        assert_eq!(
            wait(book, tokens + 1_000, t0),
            MS(1_000),
            "only {tokens} left"
        );
    }

    /// A send of `cost` stated tokens booked and gone at `now`: its place
    /// `order` and its mark, for its answer.
    fn goes(book: &mut QuotaBook, cost: u64, order: u64, now: Instant) -> Option<(u64, u64)> {
        book.book_stated(cost, now);
        Some((order, book.go_stated(cost)))
    }

    #[tokio::test(start_paused = true)]
    async fn the_newest_answer_restates_the_bucket_and_an_older_one_only_lowers_it() {
        let t0 = Instant::now();
        let mut book = stated(5_000, t0);
        assert!(!book.observe_tokens(60_000, 1_000, t0, Some((1, 0))));
        assert_eq!(wait(&book, 2_000, t0), MS(1_000));
        // More left by the provider's count than this side thought (its
        // costs are estimates): the provider's count wins.
        book.observe_tokens(60_000, 50_000, t0, Some((2, 0)));
        assert_left(&book, 50_000, t0);
        // Two sends go with 10 000 and 5 000: 35 000 left.
        let first = goes(&mut book, 10_000, 3, t0);
        let second = goes(&mut book, 5_000, 4, t0);
        assert_eq!(wait(&book, 35_000, t0), MS(0));
        // The first one's answer counts 40 000 left, but not the 5 000
        // that went after it: 35 000.
        book.observe_tokens(60_000, 40_000, t0, first);
        assert_left(&book, 35_000, t0);
        // The second one's answer counts everything: 45 000 left.
        book.observe_tokens(60_000, 45_000, t0, second);
        assert_left(&book, 45_000, t0);
        // A late answer to the first is older news, and so is one to a
        // send of an earlier state of the key: they lower what is left,
        // never raise it.
        book.observe_tokens(60_000, 50_000, t0, first);
        book.observe_tokens(60_000, 50_000, t0, None);
        assert_eq!(wait(&book, 46_000, t0), MS(1_000));
        book.observe_tokens(60_000, 20_000, t0, first);
        assert_left(&book, 20_000, t0);
        // Twice the quota, all of it left by a newer count.
        book.observe_tokens(120_000, 120_000, t0, Some((5, 15_000)));
        assert_eq!(wait(&book, 120_000, t0), MS(0));
        assert!(!book.observe_tokens(0, 0, t0, None), "no quota stated");
    }

    #[tokio::test(start_paused = true)]
    async fn a_send_still_waiting_stays_booked_through_a_newer_count() {
        // X books 10 000 and waits; Y books 5 000 and goes. Y's answer
        // says 55 000 left: X's 10 000 are not in it, so 45 000 are.
        let t0 = Instant::now();
        let mut book = stated(60_000, t0);
        book.book_stated(10_000, t0);
        let y = goes(&mut book, 5_000, 1, t0);
        book.observe_tokens(60_000, 55_000, t0, y);
        assert_left(&book, 45_000, t0);
        // X is dropped before it goes: its 10 000 come back, no more.
        book.refund_stated(10_000, false, t0);
        assert_left(&book, 55_000, t0);
        // The next count no longer holds X back.
        let z = goes(&mut book, 1_000, 2, t0);
        book.observe_tokens(60_000, 54_000, t0, z);
        assert_left(&book, 54_000, t0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_new_quota_keeps_what_went_after_the_answered_send() {
        // 59 000 tokens went after the send whose answer states twice the
        // quota, all of it left: they stay booked, so 61 000 are left,
        // and the rest come at two a millisecond.
        let t0 = Instant::now();
        let mut book = stated(60_000, t0);
        let answered = goes(&mut book, 0, 1, t0);
        goes(&mut book, 59_000, 2, t0);
        book.observe_tokens(120_000, 120_000, t0, answered);
        assert_eq!(wait(&book, 61_000, t0), MS(0));
        assert_eq!(wait(&book, 62_000, t0), MS(500));
    }

    #[tokio::test(start_paused = true)]
    async fn no_send_waits_more_than_an_hour_for_stated_tokens() {
        let t0 = Instant::now();
        let mut book = stated(0, t0);
        for _ in 0..70 {
            book.book_stated(60_000, t0);
        }
        assert_eq!(wait(&book, 1, t0), LONGEST_TOKEN_WAIT);
    }
}
