//! Reading the start of a failed response's body, bounded in size.

use bytes::{Bytes, BytesMut};
use http::HeaderMap;
use http_body::Body;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

/// How a peek ended.
pub(super) enum PeekEnd<E> {
    /// The body ended; everything is in the buffer.
    Complete,
    /// The buffer reached its limit; the body may have more.
    Full,
    /// The body failed.
    Failed(E),
}

/// Bytes read so far from a failed response.
#[derive(Debug, Default)]
pub(super) struct Peeked {
    pub(super) bytes: BytesMut,
    pub(super) trailers: Option<HeaderMap>,
}

impl Peeked {
    /// Reads frames until the body ends, fails, or `limit` bytes are held.
    /// Holds at most `limit` plus one chunk.
    pub(super) fn poll_fill<B>(
        &mut self,
        mut body: Pin<&mut B>,
        limit: usize,
        cx: &mut Context<'_>,
    ) -> Poll<PeekEnd<B::Error>>
    where
        B: Body<Data = Bytes>,
    {
        while self.bytes.len() < limit {
            match ready!(body.as_mut().poll_frame(cx)) {
                None => return Poll::Ready(PeekEnd::Complete),
                Some(Err(e)) => return Poll::Ready(PeekEnd::Failed(e)),
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(data) => self.bytes.extend_from_slice(&data),
                    Err(frame) => {
                        if let Ok(trailers) = frame.into_trailers() {
                            self.trailers = Some(trailers);
                        }
                    }
                },
            }
        }
        Poll::Ready(PeekEnd::Full)
    }

    /// The bytes a classifier may read.
    pub(super) fn window(&self, limit: usize) -> &[u8] {
        &self.bytes[..self.bytes.len().min(limit)]
    }
}
