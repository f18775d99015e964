//! A key's quota bookings: the configured quotas' slots (with what may be
//! given back), and the quotas its provider states (a token bucket, and
//! the room its request quota has left).

use super::gcra::{Pace, Tat};
use super::refund::Refunds;
use super::stated_tokens::StatedTokens;
use std::time::Duration;
use tokio::time::Instant;

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
#[derive(Debug, Default)]
pub(super) struct QuotaBook {
    requests: Tat,
    tokens: Tat,
    /// Configured-quota bookings that may still be given back.
    refunds: Refunds,
    /// The token quota the provider's answers state, once one did.
    stated_tokens: Option<StatedTokens>,
    /// Sends its stated request quota has room for, beyond those let
    /// through since: they go at once, unpaced.
    stated_room: u64,
}

impl QuotaBook {
    /// The earliest slot the configured quotas give a send of `cost`
    /// tokens at `now`.
    pub(super) fn slot(&self, paces: &Paces, cost: u64, now: Instant) -> Instant {
        let mut slot = now;
        if let Some(pace) = &paces.requests {
            slot = slot.max(self.requests.slot(pace, now, 1));
        }
        if let Some(pace) = &paces.tokens {
            slot = slot.max(self.tokens.slot(pace, now, cost));
        }
        slot
    }

    /// Books a send of `cost` tokens at `slot`; `released` when it goes at
    /// once. Returns its number, to give it back by.
    pub(super) fn book(&mut self, paces: &Paces, cost: u64, slot: Instant, released: bool) -> u64 {
        let before = [self.requests, self.tokens];
        if let Some(pace) = &paces.requests {
            self.requests.book(pace, slot, 1);
        }
        if let Some(pace) = &paces.tokens {
            self.tokens.book(pace, slot, cost);
        }
        self.refunds.book(before, released)
    }

    /// The booking `seq` went: it can no longer be given back.
    pub(super) fn sent(&mut self, seq: u64) {
        self.refunds.sent(seq);
    }

    /// The booking `seq` never will go: its slots come back when it was
    /// the tail of the queue (else once the bookings behind it do).
    pub(super) fn give_up(&mut self, seq: u64) {
        if let Some([requests, tokens]) = self.refunds.give_up(seq) {
            self.requests = requests;
            self.tokens = tokens;
        }
    }

    /// A hold until `until` pushed the queue back by `pushed`: the slots
    /// booked move with it, and the quotas admit nothing more before
    /// `until` than one period's worth (the 429 said the upstream's
    /// bucket is empty).
    pub(super) fn push_back(
        &mut self,
        paces: &Paces,
        now: Instant,
        pushed: Duration,
        until: Instant,
    ) {
        if let Some(pace) = &paces.requests {
            self.requests.push_back(pace, now, pushed, until);
        }
        if let Some(pace) = &paces.tokens {
            self.tokens.push_back(pace, now, pushed, until);
        }
        let paces = [paces.requests.as_ref(), paces.tokens.as_ref()];
        self.refunds.push_back(paces, now, pushed, until);
    }

    /// Takes one send's room under the stated request quota, if any is
    /// left: that send goes unpaced.
    pub(super) fn take_room(&mut self) -> bool {
        let room = self.stated_room > 0;
        self.stated_room = self.stated_room.saturating_sub(1);
        room
    }

    /// The provider's answer stated `room` more sends (`0`: a refusal
    /// spent it).
    pub(super) fn set_room(&mut self, room: u64) {
        self.stated_room = room;
    }

    /// When the stated token quota has `cost` tokens, no sooner than
    /// `floor`: `None` when no quota was stated, the send costs nothing,
    /// or it costs more than the quota ever holds.
    pub(super) fn stated_slot(
        &mut self,
        cost: u64,
        now: Instant,
        floor: Instant,
    ) -> Option<Instant> {
        let tokens = self.stated_tokens.as_mut()?;
        (cost > 0 && tokens.fits(cost)).then(|| tokens.slot(cost, now, floor))
    }

    /// A send booked `cost` stated tokens.
    pub(super) fn book_stated(&mut self, cost: u64) {
        if let Some(tokens) = &mut self.stated_tokens {
            tokens.book(cost);
        }
    }

    /// A send that booked `cost` stated tokens never went.
    pub(super) fn refund_stated(&mut self, cost: u64) {
        if let Some(tokens) = &mut self.stated_tokens {
            tokens.refund(cost);
        }
    }

    /// An answer stated the token quota; true when it is the first.
    pub(super) fn observe_tokens(&mut self, per_minute: u64, remaining: u64, now: Instant) -> bool {
        match &mut self.stated_tokens {
            Some(tokens) => {
                tokens.observed(per_minute, remaining, now);
                false
            }
            None => {
                self.stated_tokens = Some(StatedTokens::new(per_minute, remaining, now));
                true
            }
        }
    }

    /// Nothing booked reaches past `now`.
    pub(super) fn idle(&self, now: Instant) -> bool {
        self.requests.idle(now)
            && self.tokens.idle(now)
            && self.stated_tokens.is_none_or(|t| t.settled(now))
    }
}
