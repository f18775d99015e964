//! How one [`Retry`](super::Retry) service's requests carry their gate
//! link: offered during the call alone, or also in the request's
//! extensions.
//!
//! Offering costs nothing when no gate takes the link (see
//! [`offer`](crate::rate_limit::offer)), but a gate that a layer calls
//! from another task (a `Buffer`'s worker) never sees the offer. So a
//! service starts out sending the link both ways and learns from its first
//! request whose outcome settles it:
//!
//! - a gate took the link from the offer: offering suffices, from then on;
//! - the answer came back through no gate at all: offering suffices, and
//!   the request body is not read ahead for a gate's key (which model it
//!   names), from then on;
//! - a gate took it from the extensions only: the link travels in the
//!   extensions, from then on.
//!
//! The verdict is shared by the service's clones and never changes once
//! made. A stack whose requests take different paths (a `Steer` with a
//! deferred gate on one branch only) is settled by its first request.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

const UNSETTLED: u8 = 0;
const OFFER: u8 = 1;
const EXTENSION: u8 = 2;
const NO_GATE: u8 = 3;

/// The shared verdict of one service and its clones.
#[derive(Debug, Clone, Default)]
pub(super) struct Carriage(Arc<AtomicU8>);

/// How one request carries its link.
pub(super) enum Carry {
    /// Offered during each call only.
    Offer,
    /// Offered during each call only, to no gate seen so far: the body is
    /// not read ahead for one.
    NoGate,
    /// In the extensions too.
    Extension,
    /// In the extensions too, and its outcome settles the verdict.
    Probe(Carriage),
}

impl Carriage {
    /// How the next request carries its link.
    pub(super) fn next(&self) -> Carry {
        match self.0.load(Ordering::Relaxed) {
            OFFER => Carry::Offer,
            NO_GATE => Carry::NoGate,
            EXTENSION => Carry::Extension,
            _ => Carry::Probe(self.clone()),
        }
    }

    /// Settles the verdict from a probe's first attempt: whether a gate
    /// took the link from the offer, whether one took it at all, and
    /// whether the outcome is an answer (which passed every gate on its
    /// path). An error that met no gate settles nothing.
    pub(super) fn settle(&self, offered: bool, gated: bool, answered: bool) {
        let verdict = match (offered, gated) {
            (true, _) => OFFER,
            (false, true) => EXTENSION,
            (false, false) if answered => NO_GATE,
            (false, false) => return,
        };
        let _ = self
            .0
            .compare_exchange(UNSETTLED, verdict, Ordering::Relaxed, Ordering::Relaxed);
    }
}
