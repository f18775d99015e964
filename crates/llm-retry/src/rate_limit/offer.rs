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
//!
//! A retry loop whose requests met no gate so far offers nothing: its call
//! or poll is a run without an offer, which hides any outer loop's offer
//! as an offer of its own would (a gate below takes no link then), and
//! hears whether a gate asked during it, so the loop offers again. Runs
//! nest like offers, and each hears only the gates that ask while it is
//! the innermost.

use super::link::GateLink;
use crate::budget::Limits;
use bytes::Bytes;
use std::cell::Cell;
use std::thread::LocalKey;
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
    /// The runs without an offer under way when it was made: one begun
    /// since is a nearer loop, which hides it.
    hides: u32,
}

/// Runs without an offer under way on this thread, and whether a gate
/// asked for a link during the innermost one.
#[derive(Clone, Copy, Default)]
struct Unoffered {
    hides: u32,
    asked: bool,
}

thread_local! {
    static OFFERED: Cell<Option<Offer>> = const { Cell::new(None) };
    static UNOFFERED: Cell<Unoffered> = const {
        Cell::new(Unoffered {
            hides: 0,
            asked: false,
        })
    };
    /// Set while a retry loop calls the gate right below it with a send it
    /// noted itself (the gate was quiet when it looked): that gate lets the
    /// call pass untouched.
    static NOTED: Cell<bool> = const { Cell::new(false) };
}

/// Runs `call` (a `ClientLayer` retry loop's call of its gate, for a send
/// it noted itself) marked, so that gate lets it pass whatever news came
/// since the loop looked; the mark is put back as it was on every exit.
pub(crate) fn noted<T>(call: impl FnOnce() -> T) -> T {
    let Ok(outer) = NOTED.try_with(|cell| cell.replace(true)) else {
        return call();
    };
    let _restore = PutBack(&NOTED, outer);
    call()
}

/// Whether the call under way is marked (see [`noted`]): taken, so no
/// gate further below takes it too.
pub(crate) fn take_noted() -> bool {
    NOTED.try_with(|cell| cell.replace(false)).unwrap_or(false)
}

/// Puts a thread-local back as a call or run found it, on every exit.
struct PutBack<T: Copy + 'static>(&'static LocalKey<Cell<T>>, T);

impl<T: Copy + 'static> Drop for PutBack<T> {
    fn drop(&mut self) {
        // `try_with`: never a panic here, unwinding or at thread exit.
        let _ = self.0.try_with(|cell| cell.set(self.1));
    }
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
            hides: UNOFFERED.try_with(Cell::get).unwrap_or_default().hides,
        }))
    });
    // Nothing to restore once the thread's locals are gone (it is exiting):
    // no gate can take an offer, and the link stays where it was.
    let _restore = offered.ok().map(|outer| Restore { outer, link, body });
    call()
}

/// Runs `f` (a call or poll of a retry loop whose requests met no gate so
/// far) with no offer out: an outer loop's is hidden, as an offer of this
/// loop's own would hide it. Says whether a gate asked for a link during
/// it all the same: the loop then offers again. What asks inside a run is
/// the nearest loop's business: an outer run does not hear it. The outer
/// run's state is put back on every exit, unwinding included.
// Always inlined: what `f` returns (a poll of a response, a future) is then
// built where the caller keeps it, not moved out of a call.
#[inline(always)]
pub(crate) fn unoffered<T>(f: impl FnOnce() -> T) -> (T, bool) {
    let begun = UNOFFERED.try_with(|cell| {
        let outer = cell.get();
        cell.set(Unoffered {
            hides: outer.hides.wrapping_add(1),
            asked: false,
        });
        outer
    });
    let Ok(outer) = begun else {
        // The thread's locals are gone (it is exiting): no gate can ask.
        return (f(), false);
    };
    let _restore = PutBack(&UNOFFERED, outer);
    // Called outside the local's closure: what it returns (a future, a
    // poll) is not moved once more on the way out.
    let out = f();
    let asked = UNOFFERED.try_with(Cell::get).is_ok_and(|run| run.asked);
    (out, asked)
}

/// For a gate's `call`: the link of the request being called, if a retry
/// loop above offers one (made here the first time a gate asks).
pub(super) fn take() -> Option<GateLink> {
    let runs = UNOFFERED.try_with(Cell::get).unwrap_or_default();
    OFFERED
        .try_with(|cell| {
            let mut offer = cell.take();
            let offered = offer.as_mut().filter(|offer| offer.hides == runs.hides);
            let link = offered.map(|offer| {
                let made = || GateLink::new(offer.bounds, offer.body.take());
                offer.link.get_or_insert_with(made).clone()
            });
            // No offer out, or one a nearer run without an offer hides: the
            // innermost such run, if one is under way, hears that a gate is
            // below it.
            if link.is_none() {
                let asked = Unoffered {
                    asked: true,
                    ..runs
                };
                let _ = UNOFFERED.try_with(|cell| cell.set(asked));
            }
            cell.set(offer);
            link
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
    fn a_run_without_an_offer_hears_a_gate_that_asked_there_and_nowhere_else() {
        let ((), asked) = unoffered(|| ());
        assert!(!asked, "no gate asked");
        let ((), asked) = unoffered(|| assert!(take().is_none(), "nothing offered"));
        assert!(asked);
        // Nested runs: what asks belongs to the nearest.
        let (inner, outer) = unoffered(|| {
            let ((), inner) = unoffered(|| {
                let _ = take();
            });
            let ((), after) = unoffered(|| ());
            assert!(!after, "a later run starts afresh");
            inner
        });
        assert!(
            inner && !outer,
            "the outer run does not hear the inner's gate"
        );
        // What an outer run heard before an inner one began, it keeps.
        let ((), outer) = unoffered(|| {
            let _ = take();
            let ((), inner) = unoffered(|| ());
            assert!(!inner, "the inner run heard nothing");
        });
        assert!(outer, "the outer run's own gate");
        // A gate that takes a nearer loop's offer is that loop's: the run
        // outside it hears nothing.
        let ((), asked) = unoffered(|| {
            offering(&mut None, &mut None, bounds(), || {
                assert!(take().is_some(), "the nearer loop's offer");
            });
        });
        assert!(!asked);
        let ((), asked) = unoffered(|| ());
        assert!(!asked, "nothing outlives a run");
    }

    #[test]
    fn a_run_without_an_offer_hides_an_outer_loop_s_until_it_ends() {
        let mut outer = None;
        offering(&mut outer, &mut None, bounds(), || {
            let first = take().expect("offered");
            let ((), asked) = unoffered(|| assert!(take().is_none(), "hidden"));
            assert!(asked);
            assert!(first.same(&take().expect("back after the run")));
            let unwound = std::panic::catch_unwind(|| {
                unoffered(|| panic!("the inner service panicked"));
            });
            assert!(unwound.is_err());
            assert!(first.same(&take().expect("back after an unwinding run")));
        });
        assert!(take().is_none());
    }

    #[test]
    fn a_call_that_meets_no_gate_makes_no_link() {
        let mut link = None;
        offering(&mut link, &mut None, bounds(), || ());
        assert!(link.is_none());
    }
}
