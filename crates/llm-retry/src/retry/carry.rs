//! How one [`Retry`](super::Retry) service's requests carry their gate
//! link: offered during the call alone, or also in the request's
//! extensions.
//!
//! Offering allocates nothing when no gate takes the link (see
//! [`offer`](crate::rate_limit::offer)), but a gate that a layer calls
//! from another task (a `Buffer`'s worker) never sees the offer. So a
//! service starts out sending the link both ways and learns from its first
//! request whose outcome settles it:
//!
//! - a gate took the link from the offer: offering suffices, from then on;
//! - the answer came back through no gate at all: the link is not
//!   offered (an outer loop's offer is hidden too), and the request body
//!   is not read ahead for a gate's key (which model it names), until a
//!   gate asks for a link all the same (a path the first request did not
//!   take). That unsettles the verdict for the next request to settle
//!   again; the request that found the gate sent its first attempt to it
//!   without a link (the gate neither knew its bounds nor heard its
//!   answer), and offers the link and the body to its later attempts;
//! - a gate took it from the extensions only: the link travels in the
//!   extensions, from then on.
//!
//! A [`ClientLayer`](crate::ClientLayer)'s retry loop has nothing to
//! learn: its gate sits right below it and takes the offer, so its
//! requests are offered their link from the first (`Retry::over_gate`);
//! while that gate is quiet (no key has had news), the loop offers
//! nothing and notes each send itself ([`Carry::Quiet`]), and the gate lets
//! it pass.
//! Nor has a layer told there is no gate below
//! ([`RetryLayer::no_gate_below`](crate::RetryLayer::no_gate_below), for
//! stacks made per request): its services start settled on no gate, and a
//! gate met all the same unsettles them as above.
//!
//! The verdict is shared by the service's clones and changes only that
//! way. A stack whose requests take different paths (a `Steer` with a
//! deferred gate on one branch only) is settled by its first request.

use crate::rate_limit::Gate;
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
    /// Under a [`ClientLayer`](crate::ClientLayer)'s gate while it is
    /// quiet: no link, no body read ahead; the loop notes each send itself
    /// while the gate stays quiet, and offers its link once it is not.
    Quiet(Gate),
    /// Offered during each call only.
    Offer,
    /// Not offered, to no gate seen so far: the body is not read ahead
    /// for one. A gate that asks all the same unsettles the verdict.
    NoGate(Carriage),
    /// In the extensions too.
    Extension,
    /// In the extensions too, and its outcome settles the verdict.
    Probe(Carriage),
}

impl Carriage {
    /// A verdict settled from the start: no gate is below (see
    /// [`RetryLayer::no_gate_below`](crate::RetryLayer::no_gate_below)).
    pub(super) fn no_gate() -> Carriage {
        Carriage(Arc::new(AtomicU8::new(NO_GATE)))
    }

    /// How the next request carries its link.
    pub(super) fn next(&self) -> Carry {
        match self.0.load(Ordering::Relaxed) {
            OFFER => Carry::Offer,
            NO_GATE => Carry::NoGate(self.clone()),
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

    /// A request sent as if no gate were below met one after all (a path
    /// its first request did not take): the next request settles the
    /// verdict again.
    pub(super) fn gate_met(&self) {
        let _ = self
            .0
            .compare_exchange(NO_GATE, UNSETTLED, Ordering::Relaxed, Ordering::Relaxed);
    }
}
