//! How the retry loop hands its request's [`GateLink`] to a gate under it
//! without a request extension.
//!
//! While the retry loop calls the service under it, and while it polls the
//! attempt in flight, the thread holds the request's offer; a gate reached
//! then takes the link from it, making the link on first use. So a gate
//! finds it whether the layers between call it at once (`map_request`,
//! `timeout`) or from their own futures (a gate above it, a failover, a
//! `tower::retry` between). A request that meets no gate allocates
//! nothing, and carries no extension map.
//!
//! Invariants: the offer lives only for one `call` or one poll and is
//! restored on every exit, unwinding included, so nested retry layers each
//! offer their own (the nearest wins) and nothing leaks to a later call.
//! What the offer cannot reach is a gate called from another task (a
//! `Buffer`'s worker): the retry layer learns that from its first request
//! and then sends the link in the request's extensions too
//! (`retry/carry.rs`). The offer belongs to whatever runs during the call
//! or poll: a layer that, inside them, sends *another* request through a
//! gate (a batcher flushing its queue) would hand that request this one's
//! link. A request that carries a link of its own (the `tower::retry`
//! path's) keeps it.

use super::link::GateLink;
use crate::budget::Limits;
use bytes::Bytes;
use std::cell::Cell;
use std::time::Duration;
use tokio::time::Instant;

/// What a link is made with: the request's bounds.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LinkBounds {
    pub(crate) deadline: Option<Instant>,
    pub(crate) max_server_wait: Duration,
    pub(crate) attempt_timeout: Option<Duration>,
}

impl LinkBounds {
    pub(crate) fn new(limits: &Limits, deadline: Option<Instant>) -> LinkBounds {
        LinkBounds {
            deadline,
            max_server_wait: limits.max_server_wait,
            attempt_timeout: limits.attempt_timeout,
        }
    }
}

struct Offer {
    bounds: LinkBounds,
    link: Option<GateLink>,
    /// The request body, whole, for the link when a gate makes it.
    body: Option<Bytes>,
}

thread_local! {
    static OFFERED: Cell<Option<Offer>> = const { Cell::new(None) };
    /// Whether a gate asked for a link during the innermost call or poll
    /// run [`unoffered`].
    static ASKED: Cell<bool> = const { Cell::new(false) };
}

/// Puts the offer back as it was, and the link (made by a gate, or the one
/// offered) back where the retry loop keeps it.
struct Restore<'a> {
    outer: Option<Offer>,
    link: &'a mut Option<GateLink>,
    body: &'a mut Option<Bytes>,
}

impl Drop for Restore<'_> {
    fn drop(&mut self) {
        let outer = self.outer.take();
        // `try_with`: a thread tearing down its locals has no offer to
        // restore, and must not panic here.
        if let Ok(Some(ours)) = OFFERED.try_with(|cell| cell.replace(outer)) {
            *self.link = ours.link;
            *self.body = ours.body;
        }
    }
}

/// Runs `call` (the inner service's `call` for one attempt) with `link`
/// offered to the gate it reaches; afterwards `link` is the link a gate
/// made, if it made one, holding `body` (taken then).
pub(crate) fn offering<T>(
    link: &mut Option<GateLink>,
    body: &mut Option<Bytes>,
    bounds: LinkBounds,
    call: impl FnOnce() -> T,
) -> T {
    let offered = OFFERED.try_with(|cell| {
        cell.replace(Some(Offer {
            bounds,
            link: link.take(),
            body: body.take(),
        }))
    });
    match offered {
        Ok(outer) => {
            let _restore = Restore { outer, link, body };
            call()
        }
        // The thread's locals are gone (it is exiting): no gate can take
        // an offer, and the link stays where it was.
        Err(_) => call(),
    }
}

/// Runs `f` (a call or poll of a retry loop whose requests met no gate so
/// far) without an offer, and says whether a gate asked for a link during
/// it all the same: the loop then offers again. Nested runs each see only
/// what asked during their own `f`, and an outer run sees it too.
pub(crate) fn unoffered<T>(f: impl FnOnce() -> T) -> (T, bool) {
    let outer = ASKED
        .try_with(|asked| asked.replace(false))
        .unwrap_or(false);
    let out = f();
    let asked = ASKED
        .try_with(|asked| asked.replace(outer || asked.get()))
        .unwrap_or(false);
    (out, asked)
}

/// For a gate's `call`: the link of the request being called, if a retry
/// loop above offers one (made here the first time a gate asks).
pub(super) fn take() -> Option<GateLink> {
    let _ = ASKED.try_with(|asked| asked.set(true));
    OFFERED
        .try_with(|cell| {
            let mut offer = cell.take()?;
            let Offer { bounds, link, body } = &mut offer;
            let link = link
                .get_or_insert_with(|| GateLink::new(*bounds, body.take()))
                .clone();
            cell.set(Some(offer));
            Some(link)
        })
        .ok()
        .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bounds() -> LinkBounds {
        LinkBounds::new(&Limits::default(), None)
    }

    #[test]
    fn an_offer_lasts_for_its_call_and_nested_offers_take_turns() {
        assert!(take().is_none(), "no offer outside a call");
        let (mut outer, mut inner) = (None, None);
        offering(&mut outer, &mut None, bounds(), || {
            let first = take().expect("offered");
            assert!(first.same(&take().expect("still offered")), "made once");
            offering(&mut inner, &mut None, bounds(), || {
                let nested = take().expect("offered");
                assert!(!nested.same(&first), "the nearest retry loop's link");
            });
            assert!(first.same(&take().expect("the outer offer is back")));
        });
        assert!(take().is_none(), "nothing outlives the call");
        let (outer, inner) = (outer.expect("kept"), inner.expect("kept"));
        assert!(!outer.same(&inner));
        // A link already made is offered again, not made anew.
        let mut again = Some(outer.clone());
        offering(&mut again, &mut None, bounds(), || {
            assert!(outer.same(&take().expect("offered")));
        });
        assert!(again.is_some_and(|link| link.same(&outer)));
    }

    #[test]
    fn a_call_that_panics_takes_its_offer_with_it() {
        let mut link = None;
        let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            offering(&mut link, &mut None, bounds(), || {
                let _ = take();
                panic!("the inner service panicked");
            })
        }));
        assert!(unwound.is_err());
        assert!(take().is_none());
        assert!(link.is_some(), "the link made before the panic is kept");
    }

    #[test]
    fn a_run_without_an_offer_hears_a_gate_that_asked_and_so_do_outer_runs() {
        let ((), asked) = unoffered(|| ());
        assert!(!asked, "no gate asked");
        let ((), asked) = unoffered(|| assert!(take().is_none(), "nothing offered"));
        assert!(asked);
        let (inner, outer) = unoffered(|| {
            let ((), inner) = unoffered(|| {
                let _ = take();
            });
            let ((), after) = unoffered(|| ());
            assert!(!after, "a later run starts afresh");
            inner
        });
        assert!(inner && outer, "the outer run hears what asked inside it");
        let ((), asked) = unoffered(|| ());
        assert!(!asked, "nothing outlives a run");
    }

    #[test]
    fn a_call_that_meets_no_gate_makes_no_link() {
        let mut link = None;
        offering(&mut link, &mut None, bounds(), || ());
        assert!(link.is_none());
    }
}
