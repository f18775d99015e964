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
//! requests are offered their link from the first (`Retry::over_gate`).
//!
//! The verdict is shared by the service's clones, and by every service of
//! the same type one [`RetryLayer`](crate::RetryLayer) (or a clone of it)
//! builds, so a stack made per request (a client middleware's) settles it
//! once; it changes only that way. A stack whose requests take different
//! paths (a `Steer` with a deferred gate on one branch only), or boxed
//! stacks of different shapes built by one layer, are settled by the first
//! request; a gate met on a path the verdict says has none unsettles it
//! again, its first attempt going without the link, as above.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

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
    /// Not offered, to no gate seen so far: the body is not read ahead
    /// for one. A gate that asks all the same unsettles the verdict.
    NoGate(Carriage),
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

/// Service types a layer keeps a verdict for; past that, a service of
/// another type learns on its own.
const MAX_SHARED_TYPES: usize = 16;

/// The verdicts of the services one layer (and its clones) builds, one per
/// type of service: stacks of one type are built alike, and one whose gate
/// sits behind another task (a `Buffer`'s) is of another type than one
/// whose gate the offer reaches, so neither settles the other's.
#[derive(Debug, Clone, Default)]
pub(super) struct Carriages(Arc<Mutex<Vec<(&'static str, Carriage)>>>);

impl Carriages {
    /// The verdict services of type `S` share.
    pub(super) fn of<S>(&self) -> Carriage {
        let name = std::any::type_name::<S>();
        let mut kept = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((_, carriage)) = kept.iter().find(|(kept, _)| *kept == name) {
            return carriage.clone();
        }
        let carriage = Carriage::default();
        if kept.len() < MAX_SHARED_TYPES {
            kept.push((name, carriage.clone()));
        }
        carriage
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn same(a: &Carriage, b: &Carriage) -> bool {
        Arc::ptr_eq(&a.0, &b.0)
    }

    #[test]
    fn services_of_one_type_share_a_verdict_and_no_more_types_are_kept_than_the_bound() {
        let carriages = Carriages::default();
        assert!(same(&carriages.of::<u8>(), &carriages.clone().of::<u8>()));
        assert!(!same(&carriages.of::<u8>(), &carriages.of::<u16>()));
        macro_rules! of_each {
            ($($n:literal)*) => { $( let _ = carriages.of::<[u8; $n]>(); )* };
        }
        of_each!(0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17);
        assert_eq!(carriages.0.lock().unwrap().len(), MAX_SHARED_TYPES);
        // Past the bound a type learns on its own.
        assert!(!same(
            &carriages.of::<[u8; 17]>(),
            &carriages.of::<[u8; 17]>()
        ));
        assert!(same(&carriages.of::<u8>(), &carriages.of::<u8>()));
    }
}
