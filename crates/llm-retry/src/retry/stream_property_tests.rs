//! Property: through `RetryLayer` over `StreamGuardLayer`, whatever streams
//! the upstream sends (any chunking, an error event or a cut anywhere), the
//! caller's bytes are one attempt's bytes: the last attempt's, a prefix of
//! what it delivered, or all of it when the body ends cleanly; and no
//! attempt that delivered content is ever followed by another.
#![allow(clippy::unwrap_used)]

use super::service_tests::request;
use crate::stream_guard::StreamGuardLayer;
use crate::{BoxError, RetryLayer, RetryPolicy};
use bytes::Bytes;
use http::Response;
use http_body::Frame;
use http_body_util::{BodyExt, StreamBody};
use proptest::prelude::*;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use tower::{Layer, ServiceExt};

/// What an event decides for the stream guard.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Decides {
    /// Nothing: it is held, and the guard reads on.
    Nothing,
    /// Content: the guard releases the stream.
    Content,
    /// An error before content: the attempt fails, unreleased.
    Error,
}

/// One event of a stream, and what it decides.
fn event() -> impl Strategy<Value = (String, Decides)> {
    prop_oneof![
        Just((
            "event: ping\ndata: {\"type\":\"ping\"}\n\n".to_owned(),
            Decides::Nothing
        )),
        Just((
            "event: message_start\ndata: {\"type\":\"message_start\"}\n\n".to_owned(),
            Decides::Nothing
        )),
        "[a-z ]{0,12}".prop_map(|text| (
            format!(
                "event: content_block_delta\ndata: {{\"type\":\"content_block_delta\",\"delta\":{{\"type\":\"text_delta\",\"text\":\"{text}\"}}}}\n\n"
            ),
            Decides::Content
        )),
        Just((
            "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n".to_owned(),
            Decides::Error
        )),
    ]
}

/// One attempt's answer: its events, how its bytes are chunked, and where
/// (if anywhere) the connection is cut.
#[derive(Debug, Clone)]
struct Attempt {
    bytes: Bytes,
    /// Where the first event that decides ends, and what it decides.
    decisive: Option<(usize, Decides)>,
    cuts: Vec<usize>,
    cut_at: Option<usize>,
}

impl Attempt {
    /// What the client receives of it before it ends or is cut.
    fn delivered(&self) -> &[u8] {
        &self.bytes[..self.cut_at.unwrap_or(self.bytes.len())]
    }

    /// Whether its first deciding event, content, reached the client: the
    /// guard then released the stream, and the attempt must never be
    /// replayed.
    fn released(&self) -> bool {
        self.decisive.is_some_and(|(end, decides)| {
            decides == Decides::Content && end <= self.delivered().len()
        })
    }

    fn chunks(&self) -> Vec<Result<Frame<Bytes>, BoxError>> {
        let delivered = self.delivered();
        let mut points: Vec<usize> = self
            .cuts
            .iter()
            .map(|c| c % (delivered.len() + 1))
            .collect();
        points.extend([0, delivered.len()]);
        points.sort_unstable();
        points.dedup();
        let mut chunks: Vec<Result<Frame<Bytes>, BoxError>> = points
            .windows(2)
            .map(|w| Ok(Frame::data(self.bytes.slice(w[0]..w[1]))))
            .collect();
        if self.cut_at.is_some() {
            chunks.push(Err(std::io::Error::from(
                std::io::ErrorKind::ConnectionReset,
            )
            .into()));
        }
        chunks
    }
}

fn attempt() -> impl Strategy<Value = Attempt> {
    (
        proptest::collection::vec(event(), 0..6),
        proptest::collection::vec(any::<usize>(), 0..6),
        proptest::option::of(any::<usize>()),
    )
        .prop_map(|(events, cuts, cut)| {
            let mut text = String::new();
            let mut decisive = None;
            for (event, decides) in events {
                text.push_str(&event);
                if decides != Decides::Nothing && decisive.is_none() {
                    decisive = Some((text.len(), decides));
                }
            }
            let bytes = Bytes::from(text);
            let cut_at = cut.map(|c| c % (bytes.len() + 1));
            Attempt {
                bytes,
                decisive,
                cuts,
                cut_at,
            }
        })
}

/// A stream with content and nothing wrong: what the upstream answers once
/// the scripted attempts are spent.
fn clean() -> Attempt {
    let text = "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"delta\":{\"type\":\"text_delta\",\"text\":\"ok\"}}\n\n";
    Attempt {
        bytes: Bytes::from_static(text.as_bytes()),
        decisive: Some((text.len(), Decides::Content)),
        cuts: Vec::new(),
        cut_at: None,
    }
}

type Chunks = Vec<Result<Frame<Bytes>, BoxError>>;
type ChunkBody =
    StreamBody<futures_util::stream::Iter<std::vec::IntoIter<Result<Frame<Bytes>, BoxError>>>>;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn the_callers_bytes_are_one_attempts_bytes(script in proptest::collection::vec(attempt(), 1..5)) {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .unwrap();
        let queue = Arc::new(Mutex::new(VecDeque::from(script)));
        let sent: Arc<Mutex<Vec<Attempt>>> = Arc::default();
        let upstream = {
            let (queue, sent) = (queue.clone(), sent.clone());
            tower::service_fn(move |_: http::Request<_>| {
                let next = queue.lock().unwrap().pop_front().unwrap_or_else(clean);
                sent.lock().unwrap().push(next.clone());
                let chunks: Chunks = next.chunks();
                async move {
                    Ok::<_, BoxError>(
                        Response::builder()
                            .header("content-type", "text/event-stream")
                            .body::<ChunkBody>(StreamBody::new(futures_util::stream::iter(chunks)))
                            .unwrap(),
                    )
                }
            })
        };
        let policy = RetryPolicy::builder().max_retries(8).no_budget().build().unwrap();
        let svc = RetryLayer::new(policy).layer(StreamGuardLayer::new().layer(upstream));
        let got = runtime.block_on(async {
            match svc.oneshot(request()).await {
                Err(_) => None,
                Ok(response) => {
                    let mut body = std::pin::pin!(response.into_body());
                    let mut bytes = Vec::new();
                    let mut clean_end = true;
                    while let Some(frame) = body.frame().await {
                        match frame {
                            Ok(frame) => bytes.extend_from_slice(frame.data_ref().map_or(&[][..], |d| d)),
                            Err(_) => {
                                clean_end = false;
                                break;
                            }
                        }
                    }
                    Some((bytes, clean_end))
                }
            }
        });
        let sent = sent.lock().unwrap();
        let (last, earlier) = sent.split_last().unwrap();
        for attempt in earlier {
            prop_assert!(!attempt.released(), "an attempt that delivered content was followed by another: {attempt:?}");
        }
        if let Some((bytes, clean_end)) = got {
            prop_assert!(last.delivered().starts_with(&bytes), "bytes the last attempt did not deliver: {bytes:?} of {last:?}");
            if clean_end {
                prop_assert_eq!(&bytes[..], last.delivered());
                prop_assert!(last.cut_at.is_none());
            }
        }
    }
}
