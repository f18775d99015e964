//! The shared gate: per-key pacing of every send, first in, first out.
//!
//! What can hold a send back, and its time is the latest of them: a hold
//! (a 429 named a wait, which is a fact about the key), the provider's
//! window, the token quotas (GCRA slots, booked when the send arrives), and
//! the key's one request pace (a ticket in its [`Pacer`](super::pacer::Pacer), at the configured
//! quota's or the learned rate's pace, whose time follows the pace as it
//! changes). A waiting send checks again when its time comes, or earlier
//! when the learned rate rises enough to be worth waking for.

use super::adaptive::{AdaptiveRate, Learned, Throttle};
use super::concurrency::Flight;
use super::error::GateError;
use super::gcra::Pace;
use super::hold::{Hold, Placed};
use super::keys::{Keys, Sweepable};
use super::lock;
use super::quiet::Quiet;
use super::quota_book::{Paces, QuotaBook};
use super::shared::{shared_floor, KeyHasher, SharedGate, SharedPace};
use super::window::{Ledger, Place};
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::futures::OwnedNotified;
use tokio::sync::Notify;
use tokio::time::Instant;

/// Rise of a learned rate that wakes the sends waiting on it.
const WAKE_ON_RISE: f64 = 1.1;

/// The share of a stated rate the fleet's sends are paced at.
const STATED_SHARE: f64 = 0.95;

/// Per-key pacing state shared by every clone of one [`RateLimitLayer`](super::RateLimitLayer):
/// one pointer, so a send's future carries its gate for one word.
#[derive(Clone)]
pub(crate) struct Gate(Arc<Shared>);

/// What the clones of a [`Gate`] share.
pub(crate) struct Shared {
    pub(super) paces: Paces,
    pub(super) adaptive: Option<AdaptiveRate>,
    keys: Mutex<Keys<KeyState>>,
    /// Set once any key's provider stated a token quota.
    tokens_stated: AtomicBool,
    /// Keys the hash of a request's authority and credentials with a
    /// secret of this gate's (or of the store it shares with): callers who choose
    /// their own API keys (a gateway's) cannot aim one at another caller's
    /// quota.
    pub(super) key_hasher: KeyHasher,
    /// Where holds and paces are shared with other replicas, if they are.
    pub(super) shared: Option<Arc<dyn SharedGate>>,
    /// Until the first news of any key: sends go unkeyed.
    quiet: Quiet,
    /// Until when a hold some key met may be contested, in nanoseconds
    /// after `epoch`: until then every success is counted against it (the
    /// end of the longest such hold named, on any key, whether its contest
    /// ended sooner or not: only a lock on a success more).
    contested_until: AtomicU64,
    epoch: Instant,
}

impl Shared {
    /// A key's request pace under the configured quota and its `learned`
    /// rate: whichever is slower (a configured quota keeps its burst).
    fn request_pace(&self, learned: Option<&Learned>) -> Option<Pace> {
        slower(
            self.paces.requests,
            learned.map(|rate| Pace {
                interval: rate.interval(),
                burst: 1,
            }),
        )
    }
}

/// The `configured` pace, or `other` where it is slower (the configured
/// one keeps its burst).
fn slower(configured: Option<Pace>, other: Option<Pace>) -> Option<Pace> {
    match (configured, other) {
        (Some(c), Some(o)) if o.interval > c.interval => Some(o),
        (configured, other) => configured.or(other),
    }
}

impl std::ops::Deref for Gate {
    type Target = Shared;

    fn deref(&self) -> &Shared {
        &self.0
    }
}

#[derive(Debug)]
struct KeyState {
    /// Tells this key's state from a later one under the same key, after
    /// an eviction: a booking holds the id it was made under.
    id: u64,
    /// Its bookings under the configured and the stated quotas.
    quotas: QuotaBook,
    /// A wait the provider named for the key, and the evidence about it.
    hold: Hold,
    /// The learned rate, in adaptive mode.
    learned: Option<LearnedKey>,
    /// When a send last used the key (the sweep drops the oldest first).
    last_used: Instant,
    /// The key's sends as its provider counts them, and its window.
    ledger: Ledger,
    /// Wakes the waiting sends: the learned rate rose enough, or news of
    /// the window came.
    woken: Arc<Notify>,
    /// Sends in flight, and their ceiling once the key was overloaded.
    flight: Arc<Flight>,
}

#[derive(Debug)]
struct LearnedKey {
    rate: Learned,
    /// The rate when the waiting sends were last woken for a rise.
    woken_at_rate: f64,
}

impl KeyState {
    fn new(gate: &Shared, now: Instant) -> KeyState {
        // From 1: a send of no key state (a quiet gate's) marks 0.
        static NEXT_ID: AtomicU64 = AtomicU64::new(1);
        // The first key made takes over what the quiet gate counted.
        let (first, flight) = gate.quiet.hear().unwrap_or_default();
        let learned = gate.adaptive.as_ref().map(|bounds| {
            let mut rate = bounds.start();
            if let Some((since, served)) = first {
                rate.began(since, served);
            }
            LearnedKey {
                woken_at_rate: rate.per_sec(),
                rate,
            }
        });
        let pace = gate.request_pace(learned.as_ref().map(|l| &l.rate));
        KeyState {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            quotas: QuotaBook::new(now, pace),
            hold: Hold::default(),
            last_used: now,
            ledger: Ledger::after(gate.quiet.gone()),
            woken: Arc::new(Notify::new()),
            flight,
            learned,
        }
    }

    /// A send is let through: its place among the key's sends.
    fn let_go(&mut self, booking: &mut Booking) {
        booking.mark.order = self.ledger.let_go(booking.place);
        booking.released = true;
        booking.mark.gone = self.quotas.go_stated(booking.mark.cost);
    }

    /// States a new window (`None`: none in force); the sends waiting to
    /// probe the last one look again.
    fn restate_window(&mut self, window: Option<(Option<Instant>, u64)>, now: Instant) {
        if self.ledger.restate(window, now) {
            self.woken.notify_waiters();
        }
    }
}

impl Sweepable for KeyState {
    fn idle(&self, now: Instant) -> bool {
        self.quotas.idle(now)
            && !self.hold.holds(now)
            && self.ledger.idle(now)
            && self.flight.in_flight() == 0
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
    /// Its configured token quota slot when booked, and the key's shift then.
    token_slot: Instant,
    shift: Duration,
    /// Its ticket in the key's pacer.
    ticket: Option<u64>,
    /// What its answer is read against: its stated tokens (`mark.cost`),
    /// its place among the key's sends, and the key state it was made under.
    pub(super) mark: TokenMark,
    /// Its place in the provider's window: a share it took (given back if
    /// it never goes), a reset it waits for, or a probe's turn (it looks
    /// again when news of the window comes first).
    place: Place,
    /// When its tokens under the provider's stated token quota are there,
    /// if it booked any.
    stated: Option<Instant>,
    /// Whether the send may go already: its ticket was released (or it
    /// has none) when it was queued.
    pub(super) released: bool,
    /// It took a send's room under the stated request quota (stated
    /// this time).
    room: Option<u64>,
    cost: u64,
    pub(super) bounds: Bounds,
}

impl Booking {
    /// Its slots under the key's `floor` (a hold's end, or now) with its
    /// configured token quota's slot at `tokens` and its ticket's time
    /// `paced`: the firm one, and the one it waits for, later by a probe's
    /// turn, which is no firm slot (news of the window may come sooner).
    fn slots(&self, floor: Instant, tokens: Instant, paced: Option<Instant>) -> (Instant, Instant) {
        let reset = match self.place {
            Place::AfterReset(at) => Some(at),
            _ => None,
        };
        let firm = [reset, self.stated, self.bounds.not_before, paced]
            .into_iter()
            .flatten()
            .fold(floor.max(tokens), Instant::max);
        match self.place {
            Place::Probe { at, .. } => (firm, firm.max(at)),
            _ => (firm, firm),
        }
    }
}

/// The key's paces a sharing gate's send takes its turns in before it
/// goes: its request pace, if it has a quota it was told or the provider
/// stated, and its token pace and the send's cost in it, if it has such a
/// token quota and the send costs tokens.
pub(super) type Fleet = (Option<SharedPace>, Option<(SharedPace, u32)>);

/// A send queued on its key: its booking, the key's sends in flight (which
/// it joins when it goes), for a send that waits what wakes it to look
/// again, and where the gate shares the paces it takes its turns in there.
pub(super) type Reserved = (Booking, Arc<Flight>, Option<OwnedNotified>, Option<Fleet>);

/// What a send may wait for: no later than its deadline, and no hold for
/// a longer server-named wait than it honours.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) struct Bounds {
    pub(super) deadline: Option<Instant>,
    pub(super) max_server_wait: Option<Duration>,
    /// Not before this instant: the provider named the request a wait.
    pub(super) not_before: Option<Instant>,
}

/// A send as its answer is read against: its stated tokens, its place
/// among its key's sends, the key's stated tokens gone once it went, and
/// the key state it went under (0 for none: a quiet gate's send).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct TokenMark {
    /// The tokens it booked under a stated token quota (0 for none).
    pub(super) cost: u64,
    /// Its place among the key's sends, once let through.
    pub(super) order: u64,
    /// The key's stated tokens gone once it went (see
    /// [`QuotaBook::go_stated`]): what its answer's count has not seen is
    /// what went after it.
    pub(super) gone: u64,
    pub(super) key_id: u64,
}

/// What an answer stated: the provider's request window and token quota,
/// if it did, and the longest wait the request honours (a reset's cap).
pub(super) type Stated = (
    Option<crate::hint::RequestWindow>,
    Option<crate::hint::TokenWindow>,
    Duration,
);

impl Gate {
    /// A gate with no keys yet, keyed by a secret of its own or, when it
    /// shares holds and paces through `shared`, by the store's.
    pub(super) fn new(
        requests: Option<Pace>,
        tokens: Option<Pace>,
        adaptive: Option<AdaptiveRate>,
        shared: Option<Arc<dyn SharedGate>>,
    ) -> Gate {
        let paces = Paces { requests, tokens };
        let key_hasher = shared.as_ref().map_or_else(KeyHasher::random, |shared| {
            KeyHasher::keyed(shared.key_secret())
        });
        // A gate told its quotas, sharing, or pacing from the first send
        // (adaptive bounds with a finite start) keys every send.
        let paced_from_start = adaptive.is_some_and(|bounds| !bounds.start().unmeasured());
        let quiet = Quiet::new(paces.any() || shared.is_some() || paced_from_start);
        Gate(Arc::new(Shared {
            paces,
            adaptive,
            keys: Mutex::default(),
            tokens_stated: AtomicBool::new(false),
            key_hasher,
            shared,
            quiet,
            contested_until: AtomicU64::new(0),
            epoch: Instant::now(),
        }))
    }

    /// The pace a key's sends share with other replicas: the configured
    /// quota's, or (slower) the sustained rate its provider `stated`, with
    /// the `room` its last answer stated as the burst (a bucket with room
    /// lets a burst go at once, as it would unshared). A learned rate is
    /// this replica's own, never shared.
    fn fleet_pace(&self, stated: Option<f64>, room: u64) -> Option<SharedPace> {
        // A little under the stated rate: sent at exactly a bucket's rate,
        // every token that comes late refuses a send.
        slower(
            self.paces.requests,
            stated
                .filter(|per_sec| per_sec.is_finite() && *per_sec > 0.0)
                .map(|per_sec| SharedPace {
                    interval: Duration::from_secs_f64(1.0 / (per_sec * STATED_SHARE))
                        .min(Duration::from_secs(3600)),
                    burst: u32::try_from(room).unwrap_or(u32::MAX).max(1),
                }),
        )
    }

    /// The token pace a send of `cost` shares with other replicas: the
    /// configured token quota's, or (slower) the stated one's at 95 % of
    /// its rate, with the tokens its bucket has left (`room`: time per
    /// token and tokens left) as the burst. `None` for a send that costs
    /// nothing.
    fn fleet_tokens(&self, room: Option<(Duration, u64)>, cost: u64) -> Option<(SharedPace, u32)> {
        let cost = u32::try_from(cost).ok().filter(|cost| *cost > 0)?;
        let stated = room.map(|(per_token, left)| SharedPace {
            interval: per_token.div_f64(STATED_SHARE),
            burst: u32::try_from(left).unwrap_or(u32::MAX).max(1),
        });
        Some((slower(self.paces.tokens, stated)?, cost))
    }

    /// While no key has news: the gate's sends go unkeyed, counted here.
    pub(super) fn quiet(&self) -> Option<&Quiet> {
        self.quiet.holds().then_some(&self.quiet)
    }

    /// Whether the gate is quiet: no key has had news yet.
    pub(crate) fn is_quiet(&self) -> bool {
        self.quiet.holds()
    }

    /// News came at `now` of `key` for a send a quiet gate let go at
    /// `sent`: the key gets a state if it has none (the first takes over
    /// the quiet gate's counts), whose pace counts from that send. Its
    /// sends in flight.
    pub(super) fn adopt(&self, key: u64, sent: Instant, now: Instant) -> Arc<Flight> {
        let mut keys = lock(&self.keys);
        keys.make_room(now);
        let state = keys.entry(key).or_insert_with(|| {
            let mut state = KeyState::new(self, now);
            if let Some(pace) = state.quotas.pace {
                let ticket = state.quotas.pacer.take(sent, sent, pace);
                state.quotas.pacer.release(ticket, sent);
            }
            state
        });
        Arc::clone(&state.flight)
    }

    /// Queues a send of `cost` tokens on `key`, unless it would start past
    /// its bounds: its booking, the key's sends in flight, which the send
    /// joins when it goes, and for a send that waits what wakes it to look again
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
        // Another replica's hold on the key is a floor, as the key's own
        // would be (read before the lock: the store is memory only).
        let shared_floor = self
            .shared
            .as_deref()
            .and_then(|holds| shared_floor(holds, key, now, bounds.max_server_wait));
        let capacity = self.paces.tokens.map_or(u64::MAX, |pace| pace.capacity());
        if cost > capacity {
            return Err(GateError::NeverFits { cost, capacity });
        }
        let mut keys = lock(&self.keys);
        // Amortized O(1): a sweep only when the map has doubled (one that
        // drops this key, idle, only means it is made anew below).
        keys.make_room(now);
        let state = keys.entry(key).or_insert_with(|| KeyState::new(self, now));
        state.last_used = now;
        let (floor, past_hold) = state.hold.admits(now, deadline, bounds.max_server_wait)?;
        let floor = shared_floor.map_or(floor, |shared| floor.max(shared));
        // The provider said how many more its window admits: past that, a
        // send waits for the window's reset, or for a probe to learn it.
        let place = state.ledger.place(now);
        let window_floor = match place {
            Place::AfterReset(at) => at,
            _ => now,
        };
        // Quotas are booked from the end of a hold or an exhausted window:
        // sends queued during one leave paced, not together.
        let base = floor.max(window_floor);
        // Without a token quota the booked slot is the arrival: a hold or
        // window that ends early (a lost contest, news) holds it back no
        // longer.
        let token_slot = match &self.paces.tokens {
            Some(pace) => base.max(state.quotas.tokens.slot(pace, base, cost)),
            None => now,
        };
        // Room the provider stated, or a send past a hold, skips a learned
        // pace.
        let room = (base <= now).then(|| state.quotas.take_room()).flatten();
        let in_room = room.is_some();
        let ticketed = self.paced_even_if(in_room || past_hold);
        let pace = state.quotas.pace.filter(|_| ticketed);
        let ticket = pace.map(|pace| state.quotas.pacer.take(now, base, pace));
        let stated = state.quotas.stated_slot(cost, now, base);
        // Before this send's booking: the room the fleet may burst into
        // (read only where the gate shares).
        let token_room = self
            .shared
            .as_ref()
            .and_then(|_| state.quotas.stated_token_room(now));
        let mut booking = Booking {
            slot: now,
            token_slot,
            shift: state.hold.shift(),
            ticket,
            mark: TokenMark {
                cost: stated.map_or(0, |_| cost),
                key_id: state.id,
                ..TokenMark::default()
            },
            place,
            stated,
            released: false,
            room,
            cost,
            bounds,
        };
        let (firm, slot) = booking.slots(floor, token_slot, state.quotas.ticket_time(ticket));
        if deadline.is_some_and(|deadline| firm > deadline) {
            if ticket.is_some() {
                state.quotas.pacer.untake();
            }
            return Err(GateError::PastDeadline { wait: firm - now });
        }
        // A probe's turn waits no later than its deadline.
        let released = slot <= now;
        booking.slot = deadline.map_or(slot, |deadline| slot.min(deadline));
        if stated.is_some() {
            state.quotas.book_stated(cost, now);
        }
        if let Some(pace) = &self.paces.tokens {
            state.quotas.tokens.book(pace, token_slot, cost);
        }
        booking.place = state.ledger.enter(place, deadline);
        if let Some(l) = &mut state.learned {
            l.rate.on_send(now);
        }
        if let (Some(ticket), true) = (ticket, released) {
            state.quotas.pacer.release(ticket, now);
        }
        let woken = if released {
            state.let_go(&mut booking);
            None
        } else {
            Some(Arc::clone(&state.woken).notified_owned())
        };
        let fleet = self.shared.as_ref().map(|_| {
            let stated = state.learned.as_ref().and_then(|l| l.rate.stated());
            let pace = self.fleet_pace(stated, state.quotas.stated_room);
            (pace, self.fleet_tokens(token_room, cost))
        });
        Ok((booking, Arc::clone(&state.flight), woken, fleet))
    }

    /// A waiting send looks again at `now`: the instant it waits until
    /// before it looks again, or `None` to go now. Its quota slot is
    /// booked again if a hold voided it.
    pub(super) fn check(
        &self,
        key: u64,
        booking: &mut Booking,
        now: Instant,
    ) -> Result<Option<Instant>, GateError> {
        let mut keys = lock(&self.keys);
        // A key evicted (idle) and made anew since: its pacing starts over.
        let Some(state) = keys
            .get_mut(&key)
            .filter(|state| state.id == booking.mark.key_id)
        else {
            return Ok(None);
        };
        // News of the window it waited to probe: placed anew.
        if let Place::Probe { epoch, .. } = booking.place {
            if state.ledger.moved_on(epoch) {
                state.ledger.leave(booking.place, false);
                booking.place = state.ledger.place(now);
                booking.place = state.ledger.enter(booking.place, booking.bounds.deadline);
            }
        }
        let bounds = booking.bounds;
        let (floor, past_hold) = state
            .hold
            .admits(now, bounds.deadline, bounds.max_server_wait)?;
        let pushed = state.hold.shift().saturating_sub(booking.shift);
        let token_slot = booking
            .token_slot
            .checked_add(pushed)
            .unwrap_or(booking.token_slot);
        // A ticket's time counts from the hold's end: not past it.
        let ticket = booking.ticket.filter(|_| self.paced_even_if(past_hold));
        let (firm, slot) = booking.slots(floor, token_slot, state.quotas.ticket_time(ticket));
        booking.slot = slot;
        if slot > now {
            let deadline = bounds.deadline;
            if deadline
                .is_some_and(|deadline| firm > deadline || (slot > deadline && now >= deadline))
            {
                return Err(GateError::PastDeadline { wait: slot - now });
            }
            return Ok(Some(deadline.map_or(slot, |d| slot.min(d))));
        }

        if let Some(ticket) = booking.ticket {
            state.quotas.pacer.release(ticket, now);
        }
        // It goes (as the window's next probe, if it waited for one).
        state.let_go(booking);
        Ok(None)
    }

    /// A booked send will never be sent: dropped or refused while it
    /// waited for its turn, or past its turn while it waited for a slot in
    /// flight (`released`). What it took is given up: its ticket and its
    /// configured tokens while it was queued, and in either case its window
    /// share or probe turn, the stated tokens it booked, and the room it
    /// took under a stated request quota.
    pub(super) fn abandon(&self, key: u64, booking: &Booking, now: Instant) {
        let took_share = matches!(booking.place, Place::Took(_) | Place::Probe { .. });
        if booking.released && booking.stated.is_none() && !took_share && booking.room.is_none() {
            return;
        }
        let mut keys = lock(&self.keys);
        let Some(state) = keys
            .get_mut(&key)
            .filter(|state| state.id == booking.mark.key_id)
        else {
            return;
        };
        if booking.stated.is_some() {
            state
                .quotas
                .refund_stated(booking.mark.cost, booking.released, now);
        }
        if let Some(epoch) = booking.room {
            state.quotas.give_back_room(epoch);
        }
        if booking.released {
            // Let through and counted, never sent: its share goes back.
            state.ledger.give_back(booking.place);
            return;
        }
        if let Some(pace) = &self.paces.tokens {
            state.quotas.tokens.refund(pace, booking.cost, now);
        }
        // The window's share it took goes back, if the window still stands.
        state.ledger.leave(booking.place, true);
        if let Some(ticket) = booking.ticket {
            state.quotas.pacer.abandon(ticket);
        }
    }

    /// Whether the gate counts tokens (a configured token quota, or some
    /// key's provider stated one): only then is a send's cost worth
    /// estimating.
    pub(super) fn counts_tokens(&self) -> bool {
        self.paces.tokens.is_some() || self.tokens_stated.load(Ordering::Relaxed)
    }

    /// What wakes a send waiting on `key` to look again: its learned rate
    /// rose, or news of its window came.
    pub(super) fn woken(&self, key: u64) -> Option<Arc<Notify>> {
        let keys = lock(&self.keys);
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
        let mut keys = lock(&self.keys);
        let has_rate = keys
            .get(&key)
            .and_then(|state| state.learned.as_ref())
            .is_some_and(|l| !l.rate.unmeasured());
        let (hold, full) = if whole_seconds && has_rate {
            (wait.saturating_sub(Duration::from_secs(1)), false)
        } else {
            (wait, true)
        };
        // Nothing to hold: no wait left, or an end past any instant.
        let until = now.checked_add(hold.min(limit));
        let Some(until) = until.filter(|_| !hold.is_zero()) else {
            return false;
        };
        // Amortized O(1): a sweep only when the map has doubled (one that
        // drops this key, idle, only means it is made anew below).
        keys.make_room(now);
        let state = keys.entry(key).or_insert_with(|| KeyState::new(self, now));
        // The queue behind the quotas starts at the hold's end now, in the
        // same order and spacing: it moves back by the hold's extension.
        let nanos = until.saturating_duration_since(self.epoch).as_nanos();
        self.contested_until
            .fetch_max(u64::try_from(nanos).unwrap_or(u64::MAX), Ordering::Relaxed);
        let pushed = match state.hold.refused(order, now, wait, until) {
            // Not yet: this request waits its own wait.
            Placed::Doubted => return false,
            Placed::Covered => return full,
            Placed::Extended { pushed } => pushed,
        };
        if let Some(holds) = &self.shared {
            holds.publish_hold(key, until);
        }
        // The wait to the end of a window whose reset the answers did not
        // state: the hold is that reset, and past it the window is new.
        if state.ledger.reset_unknown() {
            state.restate_window(None, now);
        }
        // The tokens booked move with the queue, and the quota admits
        // nothing more before `until` than one period's worth (the 429
        // said the upstream's bucket is empty).
        if let Some(pace) = &self.paces.tokens {
            state.quotas.tokens.push_back(pace, now, pushed, until);
        }
        if let Some(pace) = state.quotas.pace {
            state.quotas.pacer.rebase(pace.interval, until, true);
        }
        full
    }

    /// Adaptive mode: a send that went at `sent` was answered 429, naming
    /// `named_wait` or not. One decrease per congestion event: the 429s of
    /// sends that went before it belong to it. The queue moves to the new
    /// rate at once (the pacer is re-based), so a 429 for a later send
    /// is news.
    pub(super) fn throttled(
        &self,
        key: u64,
        sent: Instant,
        now: Instant,
        named_wait: Option<Duration>,
        final_answer: bool,
    ) {
        let mut keys = lock(&self.keys);
        let Some(state) = keys.get_mut(&key) else {
            return;
        };
        // The room a stated quota had is spent.
        state.quotas.set_room(0);
        self.learn_in(state, now, |rate, bounds| {
            let did = rate.on_refusal(bounds, sent, now, named_wait, final_answer);
            if did == Throttle::StoodDown {
                tracing::debug!(
                    "llm-retry: the key's 429s do not follow its send rate; \
                     it is no longer paced by a learned rate"
                );
                crate::observe::gate_stood_down("rate");
            }
        });
    }

    /// An answer to the key's send (`mark`: its place among the key's
    /// sends, and what its count of tokens is read against) stated the
    /// provider's token quota (`tokens`: the key's costed sends book
    /// tokens from now on) or request `window` (at most `remaining` more
    /// sends before it resets, less those the provider had not counted yet).
    ///
    /// Like a hold, the wait for the reset is capped at `limit`, the
    /// longest wait the request that read it honours: a bogus reset must
    /// not block the key for hours.
    ///
    /// A window that states its quota per minute is a bucket refilling
    /// continuously (Anthropic's and OpenAI's): a learned rate paces the key
    /// at that quota instead, and the reset (when the bucket is full again)
    /// is no floor.
    pub(super) fn stated(&self, key: u64, mark: TokenMark, now: Instant, news: Stated) {
        if let Some(state) = lock(&self.keys).get_mut(&key) {
            self.stated_in(key, state, mark, now, news);
        }
    }

    fn stated_in(
        &self,
        key: u64,
        state: &mut KeyState,
        mark: TokenMark,
        now: Instant,
        news: Stated,
    ) {
        let (window, tokens, limit) = news;
        if let Some(tokens) = tokens {
            // A send of an earlier state of the key (swept while idle) is
            // older news.
            let at = (mark.key_id == state.id).then_some((mark.order, mark.gone));
            if state
                .quotas
                .observe_tokens(tokens.per_minute, tokens.remaining, now, at)
            {
                self.tokens_stated.store(true, Ordering::Relaxed);
            }
        }
        let Some(window) = window else { return };
        let remaining = window
            .remaining
            .saturating_sub(state.ledger.uncounted_after(mark.order));
        if let (Some(per_minute), Some(_)) = (window.per_minute, &self.adaptive) {
            // A quota with room left: that many go at once, and only the
            // sends beyond them are paced at the quota.
            state.quotas.set_room(remaining);
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
        // A window with nothing left until its reset holds the key for
        // every replica as a named wait would: their sends would only be
        // refused until then.
        if let (Some(shared), Some((Some(reset), 0))) = (&self.shared, stated) {
            shared.publish_hold(key, reset);
        }
        state.restate_window(stated, now);
    }

    /// The key's send (its `mark.order`-th, which went at `sent`) was served, and
    /// its answer stated what is left of the provider's `window` and
    /// `tokens`, if it did: the hold's contest, the learned rate, the window
    /// and the token quota move under one lock.
    pub(super) fn served(
        &self,
        key: u64,
        (sent, mark): (Instant, TokenMark),
        now: Instant,
        window: Option<crate::hint::RequestWindow>,
        tokens: Option<crate::hint::TokenWindow>,
        limit: Duration,
    ) {
        // A gate told its quotas, with no news to take and no hold to
        // contest: a success takes no lock there.
        if self.adaptive.is_none() && window.is_none() && tokens.is_none() && !self.contested(now) {
            return;
        }
        let mut keys = lock(&self.keys);
        let Some(state) = keys.get_mut(&key) else {
            return;
        };
        let left = state.hold.floor(now).saturating_duration_since(now);
        if state.hold.served(mark.order, now) {
            tracing::debug!("llm-retry: the key serves sends after a 429: its hold ends");
            crate::observe::gate_stood_down("hold");
            // The waiting sends look again: their slots moved forward, and
            // the token quota the hold emptied to its end is empty now.
            if let Some(pace) = state.quotas.pace {
                state.quotas.pacer.rebase(pace.interval, now, false);
            }
            state.quotas.tokens.pull_forward(left);
            state.woken.notify_waiters();
        }
        self.learn_in(state, now, |rate, bounds| {
            rate.on_success(bounds, sent, now)
        });
        self.stated_in(key, state, mark, now, (window, tokens, limit));
    }

    /// Whether a hold some key met may still be contested at `now`.
    fn contested(&self, now: Instant) -> bool {
        let nanos = now.saturating_duration_since(self.epoch).as_nanos();
        u64::try_from(nanos).is_ok_and(|now| now < self.contested_until.load(Ordering::Relaxed))
    }

    /// Lets `update` change the key's learned rate; a change re-bases the
    /// pacer, and a rise worth it wakes the waiting sends.
    fn learn_in(
        &self,
        state: &mut KeyState,
        now: Instant,
        update: impl FnOnce(&mut Learned, &AdaptiveRate),
    ) {
        let Some(bounds) = &self.adaptive else { return };
        let floor = state.hold.floor(now);
        let Some(l) = &mut state.learned else {
            return;
        };
        let before = l.rate.per_sec();
        update(&mut l.rate, bounds);
        let after = l.rate.per_sec();
        if after == before {
            return;
        }
        tracing::debug!(rate_per_sec = after, "llm-retry: learned rate changed");
        let pace = self.request_pace(Some(&l.rate));
        state.quotas.pace = pace;
        if let Some(pace) = pace {
            state.quotas.pacer.rebase(pace.interval, floor, false);
        }
        if after < before {
            l.woken_at_rate = after;
        } else if after >= l.woken_at_rate * WAKE_ON_RISE {
            l.woken_at_rate = after;
            state.woken.notify_waiters();
        }
    }

    /// Whether a send takes its ticket in the pacer when it `skips` a
    /// learned pace (stated room, or going past a hold): only a configured
    /// request quota still paces it then.
    fn paced_even_if(&self, skips: bool) -> bool {
        !skips || self.paces.requests.is_some()
    }
}

impl fmt::Debug for Gate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Gate")
            .field("requests", &self.paces.requests)
            .field("tokens", &self.paces.tokens)
            .field("adaptive", &self.adaptive)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
#[path = "gate_tests.rs"]
mod tests;
