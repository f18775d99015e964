//! The service on a scripted in-process upstream under tokio's paused clock:
//! exact virtual timings. Loopback wiring is tested in the `tests` package.
#![allow(clippy::unwrap_used)]

use crate::backoff::Jitter;
use crate::{BoxError, RetryError, RetryLayer, RetryPolicy, RetryReport, StopReason};
use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;
use tower::{Layer, Service, ServiceExt};

type Script = Arc<Mutex<VecDeque<Result<Response<Full<Bytes>>, BoxError>>>>;

/// A scripted upstream that records the virtual instant of every call.
#[derive(Clone)]
pub(crate) struct Upstream {
    script: Script,
    calls: Arc<Mutex<Vec<Instant>>>,
}

impl Upstream {
    pub(crate) fn new(replies: Vec<Result<Response<Full<Bytes>>, BoxError>>) -> Upstream {
        Upstream {
            script: Arc::new(Mutex::new(replies.into())),
            calls: Arc::default(),
        }
    }

    pub(super) fn call_offsets(&self, start: Instant) -> Vec<u64> {
        let calls = self.calls.lock().unwrap();
        calls
            .iter()
            .map(|t| (*t - start).as_millis() as u64)
            .collect()
    }
}

impl<B: Send + 'static> Service<Request<B>> for Upstream {
    type Response = Response<Full<Bytes>>;
    type Error = BoxError;
    type Future = std::future::Ready<Result<Response<Full<Bytes>>, BoxError>>;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), BoxError>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: Request<B>) -> Self::Future {
        self.calls.lock().unwrap().push(Instant::now());
        let next = self.script.lock().unwrap().pop_front();
        std::future::ready(next.unwrap_or_else(|| Err("script exhausted".into())))
    }
}

pub(crate) fn reply(
    status: u16,
    headers: &[(&str, &str)],
    body: &str,
) -> Result<Response<Full<Bytes>>, BoxError> {
    let mut builder = Response::builder().status(status);
    for (k, v) in headers {
        builder = builder.header(*k, *v);
    }
    Ok(builder
        .body(Full::new(Bytes::from(body.to_owned())))
        .unwrap())
}

pub(crate) fn request() -> Request<Full<Bytes>> {
    Request::post("http://upstream.test/v1/messages")
        .header("x-api-key", "sk-secret")
        .body(Full::new(Bytes::from_static(b"{\"max_tokens\":10}")))
        .unwrap()
}

fn no_jitter() -> RetryPolicy {
    RetryPolicy::builder()
        .jitter(Jitter::None)
        .seed(7)
        .build()
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn computed_delays_double_from_500ms_to_32s() {
    let mut replies: Vec<_> = (0..9).map(|_| reply(503, &[], "")).collect();
    replies.push(reply(200, &[], "ok"));
    let upstream = Upstream::new(replies);
    let svc = RetryLayer::new(no_jitter()).layer(upstream.clone());
    let start = Instant::now();
    let res = svc.oneshot(request()).await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    let report = res.extensions().get::<RetryReport>().unwrap().clone();
    assert_eq!(report.attempts, 10);
    assert_eq!(report.stop, StopReason::Succeeded);
    // Gaps: 0.5, 1, 2, 4, 8, 16, 32, 32, 32 s.
    assert_eq!(
        upstream.call_offsets(start),
        [0, 500, 1_500, 3_500, 7_500, 15_500, 31_500, 63_500, 95_500, 127_500]
    );
    assert_eq!(report.total_wait, Duration::from_millis(127_500));
}

#[tokio::test(start_paused = true)]
async fn a_one_second_retry_after_is_honoured() {
    let upstream = Upstream::new(vec![
        reply(
            429,
            &[("retry-after", "1")],
            r#"{"type":"error","error":{"type":"rate_limit_error","message":"slow down"}}"#,
        ),
        reply(200, &[], "ok"),
    ]);
    let svc = RetryLayer::new(RetryPolicy::default()).layer(upstream.clone());
    let start = Instant::now();
    let res = svc.oneshot(request()).await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    let second = upstream.call_offsets(start)[1];
    // Computed backoff would give 500–625 ms; the hint gives 1000–1100 ms.
    assert!(
        (1_000..=1_100).contains(&second),
        "second attempt at {second} ms"
    );
    let report = res.extensions().get::<RetryReport>().unwrap();
    assert_eq!(report.server_waits_honoured, 1);
}

#[tokio::test(start_paused = true)]
async fn a_200_second_retry_after_ends_the_request_at_once() {
    let upstream = Upstream::new(vec![reply(429, &[("retry-after", "200")], "")]);
    let svc = RetryLayer::new(RetryPolicy::default()).layer(upstream.clone());
    let start = Instant::now();
    let res = svc.oneshot(request()).await.unwrap();
    assert_eq!(start.elapsed(), Duration::ZERO);
    assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS);
    let report = res.extensions().get::<RetryReport>().unwrap();
    assert_eq!(report.attempts, 1);
    assert_eq!(
        report.to_string(),
        "gave up after 1 attempt in 0 s: last status 429 \
         (server asked to wait 200 s, more than the 120 s limit)"
    );
}

#[tokio::test(start_paused = true)]
async fn the_deadline_stops_a_wait_from_starting() {
    let replies: Vec<_> = (0..20).map(|_| reply(500, &[], "")).collect();
    let upstream = Upstream::new(replies);
    let policy = RetryPolicy::builder()
        .jitter(Jitter::None)
        .max_elapsed(Duration::from_secs(5))
        .build()
        .unwrap();
    let svc = RetryLayer::new(policy).layer(upstream.clone());
    let start = Instant::now();
    let res = svc.oneshot(request()).await.unwrap();
    // 0.5 + 1 + 2 = 3.5 s slept; the next 4 s wait would end at 7.5 s > 5 s.
    assert_eq!(start.elapsed(), Duration::from_millis(3_500));
    assert_eq!(upstream.call_offsets(start), [0, 500, 1_500, 3_500]);
    let report = res.extensions().get::<RetryReport>().unwrap();
    assert!(
        matches!(report.stop, StopReason::DeadlineReached { .. }),
        "{:?}",
        report.stop
    );
}

#[tokio::test(start_paused = true)]
async fn dropping_the_future_mid_wait_stops_at_once() {
    let upstream = Upstream::new(vec![
        reply(503, &[("retry-after", "60")], ""),
        reply(200, &[], ""),
    ]);
    let svc = RetryLayer::new(RetryPolicy::default()).layer(upstream.clone());
    let start = Instant::now();
    let outcome = tokio::time::timeout(Duration::from_secs(1), svc.oneshot(request())).await;
    assert!(outcome.is_err(), "the wait must still be running");
    assert_eq!(start.elapsed(), Duration::from_secs(1));
    tokio::time::sleep(Duration::from_secs(600)).await;
    assert_eq!(
        upstream.call_offsets(start),
        [0],
        "no resend after cancellation"
    );
}

#[tokio::test(start_paused = true)]
async fn transport_errors_end_in_one_retry_error_with_the_report() {
    let replies: Vec<_> = (0..3)
        .map(|_| Err(std::io::Error::from(std::io::ErrorKind::ConnectionReset).into()))
        .collect();
    let upstream = Upstream::new(replies);
    let policy = RetryPolicy::builder()
        .max_retries(2)
        .jitter(Jitter::None)
        .build()
        .unwrap();
    let svc = RetryLayer::new(policy).layer(upstream.clone());
    let err = svc.oneshot(request()).await.unwrap_err();
    let err = err.downcast::<RetryError>().unwrap();
    assert!(err.stop().is_retries_exhausted());
    assert_eq!(err.report().attempts, 3);
    assert!(std::error::Error::source(&*err).is_some());
    let text = err.to_string();
    assert!(
        text.starts_with("gave up after 3 attempts in 1.5 s"),
        "{text}"
    );
    assert!(!text.contains("sk-secret"));
}

#[tokio::test(start_paused = true)]
async fn a_failed_response_body_reaches_the_caller_unchanged() {
    let body = r#"{"type":"error","error":{"type":"invalid_request_error","message":"bad"}}"#;
    let upstream = Upstream::new(vec![reply(400, &[], body)]);
    let svc = RetryLayer::new(RetryPolicy::default()).layer(upstream.clone());
    let res = svc.oneshot(request()).await.unwrap();
    assert_eq!(res.status(), StatusCode::BAD_REQUEST);
    let report = res.extensions().get::<RetryReport>().unwrap().clone();
    assert_eq!(
        report.last_error_type.as_deref(),
        Some("invalid_request_error")
    );
    assert_eq!(res.into_body().collect().await.unwrap().to_bytes(), body);
    assert_eq!(upstream.call_offsets(Instant::now()).len(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_stalled_error_body_is_read_no_longer_than_the_deadline() {
    use http_body::Frame;
    use http_body_util::StreamBody;
    let upstream = tower::service_fn(|_: Request<crate::ReplayBody<Full<Bytes>>>| async {
        let stalled = futures_util::stream::pending::<Result<Frame<Bytes>, BoxError>>();
        let response = Response::builder()
            .status(StatusCode::SERVICE_UNAVAILABLE)
            .body(StreamBody::new(stalled))
            .unwrap();
        Ok::<_, BoxError>(response)
    });
    let deadline = Duration::from_millis(300);
    let policy = RetryPolicy::builder()
        .max_elapsed(deadline)
        .build()
        .unwrap();
    let start = Instant::now();
    let response = RetryLayer::new(policy)
        .layer(upstream)
        .oneshot(Request::new(Full::new(Bytes::from_static(b"{}"))))
        .await
        .unwrap();
    assert_eq!(start.elapsed(), deadline, "the peek ends with the deadline");
    let report = response.extensions().get::<RetryReport>().unwrap();
    assert!(
        matches!(report.stop, StopReason::DeadlineReached { .. }),
        "{report}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_request_body_that_fails_mid_stream_is_reported_as_such() {
    use http_body::Frame;
    use http_body_util::StreamBody;
    type Frames = futures_util::stream::Iter<std::vec::IntoIter<Result<Frame<Bytes>, BoxError>>>;
    // The upstream reads the whole body, as a client sending it does.
    let upstream = tower::service_fn(
        |req: Request<crate::ReplayBody<StreamBody<Frames>>>| async {
            req.into_body().collect().await?;
            Ok::<_, BoxError>(Response::new(Full::<Bytes>::default()))
        },
    );
    let frames: Vec<Result<Frame<Bytes>, BoxError>> = vec![
        Ok(Frame::data(Bytes::from_static(b"{\"model\":"))),
        Err("the caller's body broke".into()),
    ];
    let body = StreamBody::new(futures_util::stream::iter(frames));
    let error = RetryLayer::new(RetryPolicy::default())
        .layer(upstream)
        .oneshot(Request::new(body))
        .await
        .unwrap_err();
    let error = error.downcast::<RetryError>().unwrap();
    assert_eq!(
        error.report().stop,
        StopReason::RequestBodyFailed,
        "{error}"
    );
    assert!(error.stop().is_request_body_failed());
    assert!(!error.to_string().contains("replay buffer"), "{error}");
}

#[tokio::test(start_paused = true)]
async fn a_401_on_a_body_that_cannot_be_resent_asks_for_no_credentials() {
    use crate::policy::{CredentialsFuture, RefreshCredentials};
    use std::sync::atomic::{AtomicUsize, Ordering};
    #[derive(Clone, Default)]
    struct Counting(Arc<AtomicUsize>);
    impl RefreshCredentials for Counting {
        fn clear_token_cache(&self) {}
        fn refresh(&self) -> CredentialsFuture {
            self.0.fetch_add(1, Ordering::SeqCst);
            Box::pin(async { Ok(http::HeaderMap::new()) })
        }
    }
    let hook = Counting::default();
    let policy = RetryPolicy::builder()
        .max_replay_body(4)
        .refresh_credentials(hook.clone())
        .build()
        .unwrap();
    // The upstream reads the streamed body (past the 4-byte cap) before
    // answering 401.
    use http_body::Frame;
    use http_body_util::StreamBody;
    type Frames = futures_util::stream::Iter<std::vec::IntoIter<Result<Frame<Bytes>, BoxError>>>;
    let upstream = tower::service_fn(
        |req: Request<crate::ReplayBody<StreamBody<Frames>>>| async {
            req.into_body().collect().await?;
            reply(
                401,
                &[],
                r#"{"type":"error","error":{"type":"authentication_error","message":"bad key"}}"#,
            )
        },
    );
    let frames: Vec<Result<Frame<Bytes>, BoxError>> = vec![
        Ok(Frame::data(Bytes::from_static(b"{\"a\""))),
        Ok(Frame::data(Bytes::from_static(b":1}"))),
    ];
    let body = StreamBody::new(futures_util::stream::iter(frames));
    let response = RetryLayer::new(policy)
        .layer(upstream)
        .oneshot(Request::new(body))
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    let report = response.extensions().get::<RetryReport>().unwrap();
    assert!(
        matches!(report.stop, StopReason::BodyNotReplayable { cap: 4 }),
        "{report}"
    );
    assert_eq!(hook.0.load(Ordering::SeqCst), 0, "the hook was not asked");
}

#[tokio::test(start_paused = true)]
async fn a_report_rides_on_every_response_but_a_first_try_success() {
    let served = |replies| async {
        let upstream = Upstream::new(replies);
        let svc = RetryLayer::new(no_jitter()).layer(upstream);
        let res = svc.oneshot(request()).await.unwrap();
        (res.status(), res.extensions().get::<RetryReport>().cloned())
    };
    let (status, report) = served(vec![reply(200, &[], "{}")]).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(report, None, "nothing to report at the first try");

    let (status, report) = served(vec![reply(503, &[], ""), reply(200, &[], "{}")]).await;
    assert_eq!(status, StatusCode::OK);
    let report = report.expect("a retried success is reported");
    assert_eq!((report.attempts, report.stop), (2, StopReason::Succeeded));

    // A resend after no wait at all (a backoff of nothing) is still a resend.
    let policy = RetryPolicy::builder()
        .jitter(Jitter::None)
        .initial_backoff(Duration::ZERO)
        .max_backoff(Duration::ZERO)
        .build()
        .unwrap();
    let upstream = Upstream::new(vec![reply(503, &[], ""), reply(200, &[], "{}")]);
    let res = RetryLayer::new(policy)
        .layer(upstream)
        .oneshot(request())
        .await
        .unwrap();
    let report = res.extensions().get::<RetryReport>();
    let report = report.expect("a success after a wait of nothing is reported");
    assert_eq!((report.attempts, report.total_wait), (2, Duration::ZERO));

    let (status, report) = served(vec![reply(404, &[], "{}")]).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let report = report.expect("a stop short of success is reported");
    assert_eq!(report.attempts, 1);
    assert!(
        matches!(report.stop, StopReason::NotRetryable(_)),
        "{report}"
    );
}
