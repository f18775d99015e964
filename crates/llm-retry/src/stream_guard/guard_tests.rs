//! The guard on in-process bodies: exact bytes for any chunking, exact
//! commit accounting, callbacks once.
#![allow(clippy::unwrap_used)]

use super::*;
use crate::error::BoxError;
use bytes::Bytes;
use http::{Request, Response};
use http_body::Frame;
use http_body_util::{BodyExt, StreamBody};
use proptest::prelude::*;
use std::convert::Infallible;
use tower::{Layer, ServiceExt};

type Chunks = Vec<Result<Frame<Bytes>, BoxError>>;

type ChunkBody =
    StreamBody<futures_util::stream::Iter<std::vec::IntoIter<Result<Frame<Bytes>, BoxError>>>>;

fn sse_response(chunks: Chunks) -> Response<ChunkBody> {
    Response::builder()
        .header("content-type", "text/event-stream; charset=utf-8")
        .body(StreamBody::new(futures_util::stream::iter(chunks)))
        .unwrap()
}

async fn guard(
    chunks: Chunks,
) -> Result<Response<GuardedBody<impl http_body::Body<Data = Bytes, Error = BoxError>>>, BoxError> {
    guard_with(StreamGuardLayer::new(), chunks).await
}

/// `chunks` as an event stream through `layer`.
async fn guard_with(
    layer: StreamGuardLayer,
    chunks: Chunks,
) -> Result<Response<GuardedBody<impl http_body::Body<Data = Bytes, Error = BoxError>>>, BoxError> {
    let upstream = tower::service_fn(move |_: Request<()>| {
        let chunks = chunks.clone_chunks();
        async move { Ok::<_, Infallible>(sse_response(chunks)) }
    });
    layer.layer(upstream).oneshot(Request::new(())).await
}

trait CloneChunks {
    fn clone_chunks(&self) -> Chunks;
}

impl CloneChunks for Chunks {
    fn clone_chunks(&self) -> Chunks {
        self.iter()
            .map(|c| match c {
                Ok(f) => Ok(Frame::data(f.data_ref().cloned().unwrap_or_default())),
                Err(e) => Err(e.to_string().into()),
            })
            .collect()
    }
}

fn split(bytes: &[u8], cuts: &[usize]) -> Chunks {
    let mut points: Vec<usize> = cuts.iter().map(|c| c % (bytes.len() + 1)).collect();
    points.push(0);
    points.push(bytes.len());
    points.sort_unstable();
    points.dedup();
    points
        .windows(2)
        .map(|w| Ok(Frame::data(Bytes::copy_from_slice(&bytes[w[0]..w[1]]))))
        .collect()
}

fn event() -> impl Strategy<Value = String> {
    let name = prop_oneof![
        Just(None),
        Just(Some("ping")),
        Just(Some("message_start")),
        Just(Some("content_block_delta")),
        Just(Some("message_stop")),
    ];
    let data = "[a-zA-Z0-9 {}\":,é🦀]{0,40}";
    let eol = prop_oneof![Just("\n"), Just("\r\n"), Just("\r")];
    (name, data, eol, any::<bool>()).prop_map(|(name, data, eol, comment)| {
        let mut out = String::new();
        if comment {
            out.push_str(": keep-alive");
            out.push_str(eol);
        }
        if let Some(name) = name {
            out.push_str(&format!("event: {name}{eol}"));
        }
        out.push_str(&format!("data: {data}{eol}{eol}"));
        out
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn any_chunking_of_a_content_stream_passes_through_byte_identical(
        events in proptest::collection::vec(event(), 0..12),
        cuts in proptest::collection::vec(any::<usize>(), 0..16),
    ) {
        // A content event up front guarantees the guard releases.
        let mut stream = String::from("event: content_block_delta\ndata: {\"delta\":\"hi\"}\n\n");
        stream.extend(events);
        let bytes = stream.into_bytes();
        let runtime = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
        let out = runtime.block_on(async {
            let res = guard(split(&bytes, &cuts)).await.unwrap();
            let commit = res.extensions().get::<StreamCommit>().cloned().unwrap();
            let out = res.into_body().collect().await.unwrap().to_bytes();
            (out, commit)
        });
        prop_assert_eq!(&out.0[..], &bytes[..]);
        prop_assert_eq!(out.1.bytes_forwarded(), bytes.len() as u64);
        prop_assert_eq!(out.1.end(), Some(StreamEnd::Completed));
    }
}

#[tokio::test]
async fn non_content_events_are_held_until_content() {
    let chunks: Chunks = vec![
        Ok(Frame::data(Bytes::from_static(
            b"event: ping\ndata: {}\n\n",
        ))),
        Ok(Frame::data(Bytes::from_static(b": comment\n\n"))),
        Ok(Frame::data(Bytes::from_static(
            b"event: content_block_delta\ndata: {\"t\":1}\n\n",
        ))),
    ];
    let res = guard(chunks).await.unwrap();
    let commit = res.extensions().get::<StreamCommit>().cloned().unwrap();
    assert!(!commit.is_committed(), "released but not yet read");
    let mut body = res.into_body();
    let first = body.frame().await.unwrap().unwrap().into_data().unwrap();
    assert_eq!(first, "event: ping\ndata: {}\n\n");
    assert!(commit.is_committed());
    drop(body);
    assert_eq!(commit.end(), Some(StreamEnd::Dropped));
}

#[tokio::test]
async fn an_error_after_release_is_an_interruption_with_the_count() {
    let chunks: Chunks = vec![
        Ok(Frame::data(Bytes::from_static(
            b"data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n",
        ))),
        Err("connection reset".into()),
    ];
    let res = guard(chunks).await.unwrap();
    let commit = res.extensions().get::<StreamCommit>().cloned().unwrap();
    let mut body = res.into_body();
    let first = body.frame().await.unwrap().unwrap().into_data().unwrap();
    let err = body.frame().await.unwrap().unwrap_err();
    let interrupted = err.downcast_ref::<StreamInterrupted>().unwrap();
    assert_eq!(interrupted.bytes_forwarded(), first.len() as u64);
    let said = format!(
        "stream interrupted after {} bytes reached the caller; not replayed",
        first.len()
    );
    assert_eq!(interrupted.to_string(), said);
    let cause = std::error::Error::source(interrupted).expect("the body's error");
    assert_eq!(cause.to_string(), "connection reset");
    assert_eq!(commit.end(), Some(StreamEnd::Interrupted));
    drop(body);
    assert_eq!(
        commit.end(),
        Some(StreamEnd::Interrupted),
        "the first end wins"
    );
}

#[tokio::test]
async fn errors_before_content_fail_the_attempt_with_a_classification() {
    let cases: [(&[u8], &str); 3] = [
        (b"event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n", "overloaded_error"),
        (b"event: ping\ndata: {}\n\n", "ended before any content"),
        (b"data: [DONE]\n\n", "ended before any content"),
    ];
    for (bytes, want) in cases {
        let err = guard(vec![Ok(Frame::data(Bytes::from_static(bytes)))])
            .await
            .unwrap_err();
        let err = err.downcast::<PreContentError>().unwrap();
        assert!(err.to_string().contains(want), "{err}");
        assert!(err.classification().is_retryable(), "{err}");
    }
}

#[tokio::test]
async fn the_prefix_cap_releases_a_stream_that_never_shows_content() {
    let ping = Bytes::from_static(b"event: ping\ndata: {}\n\n");
    let chunks: Chunks = (0..4000).map(|_| Ok(Frame::data(ping.clone()))).collect();
    let layer = StreamGuardLayer::new().prefix_limit(1024);
    let res = guard_with(layer, chunks).await.unwrap();
    let out = res.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(out.len(), ping.len() * 4000);
}

#[tokio::test(start_paused = true)]
async fn the_time_limit_releases_a_silent_stream() {
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Frame<Bytes>, BoxError>>(4);
    tx.send(Ok(Frame::data(Bytes::from_static(
        b"event: ping\ndata: {}\n\n",
    ))))
    .await
    .unwrap();
    let body = StreamBody::new(tokio_stream_from(rx));
    let response = Response::builder()
        .header("content-type", "text/event-stream")
        .body(body)
        .unwrap();
    let slot = std::sync::Mutex::new(Some(response));
    let upstream = tower::service_fn(move |_: Request<()>| {
        let response = slot.lock().unwrap().take().unwrap();
        async move { Ok::<_, Infallible>(response) }
    });
    let start = tokio::time::Instant::now();
    let svc = StreamGuardLayer::new()
        .first_event_timeout(std::time::Duration::from_secs(5))
        .layer(upstream);
    let res = svc.oneshot(Request::new(())).await.unwrap();
    assert_eq!(start.elapsed(), std::time::Duration::from_secs(5));
    drop(tx);
    let out = res.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(out, "event: ping\ndata: {}\n\n");
}

fn tokio_stream_from<T>(
    mut rx: tokio::sync::mpsc::Receiver<T>,
) -> impl futures_util::Stream<Item = T> {
    futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx))
}

#[tokio::test]
async fn non_streamed_responses_get_no_commit_handle() {
    let upstream = tower::service_fn(|_: Request<()>| async {
        Ok::<_, Infallible>(Response::new(http_body_util::Full::new(
            Bytes::from_static(b"{}"),
        )))
    });
    let res = StreamGuardLayer::new()
        .layer(upstream)
        .oneshot(Request::new(()))
        .await
        .unwrap();
    assert!(res.extensions().get::<StreamCommit>().is_none());
    assert_eq!(res.into_body().collect().await.unwrap().to_bytes(), "{}");
}

#[tokio::test]
async fn a_stream_read_to_its_last_frame_is_completed_even_if_never_polled_again() {
    let sse: &[u8] = b"event: content_block_delta\ndata: {\"t\":1}\n\n";
    let upstream = tower::service_fn(move |_: Request<()>| async move {
        let response = Response::builder()
            .header("content-type", "text/event-stream")
            .body(http_body_util::Full::new(Bytes::from_static(sse)))
            .unwrap();
        Ok::<_, Infallible>(response)
    });
    let res = StreamGuardLayer::new()
        .layer(upstream)
        .oneshot(Request::new(()))
        .await
        .unwrap();
    let commit = res.extensions().get::<StreamCommit>().cloned().unwrap();
    let mut body = res.into_body();
    let only = body.frame().await.unwrap().unwrap().into_data().unwrap();
    assert_eq!(only, sse);
    // The body says it has ended, so a client stops here and drops it.
    assert!(http_body::Body::is_end_stream(&body));
    drop(body);
    assert_eq!(commit.end(), Some(StreamEnd::Completed));
}

#[tokio::test]
async fn a_guarded_body_tells_its_kind_size_and_end_as_the_body_it_holds() {
    let sse: &[u8] = b"event: content_block_delta\ndata: {\"t\":1}\n\n";
    let upstream = tower::service_fn(move |request: Request<()>| async move {
        let stream = request.uri().path() == "/stream";
        let response = Response::builder()
            .header(
                "content-type",
                if stream {
                    "text/event-stream"
                } else {
                    "application/json"
                },
            )
            .body(http_body_util::Full::new(Bytes::from_static(sse)))
            .unwrap();
        Ok::<_, Infallible>(response)
    });
    let guard = StreamGuardLayer::new().layer(upstream);
    for (path, kind) in [("/stream", "guarded"), ("/json", "passthrough")] {
        let request = Request::get(path).body(()).unwrap();
        let mut body = guard.clone().oneshot(request).await.unwrap().into_body();
        assert!(format!("{body:?}").contains(kind), "{body:?}");
        assert_eq!(
            http_body::Body::size_hint(&body).exact(),
            Some(sse.len() as u64),
            "{path}"
        );
        assert!(
            !http_body::Body::is_end_stream(&body),
            "{path}: nothing read yet"
        );
        let data = body.frame().await.unwrap().unwrap().into_data().unwrap();
        assert_eq!(data, sse);
        assert!(http_body::Body::is_end_stream(&body), "{path}: all read");
    }
}

#[tokio::test]
async fn a_read_stream_may_not_be_replayed() {
    let chunks: Chunks = vec![Ok(Frame::data(Bytes::from_static(
        b"event: content_block_delta\ndata: {\"t\":1}\n\n",
    )))];
    let res = guard(chunks).await.unwrap();
    let commit = res.extensions().get::<StreamCommit>().cloned().unwrap();
    let mut body = res.into_body();
    assert!(!commit.is_committed(), "nothing read yet");
    body.frame().await.unwrap().unwrap();
    assert!(commit.is_committed(), "a byte reached the caller");
}

/// What a failure before content reports about itself, as the retry policy
/// reads it.
#[tokio::test]
async fn a_failure_before_content_reports_what_the_stream_showed() {
    use crate::classify::Reported;
    let overloaded = b"event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n";
    let begun = b"event: message_start\ndata: {\"type\":\"message_start\"}\n\n";
    for (chunks, after_begin) in [
        (vec![Ok(Frame::data(Bytes::from_static(overloaded)))], false),
        (
            vec![
                Ok(Frame::data(Bytes::from_static(begun))),
                Ok(Frame::data(Bytes::from_static(overloaded))),
            ],
            true,
        ),
    ] {
        let upstream = tower::service_fn(move |_: Request<()>| {
            let chunks = chunks.clone_chunks();
            async move {
                let mut response = sse_response(chunks);
                response.headers_mut().insert(
                    "set-cookie",
                    http::HeaderValue::from_static("session=secret"),
                );
                Ok::<_, Infallible>(response)
            }
        });
        let err = StreamGuardLayer::new()
            .layer(upstream)
            .oneshot(Request::new(()))
            .await
            .unwrap_err();
        let err = err.downcast::<PreContentError>().unwrap();
        assert_eq!(err.after_begin_of_answer(), after_begin);
        assert_eq!(Reported::may_have_executed(&*err), after_begin);
        let kind = |p: Option<&crate::classify::ProviderError>| p.and_then(|p| p.kind.clone());
        assert_eq!(
            kind(err.provider_error()).as_deref(),
            Some("overloaded_error")
        );
        assert_eq!(
            kind(Reported::provider_error(&*err)).as_deref(),
            Some("overloaded_error")
        );
        let (status, headers) = Reported::response_head(&*err).expect("the head came with it");
        assert_eq!(status, http::StatusCode::OK);
        assert!(headers.contains_key("set-cookie"));
        assert!(
            std::error::Error::source(&*err).is_none(),
            "an event, not a failure"
        );
        let debug = format!("{err:?}");
        assert!(debug.contains("set-cookie"), "{debug}");
        assert!(
            !debug.contains("secret"),
            "no header value is printed: {debug}"
        );
    }
    // A body that fails before content keeps its cause.
    let err = guard(vec![Err("connection reset".into())])
        .await
        .unwrap_err();
    let err = err.downcast::<PreContentError>().unwrap();
    let source = std::error::Error::source(&*err).expect("the body's error");
    assert_eq!(source.to_string(), "connection reset");
}

#[tokio::test]
async fn the_guards_future_says_what_it_waits_for() {
    use tower::Service;
    let upstream =
        tower::service_fn(|_: Request<()>| async { Ok::<_, Infallible>(sse_response(Vec::new())) });
    let future = StreamGuardLayer::new()
        .layer(upstream)
        .call(Request::new(()));
    assert_eq!(
        format!("{future:?}"),
        r#"ResponseFuture { state: "calling" }"#
    );
}

/// `pings` pings, then an overloaded error event, through `layer`: whether
/// the error came before anything was released (the attempt failed) or
/// after (the response was handed over).
async fn failed_before_release(layer: StreamGuardLayer, event: &'static str, pings: usize) -> bool {
    let ping = format!("event: {event}\ndata: {{}}\n\n");
    let mut chunks: Chunks = (0..pings)
        .map(|_| Ok(Frame::data(Bytes::from(ping.clone()))))
        .collect();
    chunks.push(Ok(Frame::data(Bytes::from_static(
        b"event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\"}}\n\n",
    ))));
    match guard_with(layer, chunks).await {
        Err(error) => error.downcast::<PreContentError>().is_ok(),
        Ok(_) => false,
    }
}

#[tokio::test]
async fn the_prefix_limit_is_64_kib_unless_set() {
    // 22-byte pings: 2,900 hold 63,800 bytes, 3,000 hold 66,000.
    assert!(failed_before_release(StreamGuardLayer::new(), "ping", 2_900).await);
    assert!(!failed_before_release(StreamGuardLayer::new(), "ping", 3_000).await);
    assert!(!failed_before_release(StreamGuardLayer::new().prefix_limit(1024), "ping", 100).await);
}

#[tokio::test]
async fn event_rules_name_what_carries_no_content() {
    let heartbeats = |rules| StreamGuardLayer::new().event_rules(rules);
    let held = crate::sse::EventRules::default().non_content_event("heartbeat");
    assert!(failed_before_release(heartbeats(held), "heartbeat", 3).await);
    // Unknown to the default rules, a heartbeat is content: the stream is
    // released at once and the error comes after.
    let default = crate::sse::EventRules::default();
    assert!(!failed_before_release(heartbeats(default), "heartbeat", 3).await);
}

#[tokio::test]
async fn the_guard_is_as_ready_as_the_service_it_wraps() {
    /// A service that is never able to take a request.
    #[derive(Clone)]
    struct Broken;
    impl tower::Service<Request<()>> for Broken {
        type Response = Response<ChunkBody>;
        type Error = BoxError;
        type Future = std::future::Ready<Result<Response<ChunkBody>, BoxError>>;
        fn poll_ready(
            &mut self,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<Result<(), BoxError>> {
            std::task::Poll::Ready(Err("the connection pool is closed".into()))
        }
        fn call(&mut self, _: Request<()>) -> Self::Future {
            std::future::ready(Err("called while not ready".into()))
        }
    }
    let mut guard = StreamGuardLayer::new().layer(Broken);
    let error = guard.ready().await.err().expect("not ready");
    assert_eq!(error.to_string(), "the connection pool is closed");
}
