//! The shared gate: per-key pacing of every send, first in, first out.
//!
//! Three things can hold a send back, and its time is the latest of them:
//! a hold (a 429 named a wait, which is a fact about the key), the quotas
//! (fixed GCRA slots, booked when the send arrives), and a learned rate
//! (a ticket in the key's [`Schedule`], whose time follows the rate as it
//! changes). A waiting send checks again when its time comes, or earlier
//! when the learned rate rises enough to be worth waking for.

use super::adaptive::{AdaptiveRate, Learned, Throttle};
use super::concurrency::Flight;
use super::error::GateError;
use super::gcra::{Pace, Tat};
use super::keys::{Keys, Sweepable};
use super::refund::Refunds;
use super::schedule::Schedule;
use super::stated_tokens::StatedTokens;
use super::window::{Place, Window};
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::sync::futures::OwnedNotified;
use tokio::sync::Notify;
use tokio::time::Instant;

/// Rise of a learned rate that wakes the sends waiting on it.
const WAKE_ON_RISE: f64 = 1.1;

/// Set once any gate in the process counts tokens (a configured token
/// quota, or one a provider stated): until then the retry layer does not
/// look at request bodies for a cost estimate, so the common stack pays
/// nothing for it.
static SOME_GATE_COUNTS_TOKENS: AtomicBool = AtomicBool::new(false);

/// Whether any gate counts tokens, so a request's cost is worth estimating.
pub(crate) fn some_gate_counts_tokens() -> bool {
    SOME_GATE_COUNTS_TOKENS.load(Ordering::Relaxed)
}

/// Set once any gate exists in the process: until then the retry layer
/// keeps no request body for a gate to read the model from.
static SOME_GATE: AtomicBool = AtomicBool::new(false);

/// Whether any gate exists, so a whole request body is worth handing over
/// (a gate keys by the model it names).
pub(crate) fn some_gate() -> bool {
    SOME_GATE.load(Ordering::Relaxed)
}

/// Per-key pacing state shared by every clone of one [`RateLimitLayer`](super::RateLimitLayer).
#[derive(Clone)]
pub(super) struct Gate {
    requests: Option<Pace>,
    tokens: Option<Pace>,
    adaptive: Option<AdaptiveRate>,
    keys: Arc<Mutex<Keys<KeyState>>>,
    /// Set once any key's provider stated a token quota.
    tokens_stated: Arc<AtomicBool>,
    /// Keys the hash of a request's authority and credentials with a
    /// secret of this gate's: callers who choose their own API keys (a
    /// gateway's) cannot aim one at another caller's quota.
    key_hasher: std::hash::RandomState,
}

#[derive(Debug)]
struct KeyState {
    /// Tells this key's state from a later one under the same key, after
    /// an eviction: a booking holds the id it was made under.
    id: u64,
    requests: Tat,
    tokens: Tat,
    /// No send before this instant: the provider named a wait.
    held_until: Option<Instant>,
    /// When the hold was put, and the wait the provider named then, which
    /// may be longer than the hold: a request that honours less fails fast.
    asked: Option<(Instant, Duration)>,
    /// The answers to the sends that left after the one whose refusal put
    /// the hold: when most of them are served, the key was not out.
    contest: Option<Contest>,
    /// When a hold of this key was last lost to the key's own answers: for
    /// [`DOUBT_FOR`] after, a named wait holds the key only once later
    /// sends were refused too.
    doubted_at: Option<Instant>,
    /// How far holds have pushed the quota schedule so far: a waiting
    /// send's quota slot moves by what was added since it was booked, so
    /// the queue keeps its order and spacing behind a hold.
    shift: Duration,
    /// The learned rate and its schedule, in adaptive mode.
    learned: Option<LearnedKey>,
    /// Quota bookings that may still be given back.
    refunds: Refunds,
    /// When a send last used the key (the sweep drops the oldest first).
    last_used: Instant,
    /// Sends let through so far: a send's place among them.
    gone: u64,
    /// Queued sends holding a share of a window: the provider has not
    /// counted them yet.
    queued_shares: u64,
    /// The provider's request window, as its last answer stated it.
    window: Option<Window>,
    /// Windows stated so far: the next one's epoch.
    windows: u64,
    /// Sends waiting for news of an exhausted window whose reset is
    /// unknown: booked, but neither sent nor counted by the provider yet.
    probing: u64,
    /// Wakes the waiting sends: the learned rate rose enough, or news of
    /// the window came.
    woken: Arc<Notify>,
    /// Sends in flight, and their ceiling once the key was overloaded.
    flight: Arc<Flight>,
    /// The token quota the provider's answers state, once one did.
    stated_tokens: Option<StatedTokens>,
    /// Sends its stated request quota has room for, beyond those let
    /// through since: they go at once, unpaced.
    stated_room: u64,
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
}

/// The order of a hold put by no send's refusal: nothing contests it.
pub(super) const UNCONTESTED: u64 = u64::MAX;

/// How long a key doubts its holds after one was lost: evidence decays.
const DOUBT_FOR: Duration = Duration::from_secs(60);

/// Answers to later sends a contest needs before it can go against a hold.
const CONTEST_ANSWERS: u32 = 4;

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
    /// key is out. A hold that no send's refusal put ([`UNCONTESTED`]) is.
    fn won(&self) -> bool {
        self.order == UNCONTESTED
            || (self.refused >= 2 && self.refused >= self.served.saturating_mul(3))
    }
}

#[derive(Debug)]
struct LearnedKey {
    rate: Learned,
    schedule: Schedule,
    /// The rate when the waiting sends were last woken for a rise.
    woken_at_rate: f64,
}

impl KeyState {
    fn new(adaptive: Option<&AdaptiveRate>, now: Instant) -> KeyState {
        static NEXT_ID: AtomicU64 = AtomicU64::new(0);
        KeyState {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            requests: Tat(None),
            tokens: Tat(None),
            held_until: None,
            asked: None,
            contest: None,
            doubted_at: None,
            shift: Duration::ZERO,
            refunds: Refunds::default(),
            last_used: now,
            gone: 0,
            queued_shares: 0,
            window: None,
            windows: 0,
            probing: 0,
            woken: Arc::new(Notify::new()),
            flight: Arc::default(),
            stated_tokens: None,
            stated_room: 0,
            learned: adaptive.map(|bounds| {
                let rate = bounds.start();
                LearnedKey {
                    woken_at_rate: rate.per_sec(),
                    rate,
                    schedule: Schedule::new(now),
                }
            }),
        }
    }

    /// What is left of the wait the provider named, when the key is held
    /// and that is more than `limit`.
    fn held_too_long(&self, now: Instant, limit: Option<Duration>) -> Option<GateError> {
        let limit = limit?;
        if self.held_until.is_none_or(|held| held <= now) {
            return None;
        }
        let (at, asked) = self.asked?;
        let left = asked.saturating_sub(now.saturating_duration_since(at));
        (left > limit).then_some(GateError::HeldTooLong { asked: left, limit })
    }

    /// The key served its `order`-th send: evidence against a hold put for
    /// an earlier send's refusal, which ends once most later sends were
    /// served.
    fn contest_hold(&mut self, order: u64, now: Instant) {
        let Some(contest) = &mut self.contest else {
            return;
        };
        if order <= contest.order {
            return;
        }
        if contest.until <= now {
            self.contest = None;
            return;
        }
        contest.served = contest.served.saturating_add(1);
        if !contest.lost() {
            return;
        }
        self.contest = None;
        self.doubted_at = Some(now);
        let Some(held) = self.held_until.filter(|held| *held > now) else {
            return;
        };
        tracing::debug!("llm-retry: the key serves sends after a 429: its hold ends");
        crate::observe::gate_stood_down("hold");
        self.held_until = None;
        self.asked = None;
        // The waiting sends' quota slots move back by what the hold had left.
        self.shift = self
            .shift
            .saturating_sub(held.saturating_duration_since(now));
        if let Some(l) = &mut self.learned {
            l.schedule.rebase(l.rate.interval(), now);
        }
        self.woken.notify_waiters();
    }

    /// Why a send with `bounds` cannot wait out the key's hold, if it
    /// cannot: it honours less of the named wait than is left, or the hold
    /// ends past its deadline.
    fn hold_past(&self, now: Instant, bounds: Bounds) -> Option<GateError> {
        if let Some(refused) = self.held_too_long(now, bounds.max_server_wait) {
            return Some(refused);
        }
        let held = self.held_until.filter(|held| *held > now)?;
        bounds.deadline.filter(|deadline| held > *deadline)?;
        Some(GateError::PastDeadline {
            wait: held.saturating_duration_since(now),
        })
    }

    /// Whether a hold of this key was lost to its answers lately.
    fn doubts_holds(&self, now: Instant) -> bool {
        self.doubted_at
            .is_some_and(|at| now.saturating_duration_since(at) < DOUBT_FOR)
    }

    /// Whether the key's hold was corroborated: later sends were refused
    /// too, far more than were served.
    fn hold_corroborated(&self) -> bool {
        self.contest.is_some_and(|c| c.won())
    }

    /// The earliest any send may go: now, or the end of a hold.
    fn floor(&self, now: Instant) -> Instant {
        self.held_until.map_or(now, |held| held.max(now))
    }

    /// The earliest slot the quotas give a send of `cost` tokens at `now`.
    fn quota_slot(&self, gate: &Gate, cost: u64, now: Instant) -> Instant {
        let mut slot = now;
        if let Some(pace) = &gate.requests {
            slot = slot.max(self.requests.slot(pace, now, 1));
        }
        if let Some(pace) = &gate.tokens {
            slot = slot.max(self.tokens.slot(pace, now, cost));
        }
        slot
    }

    /// Where the provider's window puts a send arriving at `now`.
    fn window_place(&self, now: Instant) -> Place {
        self.window.map_or(Place::Free, |w| w.place(now))
    }

    /// A send not yet gone enters the provider's window at `place` (from
    /// [`KeyState::window_place`], under the same lock): it takes a share,
    /// or a probe's turn (none past its `deadline`, which it will not see),
    /// or waits for the reset. Counted until it leaves.
    fn enter_window(&mut self, place: Place, deadline: Option<Instant>) {
        let turn_in_time = match place {
            Place::Probe { at, .. } => deadline.is_none_or(|d| at <= d),
            _ => true,
        };
        if let (Some(w), true) = (&mut self.window, turn_in_time) {
            w.commit(place);
        }
        match place {
            Place::Probe { .. } => self.probing += 1,
            Place::Took(_) => self.queued_shares += 1,
            _ => {}
        }
    }

    /// A send placed at `place` leaves the window's queue: it goes, or
    /// (`gives_back`) never will, and its share returns to the window.
    fn leave_window(&mut self, place: Place, gives_back: bool) {
        match place {
            Place::Probe { .. } => self.probing = self.probing.saturating_sub(1),
            Place::Took(epoch) => {
                self.queued_shares = self.queued_shares.saturating_sub(1);
                if let (Some(w), true) = (&mut self.window, gives_back) {
                    w.give_back(epoch);
                }
            }
            _ => {}
        }
    }

    /// A send is let through: its place among the key's sends.
    fn let_go(&mut self, booking: &mut Booking) {
        self.leave_window(booking.place, false);
        booking.order = self.gone;
        self.gone = self.gone.wrapping_add(1);
        booking.released = true;
    }

    /// States a new window (`None`: none in force); the sends waiting on
    /// the last one look again.
    fn restate_window(&mut self, window: Option<(Option<Instant>, u64)>, now: Instant) {
        // Spent, and still no reset: no news (the answer is to a send that
        // went before the probe); the probes keep their turns.
        if window == Some((None, 0)) && self.window.is_some_and(|w| w.spent_unknown()) {
            return;
        }
        self.windows = self.windows.wrapping_add(1);
        self.window = window
            .map(|(resets_at, remaining)| Window::new(resets_at, remaining, self.windows, now));
        if self.probing > 0 {
            self.woken.notify_waiters();
        }
    }

    fn book_quotas(&mut self, gate: &Gate, cost: u64, slot: Instant) {
        if let Some(pace) = &gate.requests {
            self.requests.book(pace, slot, 1);
        }
        if let Some(pace) = &gate.tokens {
            self.tokens.book(pace, slot, cost);
        }
    }
}

impl Sweepable for KeyState {
    fn idle(&self, now: Instant) -> bool {
        self.requests.idle(now)
            && self.tokens.idle(now)
            && self.held_until.is_none_or(|t| t <= now)
            && self.probing == 0
            && self
                .window
                .is_none_or(|w| !w.stands(now) || w.reset_unknown())
            && self.flight.in_flight() == 0
            && self.stated_tokens.is_none_or(|t| t.settled(now))
            && self
                .learned
                .as_ref()
                .is_none_or(|l| l.schedule.next_time(l.rate.interval()) <= now)
    }

    fn last_used(&self) -> Instant {
        self.last_used
    }
}

/// A send's place in its key's queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Booking {
    /// When the send may go, as last computed.
    pub(super) slot: Instant,
    /// Its quota slot when booked, and the key's shift then.
    quota_slot: Instant,
    shift: Duration,
    /// Its ticket in the learned schedule.
    ticket: Option<u64>,
    /// Its number among the key's quota bookings.
    seq: u64,
    /// Its place among the key's sends, once let through.
    pub(super) order: u64,
    /// Its place in the provider's window: a share it took (given back if
    /// it never goes), a reset it waits for, or a probe's turn (it looks
    /// again when news of the window comes first).
    place: Place,
    /// Its tokens under the provider's stated token quota, and when they
    /// are there.
    stated: Option<(u64, Instant)>,
    /// Whether the send may go already: its ticket was released (or it
    /// has none) when it was queued.
    released: bool,
    /// The key state it was made under.
    key_id: u64,
    cost: u64,
    pub(super) bounds: Bounds,
}

/// A send queued on its key.
pub(super) struct Reserved {
    pub(super) booking: Booking,
    /// The key's sends in flight, which it joins when it goes.
    pub(super) flight: Arc<Flight>,
    /// For a send that waits: what wakes it to look again.
    pub(super) woken: Option<OwnedNotified>,
}

/// What a send may wait for: no later than its deadline, and no hold for
/// a longer server-named wait than it honours.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) struct Bounds {
    pub(super) deadline: Option<Instant>,
    pub(super) max_server_wait: Option<Duration>,
    /// Not before this instant: the provider named the request a wait.
    pub(super) not_before: Option<Instant>,
}

impl Booking {
    /// Whether the send may go at once, its ticket already released.
    pub(super) fn is_released(&self) -> bool {
        self.released
    }

    /// The tokens it booked under a stated token quota (0 for none).
    pub(super) fn stated_cost(&self) -> u64 {
        self.stated.map_or(0, |(cost, _)| cost)
    }
}

/// What a waiting send does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Check {
    /// Send now.
    Go,
    /// Wait until then, and check again.
    WaitUntil(Instant),
}

impl Gate {
    pub(super) fn new(
        requests: Option<Pace>,
        tokens: Option<Pace>,
        adaptive: Option<AdaptiveRate>,
    ) -> Gate {
        SOME_GATE.store(true, Ordering::Relaxed);
        if tokens.is_some() {
            SOME_GATE_COUNTS_TOKENS.store(true, Ordering::Relaxed);
        }
        Gate {
            requests,
            tokens,
            adaptive,
            keys: Arc::default(),
            tokens_stated: Arc::default(),
            key_hasher: std::hash::RandomState::new(),
        }
    }

    /// What [`default_key`](super::key::default_key) hashes with.
    pub(super) fn key_hasher(&self) -> &std::hash::RandomState {
        &self.key_hasher
    }

    fn lock(&self) -> MutexGuard<'_, Keys<KeyState>> {
        self.keys
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Queues a send of `cost` tokens on `key`, unless it would start
    /// past its bounds. Sends are queued in call order.
    #[cfg(test)]
    pub(super) fn reserve(
        &self,
        key: u64,
        cost: u64,
        now: Instant,
        bounds: Bounds,
    ) -> Result<Booking, GateError> {
        self.reserve_send(key, cost, now, bounds)
            .map(|reserved| reserved.booking)
    }

    /// [`Gate::reserve`], the key's sends in flight, which the send joins
    /// when it goes, and for a send that waits what wakes it to look again
    /// (made under the lock, so no news between booking and waiting is lost).
    ///
    /// Under a token quota its provider states, a send of known `cost` is
    /// booked for its tokens.
    pub(super) fn reserve_send(
        &self,
        key: u64,
        cost: u64,
        now: Instant,
        bounds: Bounds,
    ) -> Result<Reserved, GateError> {
        let deadline = bounds.deadline;
        if let Some(pace) = &self.tokens {
            let capacity = pace.capacity();
            if cost > capacity {
                return Err(GateError::NeverFits { cost, capacity });
            }
        }
        let mut keys = self.lock();
        // Amortized O(1): a sweep only when the map has doubled (one that
        // drops this key, idle, only means it is made anew below).
        keys.make_room(now);
        let state = keys
            .entry(key)
            .or_insert_with(|| KeyState::new(self.adaptive.as_ref(), now));
        state.last_used = now;
        // A hold longer than the send honours or than its deadline allows:
        // refused at once when later sends corroborated it, else it goes
        // past the hold, as without a gate (its answer is news of the hold).
        let past_hold = match state.hold_past(now, bounds) {
            Some(refused) if state.hold_corroborated() => return Err(refused),
            Some(_) => true,
            None => false,
        };
        // The provider said how many more its window admits: past that, a
        // send waits for the window's reset, or for a probe to learn it.
        let place = state.window_place(now);
        let window_floor = match place {
            Place::AfterReset(at) => at,
            _ => now,
        };
        // Quotas are booked from the end of a hold or an exhausted window:
        // sends queued during one leave paced, not together.
        let floor = if past_hold { now } else { state.floor(now) };
        let base = floor.max(window_floor);
        // Without quotas the booked slot is the arrival: a hold or window
        // that ends early (a lost contest, news) holds it back no longer.
        let quota_slot = if self.requests.is_none() && self.tokens.is_none() {
            now
        } else {
            base.max(state.quota_slot(self, cost, base))
        };
        let mut slot = quota_slot.max(base);
        // Room the provider stated lets the send past the learned schedule.
        let in_room = state.stated_room > 0 && base <= now;
        if in_room {
            state.stated_room -= 1;
        }
        let ticket = state
            .learned
            .as_mut()
            .filter(|_| !in_room && !past_hold)
            .map(|l| {
                let interval = l.rate.interval();
                let ticket = l.schedule.take(now, interval);
                slot = slot.max(l.schedule.time_of(ticket, interval));
                ticket
            });
        let stated = match &mut state.stated_tokens {
            Some(tokens) => {
                (cost > 0 && tokens.fits(cost)).then(|| (cost, tokens.slot(cost, now, base)))
            }
            None => None,
        };
        if let Some((_, at)) = stated {
            slot = slot.max(at);
        }
        if let Some(at) = bounds.not_before {
            slot = slot.max(at);
        }
        if deadline.is_some_and(|deadline| slot > deadline) {
            if let Some(l) = &mut state.learned {
                l.schedule.untake();
            }
            return Err(GateError::PastDeadline { wait: slot - now });
        }
        // A probe's turn is no firm slot: news of the window may come
        // sooner, so it waits no later than its deadline.
        if let Place::Probe { at, .. } = place {
            slot = slot.max(at);
        }
        let released = slot <= now;
        if let Some(deadline) = deadline {
            slot = slot.min(deadline);
        }
        if let (Some(tokens), Some((cost, _))) = (&mut state.stated_tokens, stated) {
            tokens.book(cost);
        }
        let before = [state.requests, state.tokens];
        state.book_quotas(self, cost, quota_slot);
        let seq = state.refunds.book(before, released);
        state.enter_window(place, deadline);
        if let Some(l) = &mut state.learned {
            l.rate.on_send(now);
            if let (Some(ticket), true) = (ticket, released) {
                l.schedule.release(ticket, now);
            }
        }
        let mut booking = Booking {
            slot,
            quota_slot,
            shift: state.shift,
            ticket,
            seq,
            order: 0,
            place,
            stated,
            released: false,
            key_id: state.id,
            cost,
            bounds,
        };
        let woken = if released {
            state.let_go(&mut booking);
            None
        } else {
            Some(Arc::clone(&state.woken).notified_owned())
        };
        Ok(Reserved {
            booking,
            flight: Arc::clone(&state.flight),
            woken,
        })
    }

    /// A waiting send looks again at `now`: go, or wait until when? Its
    /// quota slot is booked again if a hold voided it.
    pub(super) fn check(
        &self,
        key: u64,
        booking: &mut Booking,
        now: Instant,
    ) -> Result<Check, GateError> {
        let mut keys = self.lock();
        // A key evicted (idle) and made anew since: its pacing starts over.
        let Some(state) = keys
            .get_mut(&key)
            .filter(|state| state.id == booking.key_id)
        else {
            return Ok(Check::Go);
        };
        // News of the window it waited to probe: placed anew.
        if let Place::Probe { epoch, .. } = booking.place {
            if state.window.is_none_or(|w| w.epoch() != epoch) {
                state.leave_window(booking.place, false);
                booking.place = state.window_place(now);
                state.enter_window(booking.place, booking.bounds.deadline);
            }
        }
        // A hold longer than the send honours or than its deadline allows:
        // refused at once when later sends corroborated it, else the send
        // goes past the hold (and only the hold), as without a gate.
        let past_hold = match state.hold_past(now, booking.bounds) {
            Some(refused) if state.hold_corroborated() => return Err(refused),
            Some(_) => true,
            None => false,
        };
        let pushed = state.shift.saturating_sub(booking.shift);
        let quota_slot = booking
            .quota_slot
            .checked_add(pushed)
            .unwrap_or(booking.quota_slot);
        let floor = if past_hold { now } else { state.floor(now) };
        let mut slot = floor.max(quota_slot);
        if let Place::AfterReset(at) = booking.place {
            slot = slot.max(at);
        }
        if let Some((_, at)) = booking.stated {
            slot = slot.max(at);
        }
        if let Some(at) = booking.bounds.not_before {
            slot = slot.max(at);
        }
        // A ticket's time counts from the hold's end: not past it.
        if let (Some(l), Some(ticket), false) = (&state.learned, booking.ticket, past_hold) {
            slot = slot.max(l.schedule.time_of(ticket, l.rate.interval()));
        }
        // A probe's turn is no firm slot (see `reserve_send`).
        let firm = slot;
        if let Place::Probe { at, .. } = booking.place {
            slot = slot.max(at);
        }
        booking.slot = slot;
        if slot > now {
            let deadline = booking.bounds.deadline;
            if deadline
                .is_some_and(|deadline| firm > deadline || (slot > deadline && now >= deadline))
            {
                return Err(GateError::PastDeadline { wait: slot - now });
            }
            return Ok(Check::WaitUntil(deadline.map_or(slot, |d| slot.min(d))));
        }

        if let (Some(l), Some(ticket)) = (&mut state.learned, booking.ticket) {
            l.schedule.release(ticket, now);
        }
        state.refunds.sent(booking.seq);
        // It goes (as the window's next probe, if it waited for one).
        state.let_go(booking);
        Ok(Check::Go)
    }

    /// A booked send will never be sent: dropped or refused while it
    /// waited for its turn, or past its turn while it waited for a slot in
    /// flight (`released`). What it took is given up: its place in the
    /// schedule and its quota slot while it was queued, and in either case
    /// its window share and the tokens it booked.
    pub(super) fn abandon(&self, key: u64, booking: &Booking, now: Instant) {
        let took_share = matches!(booking.place, Place::Took(_));
        if booking.released && booking.stated.is_none() && !took_share {
            return;
        }
        let mut keys = self.lock();
        let Some(state) = keys
            .get_mut(&key)
            .filter(|state| state.id == booking.key_id)
        else {
            return;
        };
        if let (Some(tokens), Some((cost, _))) = (&mut state.stated_tokens, booking.stated) {
            tokens.refund(cost);
        }
        if booking.released {
            // Let through and counted, never sent: its share goes back.
            if let (Some(w), Place::Took(epoch)) = (&mut state.window, booking.place) {
                w.give_back(epoch);
            }
            return;
        }
        if let Some([requests, tokens]) = state.refunds.give_up(booking.seq) {
            state.requests = requests;
            state.tokens = tokens;
        }
        // The window's share it took goes back, if the window still stands.
        state.leave_window(booking.place, true);
        if let (Some(l), Some(ticket)) = (&mut state.learned, booking.ticket) {
            l.schedule.abandon(ticket, now, l.rate.interval());
        }
    }

    /// Whether the gate counts tokens (a configured token quota, or some
    /// key's provider stated one): only then is a send's cost worth
    /// estimating.
    pub(super) fn counts_tokens(&self) -> bool {
        self.tokens.is_some() || self.tokens_stated.load(Ordering::Relaxed)
    }

    /// An answer stated `key`'s token quota: its costed sends book tokens
    /// from now on.
    pub(super) fn observed_tokens(&self, key: u64, window: crate::hint::TokenWindow, now: Instant) {
        if let Some(state) = self.lock().get_mut(&key) {
            self.tokens_in(state, window, now);
        }
    }

    fn tokens_in(&self, state: &mut KeyState, window: crate::hint::TokenWindow, now: Instant) {
        match &mut state.stated_tokens {
            Some(tokens) => tokens.observed(window.per_minute, window.remaining, now),
            None => {
                state.stated_tokens =
                    Some(StatedTokens::new(window.per_minute, window.remaining, now));
                self.tokens_stated.store(true, Ordering::Relaxed);
                SOME_GATE_COUNTS_TOKENS.store(true, Ordering::Relaxed);
            }
        }
    }

    /// What wakes a send waiting on `key` to look again: its learned rate
    /// rose, or news of its window came.
    pub(super) fn woken(&self, key: u64) -> Option<Arc<Notify>> {
        let keys = self.lock();
        Some(Arc::clone(&keys.get(&key)?.woken))
    }

    /// Keeps every later send of `key` back for the wait its provider
    /// named (a fact about the key, not one request), but no longer than
    /// `limit`, the longest wait the request that met it honours: a bogus
    /// or huge `Retry-After` must not freeze the key for hours. Until the
    /// hold ends, a send that honours less than what is left of the named
    /// wait is refused at once.
    ///
    /// A wait named in whole seconds is rounded up: on a key with a learned
    /// or stated rate (configured quotas do not count) only its whole
    /// seconds past the first hold the key, and the rate paces the rest.
    /// Whether the key is now held through the request's wait, up to
    /// `limit` (else the request that met it waits out its own).
    ///
    /// The hold lasts while the answers to the sends let through after the
    /// refused one (its `order`) do not show the key serving: once most of
    /// them are served, the refusal was the request's, not the key's, and
    /// the hold ends (the request that was told still waits its own wait).
    pub(super) fn hold(
        &self,
        key: u64,
        order: u64,
        now: Instant,
        wait: Duration,
        limit: Duration,
        whole_seconds: bool,
    ) -> bool {
        let mut keys = self.lock();
        let has_rate = keys
            .get(&key)
            .and_then(|state| state.learned.as_ref())
            .is_some_and(|l| !l.rate.unmeasured());
        let (hold, full) = if whole_seconds && has_rate {
            (wait.saturating_sub(Duration::from_secs(1)), false)
        } else {
            (wait, true)
        };
        if hold.is_zero() {
            return false;
        }
        let Some(until) = now.checked_add(hold.min(limit)) else {
            return false;
        };
        // Amortized O(1): a sweep only when the map has doubled (one that
        // drops this key, idle, only means it is made anew below).
        keys.make_room(now);
        let state = keys
            .entry(key)
            .or_insert_with(|| KeyState::new(self.adaptive.as_ref(), now));
        let contest = match &mut state.contest {
            Some(contest) if contest.until > now => {
                if order > contest.order {
                    contest.refused = contest.refused.saturating_add(1);
                }
                contest.until = contest.until.max(until);
                contest
            }
            other => other.insert(Contest {
                order,
                until,
                served: 0,
                refused: 0,
            }),
        };
        let corroborated = contest.won();
        if state.doubts_holds(now) && !corroborated {
            // Not yet: this request waits its own wait.
            return false;
        }
        if state.held_until.is_some_and(|held| held >= until) {
            return full;
        }
        state.asked = Some((now, wait));
        // The queue behind the quotas starts at the hold's end now, in the
        // same order and spacing: push it by the hold's extension. The 429
        // also said the upstream's bucket is empty, so the quotas admit
        // nothing more before `until` than one period's worth.
        let pushed = until.saturating_duration_since(state.floor(now));
        state.held_until = Some(until);
        // The wait to the end of a window whose reset the answers did not
        // state: the hold is that reset, and past it the window is new.
        if state.window.is_some_and(|w| w.reset_unknown()) {
            state.restate_window(None, now);
        }
        state.shift = state.shift.saturating_add(pushed);
        if let Some(pace) = &self.requests {
            state.requests.push_back(pace, now, pushed, until);
        }
        if let Some(pace) = &self.tokens {
            state.tokens.push_back(pace, now, pushed, until);
        }
        let paces = [self.requests.as_ref(), self.tokens.as_ref()];
        state.refunds.push_back(paces, now, pushed, until);
        if let Some(l) = &mut state.learned {
            l.schedule.rebase(l.rate.interval(), until);
        }
        full
    }

    /// Adaptive mode: a send that went at `sent` was answered 429, naming
    /// `named_wait` or not. One decrease per congestion event: the 429s of
    /// sends that went before it belong to it. The queue moves to the new
    /// rate at once (the schedule is re-based), so a 429 for a later send
    /// is news.
    pub(super) fn throttled(
        &self,
        key: u64,
        sent: Instant,
        now: Instant,
        named_wait: Option<Duration>,
        final_answer: bool,
    ) {
        let mut keys = self.lock();
        let Some(state) = keys.get_mut(&key) else {
            return;
        };
        // The room a stated quota had is spent.
        state.stated_room = 0;
        self.learn_in(state, now, |rate, bounds| {
            let did = rate.on_throttle(bounds, sent, now, named_wait);
            if final_answer {
                rate.cap_at_refusal();
            }
            if did == Throttle::StoodDown {
                tracing::debug!(
                    "llm-retry: the key's 429s do not follow its send rate; \
                     it is no longer paced by a learned rate"
                );
                crate::observe::gate_stood_down("rate");
            }
        });
    }

    /// An answer to the key's `order`-th send stated the provider's request
    /// window: at most `remaining` more sends before it resets, less those
    /// the provider had not counted yet.
    ///
    /// Like a hold, the wait for the reset is capped at `limit`, the
    /// longest wait the request that read it honours: a bogus reset must
    /// not block the key for hours.
    ///
    /// A window that states its quota per minute is a bucket refilling
    /// continuously (Anthropic's and OpenAI's): a learned rate paces the key
    /// at that quota instead, and the reset (when the bucket is full again)
    /// is no floor.
    pub(super) fn observed_window(
        &self,
        key: u64,
        order: u64,
        now: Instant,
        window: crate::hint::RequestWindow,
        limit: Duration,
    ) {
        if let Some(state) = self.lock().get_mut(&key) {
            self.window_in(state, order, now, window, limit);
        }
    }

    fn window_in(
        &self,
        state: &mut KeyState,
        order: u64,
        now: Instant,
        window: crate::hint::RequestWindow,
        limit: Duration,
    ) {
        // What the provider had not counted: the sends let through after
        // that one, and those queued with a share of the window.
        let since = state
            .gone
            .wrapping_sub(order)
            .saturating_sub(1)
            .saturating_add(state.queued_shares);
        let remaining = window.remaining.saturating_sub(since);
        if let (Some(per_minute), Some(_)) = (window.per_minute, &self.adaptive) {
            // A quota with room left: that many go at once, and only the
            // sends beyond them are paced at the quota.
            state.stated_room = remaining;
            let per_sec = per_minute as f64 / 60.0;
            self.learn_in(state, now, |rate, _| {
                rate.on_stated(per_sec, now);
            });
            return;
        }
        let stated = match window.reset_in {
            None => Some((None, remaining)),
            // A reset now or too far to reckon: nothing to hold back.
            Some(reset_in) if reset_in.is_zero() => None,
            Some(reset_in) => now
                .checked_add(reset_in.min(limit))
                .map(|at| (Some(at), remaining)),
        };
        state.restate_window(stated, now);
    }

    /// The key's send (its `order`-th, which went at `sent`) was served, and
    /// its answer stated what is left of the provider's `window` and
    /// `tokens`, if it did: the hold's contest, the learned rate, the window
    /// and the token quota move under one lock.
    pub(super) fn served(
        &self,
        key: u64,
        (order, sent): (u64, Instant),
        now: Instant,
        window: Option<crate::hint::RequestWindow>,
        tokens: Option<crate::hint::TokenWindow>,
        limit: Duration,
    ) {
        // A gate told its quotas, with no news to take, trusts the holds its
        // keys meet: a success takes no lock there.
        if self.adaptive.is_none() && window.is_none() && tokens.is_none() {
            return;
        }
        let mut keys = self.lock();
        let Some(state) = keys.get_mut(&key) else {
            return;
        };
        state.contest_hold(order, now);
        self.learn_in(state, now, |rate, bounds| {
            rate.on_success(bounds, sent, now)
        });
        if let Some(tokens) = tokens {
            self.tokens_in(state, tokens, now);
        }
        if let Some(window) = window {
            self.window_in(state, order, now, window, limit);
        }
    }

    /// A send succeeded, its answer stating nothing.
    #[cfg(test)]
    pub(super) fn succeeded(&self, key: u64, now: Instant) {
        self.served(key, (0, now), now, None, None, Duration::ZERO);
    }

    /// Lets `update` change the key's learned rate; a change re-bases the
    /// schedule, and a rise worth it wakes the waiting sends.
    fn learn_in(
        &self,
        state: &mut KeyState,
        now: Instant,
        update: impl FnOnce(&mut Learned, &AdaptiveRate),
    ) {
        let Some(bounds) = &self.adaptive else { return };
        let floor = state.floor(now);
        let Some(l) = &mut state.learned else { return };
        let before = l.rate.per_sec();
        update(&mut l.rate, bounds);
        let after = l.rate.per_sec();
        if after == before {
            return;
        }
        tracing::debug!(rate_per_sec = after, "llm-retry: learned rate changed");
        l.schedule.rebase(l.rate.interval(), floor);
        if after < before {
            l.woken_at_rate = after;
        } else if after >= l.woken_at_rate * WAKE_ON_RISE {
            l.woken_at_rate = after;
            state.woken.notify_waiters();
        }
    }

    /// Keys held and sweeps made so far.
    #[cfg(test)]
    pub(super) fn key_stats(&self) -> (usize, u64) {
        let keys = self.lock();
        (keys.len(), keys.sweeps())
    }

    /// Whether sends are paced: a quota or a learned rate.
    pub(super) fn paces(&self) -> bool {
        self.requests.is_some() || self.tokens.is_some() || self.adaptive.is_some()
    }
}

impl fmt::Debug for Gate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Gate")
            .field("requests", &self.requests)
            .field("tokens", &self.tokens)
            .field("adaptive", &self.adaptive)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
#[path = "gate_tests.rs"]
mod tests;
