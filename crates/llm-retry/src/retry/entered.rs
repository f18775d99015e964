//! Entering a request's span for one poll without cloning it.
//!
//! `span.clone().entered()` costs the subscriber a `clone_span` and a
//! `try_close` on every poll; borrowing the span (`Span::enter`) is not
//! possible while the poll also needs the account mutably. The guard here
//! enters through the span's dispatcher and keeps that dispatcher and the
//! span's id instead: the subscriber sees the same enter and exit, and no
//! reference count moves.

use tracing::span::Id;
use tracing::{Dispatch, Span};

/// Exits the span it entered when dropped.
pub(super) struct EnteredById(Option<(Dispatch, Id)>);

impl EnteredById {
    /// Enters `span` (nothing for a disabled span) until the guard drops.
    pub(super) fn enter(span: &Span) -> EnteredById {
        EnteredById(span.with_subscriber(|(id, dispatch)| {
            dispatch.enter(id);
            (dispatch.clone(), id.clone())
        }))
    }
}

impl Drop for EnteredById {
    fn drop(&mut self) {
        if let Some((dispatch, id)) = &self.0 {
            dispatch.exit(id);
        }
    }
}
