//! How a request really ended, counted and logged once: whether its
//! answer's body reached the client whole, and if not, why.

use crate::counts::RequestCounts;
use bytes::Bytes;
use http::StatusCode;
use http_body::{Body, Frame, SizeHint};
use llm_retry::BoxError;
use pin_project_lite::pin_project;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

/// How a request ended (a fixed vocabulary: the `ending` label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ending {
    /// The whole answer reached the client.
    Complete,
    /// The upstream cut an event stream after its content began.
    UpstreamCut,
    /// The upstream cut a body that is not a stream (a JSON answer) short.
    Truncated,
    /// The client went away before the answer ended (or before it began).
    ClientGone,
    /// The upstream sent nothing for the stream idle timeout.
    TimedOut,
}

impl Ending {
    /// Every ending, in label order.
    pub(crate) const ALL: [Ending; 5] = [
        Ending::Complete,
        Ending::UpstreamCut,
        Ending::Truncated,
        Ending::ClientGone,
        Ending::TimedOut,
    ];

    /// The metrics label.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Ending::Complete => "complete",
            Ending::UpstreamCut => "upstream_cut",
            Ending::Truncated => "truncated",
            Ending::ClientGone => "client_gone",
            Ending::TimedOut => "timed_out",
        }
    }

    /// The ending a body error means, for an answer that `is_stream` or not.
    fn of_error(error: &BoxError, is_stream: bool) -> Ending {
        if error.is::<crate::idle::Stalled>() {
            Ending::TimedOut
        } else if is_stream {
            Ending::UpstreamCut
        } else {
            Ending::Truncated
        }
    }
}

/// Who to tell how a request ended: its route's counter, the answer's
/// status, the target that answered.
#[derive(Debug)]
pub(crate) struct Ended {
    pub(crate) counts: Arc<RequestCounts>,
    /// `None` when no answer began.
    pub(crate) status: Option<StatusCode>,
    /// The target that answered; `None` when the gateway answered itself
    /// (logged as `none`).
    pub(crate) target: Option<Arc<str>>,
}

impl Ended {
    /// Counts the ending, and logs one that is not complete.
    pub(crate) fn tell(self, ending: Ending) {
        self.counts.count(self.status, ending);
        if ending != Ending::Complete {
            tracing::warn!(
                route = self.counts.route(),
                target = self.target.as_deref().unwrap_or("none"),
                status = self.status.map(|s| s.as_u16()),
                ending = ending.label(),
                "request ended without its whole answer"
            );
        }
    }
}

pin_project! {
    /// An answer's body that tells how it ended, once: at its end, at an
    /// error, or when it is dropped before either.
    pub(crate) struct EndingBody<B> {
        #[pin]
        inner: B,
        ended: Option<Ended>,
        is_stream: bool,
        // Ended before it began (an empty body): a server need not poll it.
        empty: bool,
    }

    impl<B> PinnedDrop for EndingBody<B> {
        fn drop(this: Pin<&mut Self>) {
            let this = this.project();
            if let Some(ended) = this.ended.take() {
                // An empty body the server never polled is whole.
                let ending = if *this.empty {
                    Ending::Complete
                } else {
                    Ending::ClientGone
                };
                ended.tell(ending);
            }
        }
    }
}

impl<B: Body> EndingBody<B> {
    pub(crate) fn new(inner: B, ended: Ended, is_stream: bool) -> EndingBody<B> {
        EndingBody {
            empty: inner.is_end_stream(),
            inner,
            ended: Some(ended),
            is_stream,
        }
    }
}

impl<B> Body for EndingBody<B>
where
    B: Body<Data = Bytes, Error = BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let mut this = self.project();
        let frame = this.inner.as_mut().poll_frame(cx);
        let ending = match &frame {
            Poll::Ready(None) => Some(Ending::Complete),
            Poll::Ready(Some(Err(error))) => Some(Ending::of_error(error, *this.is_stream)),
            Poll::Ready(Some(Ok(_))) if this.inner.is_end_stream() => Some(Ending::Complete),
            _ => None,
        };
        if let Some(ending) = ending {
            if let Some(ended) = this.ended.take() {
                ended.tell(ending);
            }
        }
        frame
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::Ending;

    #[test]
    fn every_ending_is_listed_at_its_own_place() {
        for (place, ending) in Ending::ALL.iter().enumerate() {
            assert_eq!(*ending as usize, place, "{}", ending.label());
        }
    }
}
