//! The replayable body wrapper.

use super::shared::{Shared, Source};
use crate::error::BoxError;
use crate::size_hint::held_then;
use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use std::fmt;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};

/// A request body that can be sent more than once. See the [module docs](crate::replay).
pub struct ReplayBody<B> {
    shared: Arc<Mutex<Shared<B>>>,
    /// Index of the next chunk this clone yields.
    next: usize,
    trailers_yielded: bool,
}

/// Why a [`ReplayBody`] clone could not produce the body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub(crate) enum ReplayError {
    /// The body grew past the replay cap, so its start is gone.
    TooLarge {
        /// The cap in bytes.
        cap: usize,
    },
    /// An earlier send's body failed; the rest of the body is unknown.
    SourceFailed,
}

impl fmt::Display for ReplayError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReplayError::TooLarge { cap } => {
                write!(f, "request body exceeds the {cap}-byte replay buffer")
            }
            ReplayError::SourceFailed => f.write_str("request body failed during an earlier send"),
        }
    }
}

impl std::error::Error for ReplayError {}

impl<B> ReplayBody<B> {
    /// Wraps `body`, keeping at most `cap` bytes for replays.
    pub fn new(body: B, cap: usize) -> ReplayBody<B> {
        ReplayBody {
            shared: Arc::new(Mutex::new(Shared::new(body, cap))),
            next: 0,
            trailers_yielded: false,
        }
    }

    /// A clone that yields the body from its first byte, or `None` when the
    /// body can no longer be replayed (past the cap, or the source failed).
    pub fn try_clone(&self) -> Option<ReplayBody<B>> {
        if !lock(&self.shared).replayable() {
            return None;
        }
        Some(ReplayBody {
            shared: Arc::clone(&self.shared),
            next: 0,
            trailers_yielded: false,
        })
    }

    /// A clone from the first byte, whether or not it can still be replayed
    /// (reading a clone that cannot fails with a replay error).
    pub(crate) fn replica(&self) -> ReplayBody<B> {
        ReplayBody {
            shared: Arc::clone(&self.shared),
            next: 0,
            trailers_yielded: false,
        }
    }

    /// The whole body, when the source has ended and every byte was kept.
    pub fn buffered(&self) -> Option<Bytes> {
        lock(&self.shared).whole()
    }

    /// Reads what the source has ready now, without waiting, when nothing
    /// was read yet and its exact size fits the cap: a buffered body
    /// (`Full`, `Bytes`) is then known before its first send, and that send
    /// replays it from here at no cost. Returns the whole body if that was
    /// all of it. A source that is not ready is left as it was; the first
    /// send reads it as usual.
    pub(crate) fn fill_ready(&self) -> Option<Bytes>
    where
        B: Body<Data = Bytes>,
        B::Error: Into<BoxError>,
    {
        let mut shared = lock(&self.shared);
        let cap = shared.cap;
        let fits = |inner: &Pin<Box<B>>| inner.size_hint().exact().is_some_and(|n| n <= cap as u64);
        if shared.source != Source::Streaming || shared.seen() > 0 {
            return shared.whole();
        }
        // The first send's own poll registers its waker if the source was
        // not ready.
        let waker = crate::noop_waker::noop_waker();
        let mut cx = Context::from_waker(&waker);
        while let Some(inner) = shared.inner.as_mut().filter(|inner| fits(inner)) {
            let polled = inner.as_mut().poll_frame(&mut cx);
            let ended = inner.is_end_stream();
            let Poll::Ready(frame) = polled else { break };
            // A failure is every clone's as the source's
            // (`RequestBodyFailed`); the first send reads the error itself.
            if let Some(Err(error)) = shared.record(frame, ended) {
                shared.unread_failure = Some(error.into());
            }
        }
        shared.whole()
    }

    /// A body of exactly `bytes`, with the same cap, sharing nothing with
    /// `self`: the next attempts send the rewritten body while an earlier
    /// attempt still reading the old one is unaffected.
    pub(crate) fn replaced_with(&self, bytes: Bytes) -> ReplayBody<B> {
        let cap = self.cap();
        ReplayBody {
            shared: Arc::new(Mutex::new(Shared::done(bytes, cap))),
            next: 0,
            trailers_yielded: false,
        }
    }

    /// Whether the caller's body failed while it was sent.
    pub(crate) fn source_failed(&self) -> bool {
        lock(&self.shared).failed()
    }

    /// Whether the body has grown past its replay cap.
    pub fn is_capped(&self) -> bool {
        lock(&self.shared).capped
    }

    /// The replay cap in bytes.
    pub fn cap(&self) -> usize {
        lock(&self.shared).cap
    }
}

impl<B> fmt::Debug for ReplayBody<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let shared = lock(&self.shared);
        f.debug_struct("ReplayBody")
            .field("next", &self.next)
            .field("buffered_bytes", &shared.buffered_bytes)
            .field("capped", &shared.capped)
            .finish()
    }
}

/// A clone at the source's end: the trailers once, if any came, then the
/// end. `trailers_yielded` is the clone's own.
fn end<B>(
    trailers_yielded: &mut bool,
    shared: &Shared<B>,
) -> Option<Result<Frame<Bytes>, BoxError>> {
    if std::mem::replace(trailers_yielded, true) {
        return None;
    }
    shared.trailers.clone().map(|t| Ok(Frame::trailers(t)))
}

/// Locks the shared state; a poisoned lock still holds consistent data
/// because no method panics while holding it.
fn lock<B>(shared: &Mutex<Shared<B>>) -> MutexGuard<'_, Shared<B>> {
    shared
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl<B> Body for ReplayBody<B>
where
    B: Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        let mut shared = lock(&this.shared);

        if this.next < shared.discarded {
            let cap = shared.cap;
            return Poll::Ready(Some(Err(ReplayError::TooLarge { cap }.into())));
        }
        if let Some(chunk) = shared.chunks.get(this.next - shared.discarded) {
            let chunk = chunk.clone();
            this.next += 1;
            return Poll::Ready(Some(Ok(Frame::data(chunk))));
        }
        match shared.source {
            Source::Done => return Poll::Ready(end(&mut this.trailers_yielded, &shared)),
            Source::Failed => {
                let error = shared
                    .unread_failure
                    .take()
                    .unwrap_or_else(|| ReplayError::SourceFailed.into());
                return Poll::Ready(Some(Err(error)));
            }
            Source::Streaming => {}
        }

        // This clone is at the live edge: pull the next frame from the source.
        let Some(inner) = shared.inner.as_mut() else {
            return Poll::Ready(Some(Err(ReplayError::SourceFailed.into())));
        };
        let polled = inner.as_mut().poll_frame(cx);
        let ended = inner.is_end_stream();
        let Poll::Ready(frame) = polled else {
            // The source keeps only the last waker it was given; park this
            // clone's too, so whichever clone pulls next wakes the others.
            shared.park(cx.waker());
            return Poll::Pending;
        };
        shared.wake_parked();
        let frame = shared.record(frame, ended);
        match &frame {
            // The source's end, reached here: as at an end reached before
            // (another clone may have pulled the trailers).
            None => return Poll::Ready(end(&mut this.trailers_yielded, &shared)),
            Some(Ok(frame)) if frame.is_data() => this.next = shared.seen(),
            Some(Ok(frame)) if frame.is_trailers() => this.trailers_yielded = true,
            Some(_) => {}
        }
        Poll::Ready(frame.map(|frame| frame.map_err(Into::into)))
    }

    fn is_end_stream(&self) -> bool {
        let shared = lock(&self.shared);
        if self.next < shared.seen() {
            return false;
        }
        // No trailers left for this clone: none came, or it yielded them.
        let trailers_done = self.trailers_yielded || shared.trailers.is_none();
        match shared.source {
            Source::Done => trailers_done,
            Source::Failed => false,
            Source::Streaming => {
                trailers_done && shared.inner.as_ref().is_some_and(|b| b.is_end_stream())
            }
        }
    }

    fn size_hint(&self) -> SizeHint {
        let shared = lock(&self.shared);
        if self.next < shared.discarded {
            return SizeHint::default();
        }
        let kept = shared.kept_bytes_from(self.next);
        match (shared.source, shared.inner.as_ref()) {
            (Source::Streaming, Some(inner)) => held_then(kept, Some(inner.size_hint())),
            _ => held_then(kept, None),
        }
    }
}

#[cfg(test)]
#[path = "body_tests.rs"]
mod tests;
