//! Holding a stream back until its first content event.

use super::error::{PreContentError, PreContentReason};
use super::layer::GuardConfig;
use crate::classify::{classify_error, Classification, RetryableKind};
use crate::error::BoxError;
use crate::sse::{EventKind, SseDecoder};
use bytes::Bytes;
use http::HeaderMap;
use http_body::Body;
use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::time::Sleep;

/// What the hold decided.
pub(super) enum Verdict {
    /// Release the held bytes and stream on: the attempt commits.
    Release,
    /// Fail the attempt before anything reached the caller.
    Fail(PreContentError),
}

/// The bytes held so far and the parser reading them.
pub(super) struct Hold<B> {
    pub(super) body: Pin<Box<B>>,
    pub(super) held: VecDeque<Bytes>,
    pub(super) trailers: Option<HeaderMap>,
    held_bytes: usize,
    decoder: SseDecoder,
    timer: Pin<Box<Sleep>>,
    /// An event other than a ping was read: the provider began its answer.
    begun: bool,
}

impl<B> Hold<B>
where
    B: Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    pub(super) fn new(body: B, config: &GuardConfig) -> Hold<B> {
        Hold {
            body: Box::pin(body),
            held: VecDeque::new(),
            trailers: None,
            held_bytes: 0,
            decoder: SseDecoder::new(config.prefix_limit),
            timer: Box::pin(tokio::time::sleep(config.first_event_timeout)),
            begun: false,
        }
    }

    /// Reads until the first decisive event, the prefix cap, the time limit
    /// or the end of the body.
    pub(super) fn poll_verdict(
        &mut self,
        config: &GuardConfig,
        cx: &mut Context<'_>,
    ) -> Poll<Verdict> {
        loop {
            let frame = match self.body.as_mut().poll_frame(cx) {
                Poll::Ready(frame) => frame,
                Poll::Pending => {
                    // Waited long enough for content: stop guarding.
                    return match self.timer.as_mut().poll(cx) {
                        Poll::Ready(()) => Poll::Ready(Verdict::Release),
                        Poll::Pending => Poll::Pending,
                    };
                }
            };
            match frame {
                None => return Poll::Ready(ended_before_content()),
                Some(Err(error)) => {
                    let error: BoxError = error.into();
                    let class = classify_error(&*error);
                    let reason = PreContentReason::BodyFailed;
                    return Poll::Ready(Verdict::Fail(PreContentError::new(
                        class,
                        None,
                        reason,
                        Some(error),
                    )));
                }
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(chunk) => {
                        if let Some(verdict) = self.take(chunk, config) {
                            return Poll::Ready(verdict);
                        }
                    }
                    Err(frame) => {
                        // Trailers end the body; nothing came before them.
                        self.trailers = frame.into_trailers().ok();
                        return Poll::Ready(ended_before_content());
                    }
                },
            }
        }
    }

    /// Holds a chunk and reads the events it completes.
    fn take(&mut self, chunk: Bytes, config: &GuardConfig) -> Option<Verdict> {
        self.held_bytes = self.held_bytes.saturating_add(chunk.len());
        let fed = self.decoder.feed(&chunk);
        self.held.push_back(chunk);
        while let Some(event) = self.decoder.next_event() {
            match config.rules.classify(&event) {
                EventKind::Content => return Some(Verdict::Release),
                EventKind::NonContent => {
                    self.begun |= event.event.as_deref() != Some("ping");
                }
                EventKind::Done => return Some(ended_before_content()),
                EventKind::Error { class, provider } => {
                    let reason = PreContentReason::ErrorEvent;
                    return Some(Verdict::Fail(
                        PreContentError::new(class, provider, reason, None).after_begin(self.begun),
                    ));
                }
            }
        }
        // Past the cap nothing more can be held: release what is here.
        (fed.is_err() || self.held_bytes >= config.prefix_limit).then_some(Verdict::Release)
    }
}

fn ended_before_content() -> Verdict {
    Verdict::Fail(PreContentError::new(
        Classification::Retryable(RetryableKind::Reset),
        None,
        PreContentReason::EndedBeforeContent,
        None,
    ))
}
