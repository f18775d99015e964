//! The buffer every clone of one [`ReplayBody`](super::ReplayBody) reads from.

use bytes::Bytes;
use http::HeaderMap;
use http_body::Frame;
use std::pin::Pin;
use std::task::Waker;

/// Where the inner body stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Source {
    /// More frames may come from the inner body.
    Streaming,
    /// The inner body ended; every chunk is known.
    Done,
    /// The inner body failed; nothing more will come.
    Failed,
}

/// State shared by all clones.
///
/// Chunk `i` of the body (counting from the start) lives at
/// `chunks[i - discarded]`; chunks below `discarded` were dropped when the
/// cap was crossed.
pub(super) struct Shared<B> {
    pub(super) inner: Option<Pin<Box<B>>>,
    pub(super) source: Source,
    pub(super) chunks: Vec<Bytes>,
    pub(super) discarded: usize,
    pub(super) buffered_bytes: usize,
    pub(super) cap: usize,
    pub(super) capped: bool,
    pub(super) trailers: Option<HeaderMap>,
    /// Clones waiting at the live edge, woken when any clone pulls a frame.
    pub(super) parked: Vec<Waker>,
    /// The source's error when it failed before any send read it (a body
    /// looked at before its first send): the first reader gets it.
    pub(super) unread_failure: Option<crate::BoxError>,
}

impl<B> Shared<B> {
    pub(super) fn new(inner: B, cap: usize) -> Shared<B> {
        Shared {
            inner: Some(Box::pin(inner)),
            source: Source::Streaming,
            chunks: Vec::new(),
            discarded: 0,
            buffered_bytes: 0,
            cap,
            capped: false,
            trailers: None,
            parked: Vec::new(),
            unread_failure: None,
        }
    }

    /// Remembers a waker of a clone waiting for the source.
    pub(super) fn park(&mut self, waker: &Waker) {
        if !self.parked.iter().any(|w| w.will_wake(waker)) {
            self.parked.push(waker.clone());
        }
    }

    /// Wakes every parked clone: the source moved on.
    pub(super) fn wake_parked(&mut self) {
        for waker in self.parked.drain(..) {
            waker.wake();
        }
    }

    /// A finished source holding exactly `bytes`.
    pub(super) fn done(bytes: Bytes, cap: usize) -> Shared<B> {
        Shared {
            inner: None,
            source: Source::Done,
            buffered_bytes: bytes.len(),
            chunks: vec![bytes],
            discarded: 0,
            cap,
            capped: false,
            trailers: None,
            parked: Vec::new(),
            unread_failure: None,
        }
    }

    /// The whole body, when every chunk is known and kept.
    pub(super) fn whole(&self) -> Option<Bytes> {
        if self.source != Source::Done || self.capped {
            return None;
        }
        match self.chunks.as_slice() {
            [] => Some(Bytes::new()),
            [one] => Some(one.clone()),
            many => {
                let mut all = bytes::BytesMut::with_capacity(self.buffered_bytes);
                for chunk in many {
                    all.extend_from_slice(chunk);
                }
                Some(all.freeze())
            }
        }
    }

    /// Total chunks seen so far, dropped ones included.
    pub(super) fn seen(&self) -> usize {
        self.discarded + self.chunks.len()
    }

    /// Whether the source failed while it was read.
    pub(super) fn failed(&self) -> bool {
        self.source == Source::Failed
    }

    /// Records what the source just produced, for every clone: its end, its
    /// failure, a chunk kept for replay, its trailers. `ended`: the source
    /// reported its end with it (clients stop polling once a body does, so
    /// the end is recorded here, not only on `None`). Returns the frame for
    /// the clone that pulled it.
    pub(super) fn record<E>(
        &mut self,
        frame: Option<Result<Frame<Bytes>, E>>,
        ended: bool,
    ) -> Option<Result<Frame<Bytes>, E>> {
        let frame = match frame {
            None => {
                self.source = Source::Done;
                self.inner = None;
                return None;
            }
            Some(Err(e)) => {
                self.source = Source::Failed;
                self.inner = None;
                return Some(Err(e));
            }
            Some(Ok(frame)) => frame,
        };
        match frame.into_data() {
            Ok(chunk) => {
                self.keep(&chunk, ended);
                if ended {
                    self.source = Source::Done;
                    self.inner = None;
                }
                Some(Ok(Frame::data(chunk)))
            }
            Err(frame) => {
                if let Some(trailers) = frame.trailers_ref() {
                    self.trailers = Some(trailers.clone());
                }
                Some(Ok(frame))
            }
        }
    }

    /// Whether a fresh clone could still yield the whole body.
    pub(super) fn replayable(&self) -> bool {
        !self.capped && self.source != Source::Failed
    }

    /// Keeps a chunk the inner body just produced, or crosses the cap.
    ///
    /// `whole` says the chunk is the entire body (its first chunk, after
    /// which the source reported its end): a body that was already
    /// buffered, held for replay by a reference count, not a copy, so the
    /// cap (which bounds what streaming would make us hold) does not apply.
    pub(super) fn keep(&mut self, chunk: &Bytes, whole: bool) {
        if self.capped {
            self.discarded += 1;
            return;
        }
        let over = self.buffered_bytes.saturating_add(chunk.len()) > self.cap;
        if over && !(whole && self.seen() == 0) {
            self.capped = true;
            self.discarded = self.seen() + 1;
            self.chunks = Vec::new();
            self.buffered_bytes = 0;
            return;
        }
        self.buffered_bytes += chunk.len();
        self.chunks.push(chunk.clone());
    }

    /// Bytes kept from chunk `from` on.
    pub(super) fn kept_bytes_from(&self, from: usize) -> u64 {
        let start = from.saturating_sub(self.discarded);
        self.chunks
            .get(start..)
            .map_or(0, |rest| rest.iter().map(|c| c.len() as u64).sum())
    }
}
