//! Adaptive concurrency per key: an overload (`529`, `overloaded_error`)
//! is the provider saying it holds too much of ours at once, not that we
//! send too often. So it cuts how many of the key's sends may be in flight,
//! not the send rate: additive increase, multiplicative decrease, as TCP
//! does with its window.
//!
//! Every send is counted while in flight, from its call until the retry
//! policy has judged its answer (for a stream, its head or first event: a
//! stream still generating does not hold its slot, so for streams the
//! ceiling bounds how many start at once, not how many run).
//! First, do no harm: overloads are evidence that the key holds too many
//! of ours only when they are many. A key gets no ceiling until overloads
//! are at least half of its recent answers ([`ENGAGE_SHARE`]); a provider
//! overloaded whatever we hold (a platform-wide 529 to a share of all
//! requests) sets none below that share, and each overloaded request backs
//! off on its own, as without a gate. A ceiling is judged by the first [`TRIAL`]
//! answers to sends that went under it: unless their overload share is
//! under half the share it was set at, it stands down (every waiting send
//! goes, and while in [`Doubt`] the key gets no other ceiling).
//!
//! A key has no ceiling until then: the ceiling then starts
//! a little under what was in flight, is never above the others in flight
//! with a refused send, falls by a tenth once per congestion event (the
//! overloads of sends that went before the last decrease belong to it),
//! and rises by one over a ceiling's worth of served sends while every slot
//! is taken. Sends over the ceiling wait their turn, first in, first out
//! (tokio's fair semaphore), bounded by the request's deadline.
//!
//! While the ceiling is above its floor it meters the key, so an overloaded
//! send's resend waits for a slot instead of a backoff (the retry layer
//! skips the sleep), unless the same request was overloaded under the
//! ceiling just before: the slot a rising ceiling adds is the one that
//! probes past the provider's room, and one request must not take it
//! round after round. At the floor the provider is overloaded whatever we
//! hold there, and resends back off as well.

use super::doubt::Doubt;
use super::lock;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

/// Share of the ceiling kept after an overload.
const DECREASE: f64 = 0.9;
/// Share of the sends in flight at the first overload the ceiling starts at.
const FIRST: f64 = 0.9;
/// From this ceiling up the key's slots meter its overloaded sends' resends:
/// they wait for a slot, not a backoff. Below it the provider is overloaded
/// whatever we hold there, and a resend backs off as well.
const METERS_FROM: f64 = 2.0;

/// The bit of [`Flight::state`] that says the key has a ceiling.
const LIMITED: u64 = 1 << 63;

/// [`Flight::overloads`] of a key whose every answer was an overload.
const ALL: u32 = 1 << 16;

/// Overload share from which a key gets a ceiling: at least half of its
/// recent answers.
const ENGAGE_SHARE: f64 = 0.5;

/// Answers under a new ceiling before it is judged: about two of the
/// share's averaging spans.
const TRIAL: u32 = 32;

/// One key's sends in flight, and its ceiling once it has one.
#[derive(Debug, Default)]
pub(super) struct Flight {
    /// The sends in flight, and [`LIMITED`] once `ceiling` is set: one
    /// word, so a send's start or end is ordered against the ceiling's
    /// creation (it was counted then, or it sees the ceiling), without a
    /// lock until the key has a ceiling.
    state: AtomicU64,
    ceiling: Mutex<Limit>,
    /// The share of overloads among the key's recent answers, in parts of
    /// [`ALL`] (an average over about the last sixteen).
    overloads: AtomicU32,
}

/// The share of overloads after one more answer, `overloaded` or not.
fn updated(share: u32, overloaded: bool) -> u32 {
    if overloaded {
        share + (ALL - share) / 16
    } else {
        share - share.div_ceil(16)
    }
}

/// The key's ceiling, if it has one, and when its last one stood down.
#[derive(Debug, Default)]
struct Limit {
    ceiling: Option<Ceiling>,
    doubt: Doubt,
}

#[derive(Debug)]
struct Ceiling {
    /// The slots: one permit per send that may still go.
    slots: Arc<Semaphore>,
    limit: f64,
    /// Slots to swallow as sends end: the ceiling fell below what was in
    /// flight.
    debt: usize,
    /// Overloads of sends that went before this belong to the last decrease.
    quiet_until: Instant,
    /// Its trial, until it is over (`None`: its cuts lowered the share).
    trial: Option<Trial>,
}

/// The answers to the sends that went under a new ceiling (with a slot).
#[derive(Debug, Clone, Copy)]
struct Trial {
    /// The overload share when the ceiling was set.
    at_start: u32,
    answers: u32,
    overloads: u32,
}

impl Ceiling {
    /// The ceiling moves from `self.limit` to `limit`: slots are added, or
    /// taken back (now if free, else as sends end).
    fn resize(&mut self, limit: f64) {
        let (from, to) = (self.limit as usize, limit as usize);
        self.limit = limit;
        if to > from {
            self.give_back(to - from);
        } else if to < from {
            let shrink = from - to;
            let forgotten = self.slots.forget_permits(shrink);
            self.debt += shrink - forgotten;
        }
    }

    /// `n` slots come back (a send ended, or the ceiling rose): they pay
    /// what a lowered ceiling is still owed first.
    fn give_back(&mut self, n: usize) {
        let paid = n.min(self.debt);
        self.debt -= paid;
        self.slots.add_permits(n - paid);
    }
}

impl Flight {
    /// The slots a send must take one of before it goes, once the key has
    /// a ceiling: each ceiling has its own, so a permit of one that stood
    /// down is told from the current one's.
    pub(super) fn slots(&self) -> Option<Arc<Semaphore>> {
        if self.state.load(Ordering::Acquire) & LIMITED == 0 {
            return None;
        }
        let limit = lock(&self.ceiling);
        Some(Arc::clone(&limit.ceiling.as_ref()?.slots))
    }

    /// Sends in flight now.
    pub(super) fn in_flight(&self) -> usize {
        count(self.state.load(Ordering::Acquire))
    }

    /// A send that went at `sent` was answered with an overload at `now`
    /// (it still counts in flight here, unless not `counted`: a quiet
    /// gate's, read into a key that did not take the quiet sends over).
    /// Each such send says the provider holds fewer than the others in
    /// flight with it: the ceiling is never above that. One decrease of a
    /// tenth per congestion event besides.
    ///
    /// Whether the ceiling now meters the key's sends (it is not at its
    /// floor): a resend then waits for a slot, not a backoff.
    pub(super) fn overloaded_counted(&self, sent: Instant, now: Instant, counted: bool) -> bool {
        let share = self.count(true);
        let others = self.in_flight().saturating_sub(usize::from(counted)) as f64;
        let mut limit = lock(&self.ceiling);
        let doubted = limit.doubt.holds(now);
        let ceiling = &mut limit.ceiling;
        match ceiling.as_mut() {
            // Too few overloads to say the key holds too many of ours, or
            // its last ceiling did not lower them.
            None if doubted || f64::from(share) < ENGAGE_SHARE * f64::from(ALL) => false,
            None => {
                // Every send that started before this is counted here, and
                // gives its slot back when it ends; every later one sees
                // the ceiling (and waits for its first permits, added now).
                let semaphore = Arc::new(Semaphore::new(0));
                let in_flight = count(self.state.fetch_or(LIMITED, Ordering::AcqRel));
                let limit = (others * FIRST).max(1.0);
                let slots = limit as usize;
                semaphore.add_permits(slots.saturating_sub(in_flight));
                *ceiling = Some(Ceiling {
                    slots: semaphore,
                    limit,
                    debt: in_flight.saturating_sub(slots),
                    quiet_until: now,
                    trial: Some(Trial {
                        at_start: share,
                        answers: 0,
                        overloads: 0,
                    }),
                });
                tracing::debug!(limit, "llm-retry: key overloaded, in-flight ceiling set");
                limit >= METERS_FROM
            }
            // Overloaded with nothing else of ours in flight: what the key
            // holds is not what overloads it, and a ceiling only queues its
            // sends (it would sink to one at a time under overloads that
            // come whatever the load).
            Some(_) if others < 1.0 => {
                self.stand_down(&mut limit, now);
                false
            }
            Some(c) => {
                let mut limit = c.limit.min(others.max(1.0));
                if sent > c.quiet_until {
                    limit = (limit * DECREASE).max(1.0);
                    c.quiet_until = now;
                }
                if limit < c.limit {
                    c.resize(limit);
                    tracing::debug!(limit, "llm-retry: key overloaded, ceiling lowered");
                }
                c.limit >= METERS_FROM
            }
        }
    }

    /// A send was served: the ceiling rises by one over a ceiling's worth,
    /// while it is what holds sends back (every slot taken, this send's
    /// included): a quiet key does not bank room for a burst.
    pub(super) fn served(&self) {
        // The share decays; a key never overloaded pays a load, no write.
        if self.overloads.load(Ordering::Relaxed) > 0 {
            self.count(false);
        }
        if self.state.load(Ordering::Acquire) & LIMITED == 0 {
            return;
        }
        if let Some(c) = lock(&self.ceiling).ceiling.as_mut() {
            // A slot given back goes to the first waiting send at once, so
            // none free means sends wait, or the ceiling is just full. That
            // includes a ceiling still owed slots after a cut: it holds sends
            // back, and each success lifts it by a ceiling's share only
            // (waiting for the debt to clear made the 40-client test take
            // 4.9 s instead of 4.0 s against the same room).
            if c.slots.available_permits() == 0 {
                let limit = c.limit + 1.0 / c.limit.max(1.0);
                c.resize(limit);
            }
        }
    }

    /// One more answer to a send that went under the ceiling (with a
    /// slot), `overloaded` or not. After [`TRIAL`] of them the ceiling
    /// stands down (true) unless their overload share is under half the
    /// share it was set at: the provider is overloaded whatever the key
    /// holds, and a ceiling only queues its sends. The key then sends as
    /// without a gate, and gets no other ceiling while in [`Doubt`].
    fn tried(&self, slots: &Arc<Semaphore>, overloaded: bool, now: Instant) -> bool {
        let mut limit = lock(&self.ceiling);
        // Only the answers to sends that went under this very ceiling.
        let Some(c) = limit
            .ceiling
            .as_mut()
            .filter(|c| Arc::ptr_eq(&c.slots, slots))
        else {
            return false;
        };
        let Some(trial) = c.trial.as_mut() else {
            return false;
        };
        trial.answers += 1;
        trial.overloads += u32::from(overloaded);
        if trial.answers < TRIAL {
            return false;
        }
        if trial.overloads * (ALL / TRIAL) < trial.at_start / 2 {
            c.trial = None;
            return false;
        }
        self.stand_down(&mut limit, now);
        true
    }

    /// The key's overloads do not follow what it holds in flight: every
    /// waiting send goes (without a slot), sends in flight end uncounted,
    /// and the key gets no other ceiling while in [`Doubt`].
    fn stand_down(&self, limit: &mut Limit, now: Instant) {
        self.state.fetch_and(!LIMITED, Ordering::AcqRel);
        if let Some(c) = limit.ceiling.take() {
            c.slots.close();
        }
        limit.doubt.proved_wrong(now);
        tracing::debug!(
            "llm-retry: the key's overloads do not follow what it holds in flight; \
             it is no longer held to a ceiling"
        );
        crate::observe::gate_stood_down("ceiling");
    }

    /// One more answer in the overload share; the share after it.
    fn count(&self, overloaded: bool) -> u32 {
        let next = |share| Some(updated(share, overloaded));
        let share = self
            .overloads
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, next);
        updated(share.unwrap_or_else(|share| share), overloaded)
    }
}

/// The sends in flight in a [`Flight::state`] word.
fn count(state: u64) -> usize {
    usize::try_from(state & !LIMITED).unwrap_or(usize::MAX)
}

/// One send in flight on a key: counted from its call until dropped.
#[derive(Debug)]
pub(super) struct InFlight {
    flight: Arc<Flight>,
    /// The ceiling it went with a slot under, if it did.
    under: Option<Arc<Semaphore>>,
    /// Where its answer is read, when not into `flight`: a quiet gate's
    /// send keyed by its news (see [`InFlight::read_into`]).
    read_into: Option<Arc<Flight>>,
}

impl InFlight {
    /// Counts a send going now with `slot`, the permit it took from the
    /// key's ceiling; one going without (the ceiling came after it was let
    /// through) is over the ceiling, and owes the slot it will give back.
    ///
    /// A permit of a ceiling that stood down since it was taken is no slot
    /// under the current one.
    pub(super) fn start(flight: Arc<Flight>, slot: Option<OwnedSemaphorePermit>) -> InFlight {
        let before = flight.state.fetch_add(1, Ordering::AcqRel);
        let taken = slot.map(|permit| {
            let slots = Arc::clone(permit.semaphore());
            permit.forget();
            slots
        });
        let mut under = None;
        if before & LIMITED != 0 {
            if let Some(c) = lock(&flight.ceiling).ceiling.as_mut() {
                match taken {
                    Some(slots) if Arc::ptr_eq(&slots, &c.slots) => under = Some(slots),
                    // Not counted when the ceiling was made: over it.
                    _ => c.debt += 1,
                }
            }
        }
        InFlight {
            flight,
            under,
            read_into: None,
        }
    }

    /// A quiet gate's send, counted among the quiet sends until dropped
    /// (the first key made took them over), whose answer is read into its
    /// key's `flight`.
    pub(super) fn read_into(&mut self, flight: Arc<Flight>) {
        self.read_into = Some(flight);
    }

    /// The flight its answer is read into.
    fn answered(&self) -> &Flight {
        self.read_into.as_deref().unwrap_or(&self.flight)
    }

    /// Whether it went with a slot under the key's ceiling.
    pub(super) fn slotted(&self) -> bool {
        self.under.is_some()
    }

    /// The send was served.
    pub(super) fn served(&self) {
        if let Some(slots) = &self.under {
            self.flight.tried(slots, false, Instant::now());
        }
        self.answered().served();
    }

    /// The send, which went at `sent`, was answered with an overload at
    /// `now`; whether the key's ceiling meters the resend.
    pub(super) fn overloaded(&self, sent: Instant, now: Instant) -> bool {
        let stood_down = self
            .under
            .as_ref()
            .is_some_and(|slots| self.flight.tried(slots, true, now));
        if stood_down {
            // Still an answer of the key's, in its share.
            self.flight.count(true);
            return false;
        }
        let counted = self
            .read_into
            .as_ref()
            .is_none_or(|into| Arc::ptr_eq(into, &self.flight));
        self.answered().overloaded_counted(sent, now, counted)
    }
}

impl Drop for InFlight {
    /// The send's slot goes back, or pays a debt of a lowered ceiling.
    fn drop(&mut self) {
        if self.flight.state.fetch_sub(1, Ordering::AcqRel) & LIMITED == 0 {
            return;
        }
        if let Some(c) = lock(&self.flight.ceiling).ceiling.as_mut() {
            c.give_back(1);
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::rate_limit::doubt::DOUBT_FOR;

    impl Flight {
        /// As if the key's recent answers were all overloads: its next one
        /// sets a ceiling.
        pub(in crate::rate_limit) fn overloaded_often(&self) {
            self.overloads.store(ALL, Ordering::Relaxed);
        }

        /// An overload of a send counted here.
        fn overloaded(&self, sent: Instant, now: Instant) -> bool {
            self.overloaded_counted(sent, now, true)
        }
    }

    /// A key whose recent answers were all overloads: its next one sets a
    /// ceiling.
    fn overloaded_often() -> Flight {
        let flight = Flight::default();
        flight.overloaded_often();
        flight
    }

    fn take(slots: &Arc<Semaphore>) -> Option<OwnedSemaphorePermit> {
        Arc::clone(slots).try_acquire_owned().ok()
    }

    fn limit(flight: &Flight) -> f64 {
        lock(&flight.ceiling).ceiling.as_ref().unwrap().limit
    }

    fn start(flight: &Arc<Flight>, n: usize) -> Vec<InFlight> {
        (0..n)
            .map(|_| InFlight::start(Arc::clone(flight), None))
            .collect()
    }

    #[tokio::test(start_paused = true)]
    async fn an_overload_of_a_send_not_counted_here_counts_every_send_in_flight_as_another() {
        // A quiet gate's send read into a key that did not take the quiet
        // sends over: the one send in flight here is another, so the
        // ceiling stays (it stands down only with none other in flight).
        let now = Instant::now();
        let flight = Arc::new(overloaded_often());
        let sends = start(&flight, 3);
        assert!(flight.overloaded(now, now) || limit(&flight) >= 1.0);
        drop(sends);
        let _one = start(&flight, 1);
        flight.overloaded_counted(now, now, false);
        assert!(
            lock(&flight.ceiling).ceiling.is_some(),
            "one other send in flight: the ceiling holds"
        );
        flight.overloaded_counted(now, now, true);
        assert!(
            lock(&flight.ceiling).ceiling.is_none(),
            "the send itself the only one in flight: it stands down"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_few_overloads_among_served_sends_set_no_ceiling() {
        let flight = Arc::new(Flight::default());
        let sent = Instant::now();
        let _sends = start(&flight, 20);
        // One overload in ten, whatever is in flight: no ceiling.
        for i in 0..200 {
            if i % 10 == 0 {
                assert!(!flight.overloaded(sent, Instant::now()));
            } else {
                flight.served();
            }
        }
        assert!(flight.slots().is_none(), "no ceiling for a few overloads");
        // Most answers overloaded: the key holds too many of ours.
        for _ in 0..11 {
            flight.overloaded(sent, Instant::now());
        }
        assert!(flight.slots().is_some());
    }

    #[tokio::test(start_paused = true)]
    async fn a_served_answer_takes_a_sixteenth_off_the_overload_share() {
        // Every recent answer an overload, then `served` served: whether
        // one more overload sets a ceiling.
        let ceiling_after = |served: usize| {
            let sent = Instant::now();
            let flight = Arc::new(overloaded_often());
            let _crowd = start(&flight, 10);
            for _ in 0..served {
                flight.served();
            }
            flight.overloaded(sent, sent);
            flight.slots().is_some()
        };
        // (15/16)^5 is about 72 %: most recent answers overloaded.
        assert!(ceiling_after(5));
        // (15/16)^12 is about 46 %, one overload brings it to about 49 %:
        // under half.
        assert!(!ceiling_after(12));
    }

    #[tokio::test(start_paused = true)]
    async fn exactly_half_the_answers_overloaded_sets_a_ceiling() {
        let sent = Instant::now();
        // One more overload takes this share to exactly half of `ALL`.
        let just_under = 30_584;
        assert_eq!(updated(just_under, true), ALL / 2);
        let flight = Arc::new(Flight::default());
        let _crowd = start(&flight, 10);
        flight.overloads.store(just_under, Ordering::Relaxed);
        flight.overloaded(sent, sent);
        assert!(flight.slots().is_some(), "half is enough");
        let flight = Arc::new(Flight::default());
        let _crowd = start(&flight, 10);
        flight.overloads.store(just_under - 2, Ordering::Relaxed);
        flight.overloaded(sent, sent);
        assert!(flight.slots().is_none(), "under half is not");
    }

    #[tokio::test(start_paused = true)]
    async fn a_ceiling_meters_resends_only_from_two_slots() {
        let sent = Instant::now();
        // Nine others in flight: a first ceiling of eight, which meters.
        let flight = Arc::new(overloaded_often());
        let _crowd = start(&flight, 10);
        assert!(
            flight.overloaded(sent, sent),
            "a ceiling of {}",
            limit(&flight)
        );
        // One other: a ceiling of one, at its floor: resends back off.
        let flight = Arc::new(overloaded_often());
        let _pair = start(&flight, 2);
        assert!(!flight.overloaded(sent, sent));
        assert!(flight.slots().is_some());
        assert!((limit(&flight) - 1.0).abs() < f64::EPSILON);
    }

    #[tokio::test(start_paused = true)]
    async fn an_overload_with_one_other_send_in_flight_keeps_the_ceiling() {
        let sent = Instant::now();
        let (flight, crowd) = ceiling_over(10, sent);
        drop(crowd);
        let (first, _second) = (slotted(&flight), slotted(&flight));
        first.overloaded(sent, sent);
        assert!(flight.slots().is_some(), "another send was in flight");
    }

    #[tokio::test(start_paused = true)]
    async fn a_trial_with_overloads_halved_exactly_did_not_help() {
        let sent = Instant::now();
        let trial = |overloads: u32| {
            // Set at a share of all overloads: half of it is 16 of 32.
            let (flight, _crowd) = ceiling_over(10, sent);
            for i in 0..TRIAL {
                let send = slotted(&flight);
                if i < overloads {
                    send.overloaded(sent, sent);
                } else {
                    send.served();
                }
            }
            flight.slots().is_some()
        };
        assert!(trial(15), "under half: the ceiling proved itself");
        assert!(!trial(16), "exactly half: it stands down");
    }

    #[tokio::test(start_paused = true)]
    async fn an_overload_with_nothing_else_in_flight_stands_the_ceiling_down() {
        let sent = Instant::now();
        let (flight, crowd) = ceiling_over(10, sent);
        drop(crowd);
        let alone = slotted(&flight);
        assert!(flight.slots().is_some(), "a send alone, not yet answered");
        assert!(
            !alone.overloaded(sent, sent),
            "its resend waits for no slot"
        );
        assert!(flight.slots().is_none(), "overloaded alone: no ceiling");
        assert_eq!(flight.in_flight(), 1, "the send is still counted");
        let later = sent + std::time::Duration::from_secs(1);
        let _more = start(&flight, 10);
        flight.overloaded_often();
        flight.overloaded(later, later);
        assert!(flight.slots().is_none(), "and none while in doubt");
    }

    /// A key given a ceiling by an overload among `n` sends in flight, and
    /// those sends.
    fn ceiling_over(n: usize, sent: Instant) -> (Arc<Flight>, Vec<InFlight>) {
        let flight = Arc::new(overloaded_often());
        let crowd = start(&flight, n);
        flight.overloaded(sent, sent);
        assert!(flight.slots().is_some(), "a ceiling is set");
        (flight, crowd)
    }

    /// A send that goes under the key's ceiling, with a slot.
    fn slotted(flight: &Arc<Flight>) -> InFlight {
        let slots = flight.slots().unwrap();
        slots.add_permits(1);
        InFlight::start(Arc::clone(flight), take(&slots))
    }

    #[tokio::test(start_paused = true)]
    async fn a_ceiling_stands_down_unless_its_cuts_halve_the_overloads() {
        let sent = Instant::now();
        // Overloads that follow what is held: under the ceiling they stop.
        let helped = Arc::new(overloaded_often());
        let before = start(&helped, 10);
        helped.overloaded(sent, sent);
        for send in &before {
            send.overloaded(sent, sent);
        }
        let trial = lock(&helped.ceiling).ceiling.as_ref().unwrap().trial;
        assert_eq!(
            trial.map(|t| t.answers),
            Some(0),
            "the answers to sends from before the ceiling are no trial"
        );
        for i in 0..TRIAL {
            let send = slotted(&helped);
            if i % 8 == 0 {
                send.overloaded(sent, sent);
            } else {
                send.served();
            }
        }
        assert!(helped.slots().is_some(), "the ceiling proved itself");
        for _ in 0..TRIAL {
            slotted(&helped).overloaded(sent, sent);
        }
        assert!(helped.slots().is_some(), "and is judged once");

        // Overloads whatever is held: three of every four answers.
        let platform = Arc::new(overloaded_often());
        let _before = start(&platform, 10);
        platform.overloaded(sent, sent);
        let slots = platform.slots().unwrap();
        let waiting = tokio::spawn(Arc::clone(&slots).acquire_owned());
        for i in 1..TRIAL {
            let send = slotted(&platform);
            if i % 4 == 0 {
                send.served();
            } else {
                send.overloaded(sent, sent);
            }
        }
        assert!(platform.slots().is_some(), "still on trial");
        slotted(&platform).served();
        assert!(platform.slots().is_none(), "stood down at its trial's end");
        assert!(
            waiting.await.unwrap().is_err(),
            "a waiting send goes: its ceiling's slots are closed"
        );
        // For a while the key gets no other ceiling, and meters nothing.
        let now = sent + DOUBT_FOR - std::time::Duration::from_secs(1);
        for _ in 0..20 {
            assert!(!platform.overloaded(now, now));
        }
        assert!(platform.slots().is_none());
        let later = sent + DOUBT_FOR;
        platform.overloaded(later, later);
        let again = platform.slots().expect("a ceiling again");
        assert!(!Arc::ptr_eq(&again, &slots), "with slots of its own");
        assert!(take(&again).is_none(), "none free: ten still in flight");
    }

    #[tokio::test(start_paused = true)]
    async fn a_permit_of_a_ceiling_that_stood_down_is_no_slot_under_the_next() {
        let t0 = Instant::now();
        let flight = Arc::new(overloaded_often());
        let _before = start(&flight, 10);
        flight.overloaded(t0, t0);
        let first = flight.slots().unwrap();
        first.add_permits(1);
        let stale = take(&first).unwrap();
        // The first ceiling's trial: every answer overloaded.
        for _ in 0..TRIAL {
            slotted(&flight).overloaded(t0, t0);
        }
        assert!(flight.slots().is_none(), "stood down");
        let later = t0 + DOUBT_FOR;
        flight.overloaded(later, later);
        let next = flight.slots().unwrap();
        let send = InFlight::start(Arc::clone(&flight), Some(stale));
        assert!(!send.slotted(), "over the new ceiling, not under it");
        let free = next.available_permits();
        drop(send);
        assert_eq!(
            next.available_permits(),
            free,
            "it paid a debt, gave no slot"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn the_first_overload_sets_a_ceiling_under_what_was_in_flight() {
        let flight = Arc::new(overloaded_often());
        assert!(flight.slots().is_none(), "no ceiling before an overload");
        let sent = Instant::now();
        let sends = start(&flight, 10);
        // Refused with 9 others in flight: the ceiling starts at 8.1.
        flight.overloaded(sent, Instant::now());
        let slots = flight.slots().unwrap();
        assert!(
            take(&slots).is_none(),
            "nothing goes until three have ended"
        );
        drop(sends);
        let mut taken = Vec::new();
        while let Some(permit) = take(&slots) {
            taken.push(permit);
        }
        assert_eq!(taken.len(), 8);
    }

    #[tokio::test(start_paused = true)]
    async fn each_refusal_of_a_wave_says_the_provider_holds_fewer_than_the_others_in_flight() {
        // 40 sent at once to room for 10: as the 30 refusals come back,
        // each with fewer others in flight, the ceiling follows them down.
        let flight = Arc::new(overloaded_often());
        let t0 = Instant::now();
        let mut sends = start(&flight, 40);
        for _ in 0..30 {
            flight.overloaded(t0, t0);
            sends.pop();
        }
        assert!((limit(&flight) - 10.0).abs() < 1e-9, "{}", limit(&flight));
    }

    #[tokio::test(start_paused = true)]
    async fn one_decrease_per_congestion_event_and_a_slow_rise() {
        let flight = Arc::new(overloaded_often());
        let t0 = Instant::now();
        let _sends = start(&flight, 20);
        flight.overloaded(t0, t0);
        // The rest of the burst, sent before the decrease, with as many
        // still in flight: no news.
        for _ in 0..10 {
            flight.overloaded(t0, t0);
        }
        assert!((limit(&flight) - 19.0 * FIRST).abs() < 1e-9);
        tokio::time::advance(std::time::Duration::from_millis(1)).await;
        flight.overloaded(Instant::now(), Instant::now());
        assert!((limit(&flight) - 19.0 * FIRST * DECREASE).abs() < 1e-9);
        // About one more slot per ceiling's worth of served sends (15),
        // every slot taken (more in flight than the ceiling allows).
        let before = limit(&flight);
        for _ in 0..15 {
            flight.served();
        }
        assert!(limit(&flight) > before + 0.9 && limit(&flight) < before + 1.1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_quiet_key_banks_no_room_and_late_sends_owe_their_slot() {
        let flight = Arc::new(overloaded_often());
        let t0 = Instant::now();
        // Counted when the ceiling is made: their slots come back.
        let early = start(&flight, 3);
        flight.overloaded(t0, t0); // 2 others × 0.9: ceiling 1.8, 2 owed
                                   // Let through after it, without a slot: over the ceiling, owes one.
        let late = start(&flight, 1);
        drop(early);
        drop(late);
        let slots = flight.slots().unwrap();
        assert_eq!(
            slots.available_permits(),
            1,
            "the ceiling's one slot, no more"
        );
        // Served sends with room to spare do not raise the ceiling.
        let before = limit(&flight);
        for _ in 0..100 {
            flight.served();
        }
        assert!((limit(&flight) - before).abs() < 1e-9);
    }

    #[tokio::test(start_paused = true)]
    async fn a_ceiling_lowered_below_what_is_in_flight_takes_slots_back_as_sends_end() {
        let flight = Arc::new(overloaded_often());
        let t0 = Instant::now();
        let first = start(&flight, 10);
        flight.overloaded(t0, t0); // ceiling 8.1 with 10 in flight: 2 owed
        drop(first);
        let slots = flight.slots().unwrap();
        assert_eq!(slots.available_permits(), 8);
        // Eight go; one is refused with 7 others in flight, later: the
        // ceiling falls to 7 × 0.9 = 6.3, and two slots are owed.
        let mut held = Vec::new();
        for _ in 0..8 {
            let permit = take(&slots).unwrap();
            held.push(InFlight::start(Arc::clone(&flight), Some(permit)));
        }
        tokio::time::advance(std::time::Duration::from_millis(1)).await;
        flight.overloaded(Instant::now(), Instant::now());
        held.truncate(4);
        assert_eq!(
            slots.available_permits(),
            2,
            "two of four ended sends paid the debt"
        );
        // A send let through without a slot owes one.
        let over = InFlight::start(Arc::clone(&flight), None);
        drop(over);
        assert_eq!(slots.available_permits(), 2);
        let last = [take(&slots).unwrap(), take(&slots).unwrap()];
        assert!(
            take(&slots).is_none(),
            "4 held and 2 taken: the ceiling's 6"
        );
        drop(last);
    }

    #[tokio::test(start_paused = true)]
    async fn a_send_let_through_when_none_is_in_flight_still_owes_its_slot() {
        let flight = Arc::new(overloaded_often());
        let t0 = Instant::now();
        let sends = start(&flight, 3);
        flight.overloaded(t0, t0); // ceiling 1.8, 2 owed
        drop(sends);
        let slots = flight.slots().unwrap();
        assert_eq!((flight.in_flight(), slots.available_permits()), (0, 1));
        // Let through without a slot, with nothing else in flight.
        drop(InFlight::start(Arc::clone(&flight), None));
        assert_eq!(slots.available_permits(), 1, "it paid, it did not add");
    }

    /// Takes every free slot as a send under the ceiling.
    fn fill(flight: &Arc<Flight>, slots: &Arc<Semaphore>) -> Vec<InFlight> {
        std::iter::from_fn(|| take(slots))
            .map(|permit| InFlight::start(Arc::clone(flight), Some(permit)))
            .collect()
    }

    #[tokio::test(start_paused = true)]
    async fn a_ceiling_of_one_rises_to_two_by_one_slot() {
        let flight = Arc::new(overloaded_often());
        let t0 = Instant::now();
        let alone = start(&flight, 1);
        flight.overloaded(t0, t0); // no others in flight: the floor, 1
        drop(alone);
        let slots = flight.slots().unwrap();
        let held = fill(&flight, &slots);
        assert_eq!(held.len(), 1);
        flight.served(); // every slot taken: 1 + 1/1
        assert!((limit(&flight) - 2.0).abs() < 1e-9);
        assert_eq!(slots.available_permits(), 1, "one more slot, not two");
    }

    #[tokio::test(start_paused = true)]
    async fn a_rising_ceiling_still_owed_slots_pays_its_debt_first() {
        let flight = Arc::new(overloaded_often());
        let t0 = Instant::now();
        let first = start(&flight, 10);
        flight.overloaded(t0, t0); // ceiling 8.1 with 10 in flight: 2 owed
        while limit(&flight) < 9.0 {
            flight.served(); // no slot free: each lifts it by 1/limit
        }
        // Crossing 9 made one slot, which paid one of the two owed.
        drop(first);
        let slots = flight.slots().unwrap();
        assert_eq!(slots.available_permits(), 9, "the ceiling's 9");
    }

    #[tokio::test(start_paused = true)]
    async fn a_falling_ceiling_takes_free_slots_now_and_the_rest_as_sends_end() {
        let flight = Arc::new(overloaded_often());
        let t0 = Instant::now();
        drop(start(&flight, 10));
        let again = start(&flight, 10);
        flight.overloaded(t0, t0); // ceiling 8.1
        drop(again);
        let slots = flight.slots().unwrap();
        assert_eq!(slots.available_permits(), 8);
        let mut held = fill(&flight, &slots);
        held.truncate(4); // 4 in flight, 4 slots free
        tokio::time::advance(std::time::Duration::from_millis(1)).await;
        // Refused with 3 others in flight: 3 × 0.9 = 2.7. Of the 6 slots
        // to take back, the 4 free go now and 2 are owed.
        flight.overloaded(Instant::now(), Instant::now());
        assert!((limit(&flight) - 2.7).abs() < 1e-9);
        assert_eq!(slots.available_permits(), 0);
        drop(held);
        assert_eq!(slots.available_permits(), 2, "the ceiling's 2");
    }
}
