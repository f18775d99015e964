//! The handler every LLM request goes through: admit, read, route, fail
//! over, answer; and the gateway's own answers when no upstream answer can
//! be handed over.

use crate::answer::{final_error as error, retry_soon};
use crate::counts::RequestCounts;
use crate::ending::{Ended, Ending, EndingBody};
use crate::flush_first::FlushFirst;
use crate::gateway::Shared;
use crate::idle::Idle;
use crate::inflight::Counted;
use crate::route::StateBound;
use crate::timed::UpstreamTime;
use crate::upstream::{foreign_transfer_coding, strip_unforwarded};
use axum::body::Body;
use axum::response::Response;
use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use http_body_util::{BodyExt, Either, Full, Limited};
use llm_retry::downstream::mark_give_up;
use llm_retry::failover::{FailoverBody, FailoverError, FailoverReport, FailoverStop};
use llm_retry::BoxError;
use llm_retry::RetryReport;
use serde::Deserialize;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Instant;
use tower::ServiceExt;

/// What the gateway reads of a request body: the model, and whether the
/// request continues provider-side state (OpenAI's Responses API).
#[derive(Deserialize, Default)]
struct Peek {
    model: Option<String>,
    previous_response_id: Option<serde_json::Value>,
    conversation: Option<serde_json::Value>,
}

/// Paths whose requests act on state one provider account holds (a stored
/// response, a file, a batch, a thread): they never change targets.
const STATE_PATHS: [&str; 6] = [
    "/v1/responses/",
    "/v1/files",
    "/v1/batches",
    "/v1/messages/batches",
    "/v1/threads",
    "/v1/vector_stores",
];

/// The header that tells the client the gateway's own time for the
/// request: everything to the answer's head but the targets' calls. A
/// name, not a string: a string is parsed and checked at every use.
const OVERHEAD_HEADER: HeaderName = HeaderName::from_static("x-llm-retry-gateway-overhead-ms");

/// An answer's body before how it ends is told: an upstream's, counted in
/// flight and under the stream idle timeout, or one the gateway made.
type Answered = Either<Counted<Idle<FailoverBody<Body>>>, Body>;

/// A request through the routes: its answer, counted by how it ends.
pub(crate) async fn forward<B>(shared: Arc<Shared>, request: http::Request<B>) -> Response
where
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    let started = Instant::now();
    let spent = UpstreamTime::default();
    let mut pending = Pending(Some(Arc::clone(&shared.unrouted)));
    let (counts, mut answer, target) = respond(&shared, request, &spent, &mut pending).await;
    pending.0 = None;
    let overhead = started.elapsed().saturating_sub(spent.total());
    answer
        .headers_mut()
        .insert(OVERHEAD_HEADER, millis_header(overhead));
    let is_stream = answer
        .headers()
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"));
    let ended = Ended {
        counts,
        status: Some(answer.status()),
        target,
    };
    // The body's error after the last data waits a poll: the server writes
    // what it has first (`flush_first`).
    answer.map(|body| Body::new(FlushFirst::new(EndingBody::new(body, ended, is_stream))))
}

/// `took` in milliseconds with three decimals (`0.042`), written without
/// a float, a heap string, the formatting machinery or 128-bit division.
fn millis_header(took: std::time::Duration) -> HeaderValue {
    // Whole seconds (20 digits at most), milliseconds, point, 3 decimals.
    let mut text = [0u8; 27];
    let mut at = text.len();
    let secs = took.as_secs();
    put_digits(
        &mut text,
        &mut at,
        u64::from(took.subsec_micros() % 1000),
        3,
    );
    at -= 1;
    text[at] = b'.';
    let millis = u64::from(took.subsec_millis());
    if secs == 0 {
        put_digits(&mut text, &mut at, millis, 1);
    } else {
        put_digits(&mut text, &mut at, millis, 3);
        put_digits(&mut text, &mut at, secs, 1);
    }
    HeaderValue::from_bytes(&text[at..]).unwrap_or(HeaderValue::from_static("0.000"))
}

/// Writes `n` in decimal, at least `min` digits (zero-padded), right to
/// left ending at `at`, and moves `at` to its first digit.
fn put_digits(text: &mut [u8], at: &mut usize, mut n: u64, min: usize) {
    let mut written = 0;
    while n > 0 || written < min {
        *at -= 1;
        text[*at] = b'0' + (n % 10) as u8;
        n /= 10;
        written += 1;
    }
}

/// A request whose answer has not begun: counted as abandoned by the
/// client (`client_gone`, status `none`) if its handler is dropped first.
struct Pending(Option<Arc<RequestCounts>>);

impl Drop for Pending {
    fn drop(&mut self) {
        if let Some(counts) = self.0.take() {
            let ended = Ended {
                counts,
                status: None,
                target: None,
            };
            ended.tell(Ending::ClientGone);
        }
    }
}

/// The answer to a request, the counter of the route it took (`none`
/// before one was chosen) and the target that answered (`None` when the
/// gateway answered itself).
async fn respond<B>(
    shared: &Arc<Shared>,
    request: http::Request<B>,
    spent: &UpstreamTime,
    pending: &mut Pending,
) -> (Arc<RequestCounts>, Response<Answered>, Option<Arc<str>>)
where
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    let unrouted = |answer: Response| {
        let answer = answer.map(Either::Right);
        (Arc::clone(&shared.unrouted), answer, None)
    };
    let guard = shared.in_flight.start();
    if shared.is_draining() {
        return unrouted(retry_soon(request.uri(), "draining"));
    }
    if shared.in_flight.count() > shared.max_in_flight {
        let answer = retry_soon(request.uri(), "too many requests in flight");
        return unrouted(answer);
    }
    let (mut parts, body) = request.into_parts();
    if let Some(key) = &shared.client_key {
        if !presents(&parts.headers, &key.0) {
            return unrouted(error(
                &parts.uri,
                StatusCode::UNAUTHORIZED,
                "missing or wrong gateway key",
            ));
        }
        // The gateway's own key is for the gateway alone.
        parts.headers.remove(http::header::AUTHORIZATION);
        parts.headers.remove(crate::upstream::X_API_KEY);
    }
    if !safe_path(parts.uri.path()) {
        return unrouted(error(
            &parts.uri,
            StatusCode::BAD_REQUEST,
            "path not accepted",
        ));
    }
    let body = match tokio::time::timeout(
        shared.body_timeout,
        Limited::new(body, shared.max_body).collect(),
    )
    .await
    {
        Ok(Ok(body)) => body.to_bytes(),
        Ok(Err(_)) => {
            let answer = error(
                &parts.uri,
                StatusCode::PAYLOAD_TOO_LARGE,
                "request body too large or unreadable",
            );
            return unrouted(answer);
        }
        Err(_) => {
            return unrouted(error(
                &parts.uri,
                StatusCode::REQUEST_TIMEOUT,
                "request body too slow",
            ))
        }
    };
    let path = parts.uri.path();
    // The API's own path, under any base path a provider puts before it
    // (Azure's `/openai/v1/…`): what state-bound paths are read from.
    let api_path = path.find("/v1/").map_or(path, |at| &path[at..]);
    // The body is read for a model only when a route matches on one, and
    // for provider state only on the Responses API.
    let peek: Peek = if shared.routes_by_model || api_path.starts_with("/v1/responses") {
        serde_json::from_slice(&body).unwrap_or_default()
    } else {
        Peek::default()
    };
    let Some(route) = shared
        .routes
        .iter()
        .find(|r| r.matches(path, peek.model.as_deref()))
    else {
        return unrouted(error(
            &parts.uri,
            StatusCode::NOT_FOUND,
            "no route for this path and model",
        ));
    };
    let bound_by_header = route
        .config
        .state_bound_header
        .as_ref()
        .is_some_and(|name| parts.headers.contains_key(name));
    let bound_by_body = peek.previous_response_id.is_some_and(|v| !v.is_null())
        || peek.conversation.is_some_and(|v| !v.is_null());
    let bound_by_path = STATE_PATHS
        .iter()
        .any(|prefix| api_path.starts_with(prefix));
    if bound_by_header || bound_by_body || bound_by_path {
        parts.extensions.insert(StateBound);
    }
    pending.0 = Some(Arc::clone(&route.counts));
    let uri = parts.uri.clone();
    let request = http::Request::from_parts(parts, Full::new(body));
    // Boxed as a plain `Send` future: the handler's own future then holds
    // no service type whose `Send` the compiler cannot prove in general.
    let sent: Pin<Box<dyn Future<Output = Result<Response<_>, llm_retry::BoxError>> + Send>> =
        Box::pin(spent.timing(route.failover.clone().oneshot(request)));
    let mut target = None;
    let answer = match sent.await {
        Ok(response) => {
            let (mut head, body) = response.into_parts();
            let failover = head.extensions.get::<FailoverReport>();
            target = failover.and_then(FailoverReport::answered_by).cloned();
            // An exhausted failover marked its answer with the wait left;
            // a target that gave up on its own is marked here.
            let exhausted = failover.is_some_and(|r| r.stop == FailoverStop::Exhausted);
            if let (false, Some(report)) = (exhausted, head.extensions.get::<RetryReport>()) {
                mark_give_up(report, &mut head.headers);
            }
            if foreign_transfer_coding(&head.headers) {
                // Dropped with its in-flight slot.
                drop((body, guard));
                let why = "the upstream used a transfer coding the gateway cannot decode";
                return (
                    Arc::clone(&route.counts),
                    error(&uri, StatusCode::BAD_GATEWAY, why).map(Either::Right),
                    target,
                );
            }
            strip_unforwarded(&mut head.headers);
            let idle = shared.stream_idle_timeout;
            let body = Counted::new(Idle::new(body, idle), guard);
            Response::from_parts(head, Either::Left(body))
        }
        Err(failure) => failed(&uri, &failure).map(Either::Right),
    };
    (Arc::clone(&route.counts), answer, target)
}

/// Whether the request presents the gateway's key, compared in time that
/// does not depend on where it differs.
fn presents(headers: &HeaderMap, key: &str) -> bool {
    let bearer = headers
        .get(http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    let api_key = headers
        .get(crate::upstream::X_API_KEY)
        .and_then(|v| v.to_str().ok());
    [bearer, api_key]
        .into_iter()
        .flatten()
        .any(|given| same(given.as_bytes(), key.as_bytes()))
}

fn same(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |diff, (x, y)| diff | (x ^ y)) == 0
}

/// A path the gateway forwards: no dot segments (raw or encoded), no
/// encoded slash or backslash, no empty segment, so an upstream that
/// normalises paths cannot be walked out of the target's base path.
fn safe_path(path: &str) -> bool {
    if path.contains('\\') || has_encoded_dot_or_slash(path.as_bytes()) {
        return false;
    }
    path.starts_with('/')
        && path[1..].split('/').enumerate().all(|(i, segment)| {
            segment != "." && segment != ".." && (!segment.is_empty() || i == 0)
        })
}

/// Whether `path` holds `%2e`, `%2f` or `%5c` in either case, looked for
/// without a lowered copy.
fn has_encoded_dot_or_slash(path: &[u8]) -> bool {
    path.windows(3).any(|w| {
        w[0] == b'%'
            && matches!(
                (w[1], w[2].to_ascii_lowercase()),
                (b'2', b'e' | b'f') | (b'5', b'c')
            )
    })
}

/// The gateway's answer when the failover could hand over no upstream
/// answer: final, so the caller's SDK does not retry what the gateway
/// already did, with the wait left when a provider named one.
fn failed(uri: &http::Uri, failure: &llm_retry::BoxError) -> Response {
    let Some(failure) = failure.downcast_ref::<FailoverError>() else {
        return error(uri, StatusCode::BAD_GATEWAY, "upstream failed");
    };
    let (status, message) = match failure.stop() {
        FailoverStop::Deadline => (StatusCode::GATEWAY_TIMEOUT, "the route's deadline passed"),
        FailoverStop::BodyTooLarge { .. } => {
            (StatusCode::PAYLOAD_TOO_LARGE, "request body too large")
        }
        FailoverStop::BodyFailed => {
            (StatusCode::BAD_REQUEST, "request body could not be read")
        }
        FailoverStop::FirstContentTimeout => (
            StatusCode::GATEWAY_TIMEOUT,
            "the upstream stalled: no target sent its first content within its first_content_timeout",
        ),
        FailoverStop::Exhausted if failure.is_rate_limited() => (
            StatusCode::TOO_MANY_REQUESTS,
            "every upstream is rate-limited: retry after the wait in retry-after",
        ),
        FailoverStop::Exhausted => (
            StatusCode::SERVICE_UNAVAILABLE,
            "every upstream turned the request away",
        ),
        _ => (StatusCode::BAD_GATEWAY, "upstream failed"),
    };
    tracing::info!(report = %failure.report(), "request not answered");
    let mut answer = error(uri, status, message);
    if let Some(wait) = failure.retry_after() {
        llm_retry::downstream::GiveUpHeadersLayer::set_wait_headers(answer.headers_mut(), wait);
    }
    answer
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_paths_are_forwarded() {
        for good in [
            "/v1/messages",
            "/v1/chat/completions",
            "/v1/messages/count_tokens",
            "/",
            "/v1/files/a%20b",
            "/v1/x%2",
            "/v1/x%",
        ] {
            assert!(safe_path(good), "{good}");
        }
        for bad in [
            "/v1/messages/../../v1/files",
            "/v1/./messages",
            "/v1/%2e%2e/files",
            "/v1/%2E%2E/files",
            "/v1%2fmessages",
            "/v1\\\\messages",
            "/v1/%2E%2e/files",
            "/v1/%5Cfiles",
            "/v1/%5cfiles",
            "/v1/x%2Fy",
            "/v1//messages",
            "v1/messages",
            "/v1/messages/..",
        ] {
            assert!(!safe_path(bad), "{bad}");
        }
    }

    #[test]
    fn the_overhead_is_written_in_milliseconds_with_three_decimals() {
        use std::time::Duration;
        for (took, text) in [
            (Duration::ZERO, "0.000"),
            (Duration::from_nanos(999), "0.000"),
            (Duration::from_micros(42), "0.042"),
            (Duration::from_micros(1_234_567), "1234.567"),
            (Duration::from_micros(1_000), "1.000"),
            (Duration::from_micros(10_005), "10.005"),
            (Duration::from_micros(60_000_042), "60000.042"),
            (Duration::from_micros(1_000_000), "1000.000"),
            (Duration::MAX, "18446744073709551615999.999"),
        ] {
            assert_eq!(millis_header(took), text);
        }
    }

    #[test]
    fn the_gateway_key_is_compared_whole() {
        let mut headers = HeaderMap::new();
        headers.insert("authorization", HeaderValue::from_static("Bearer gw-key"));
        assert!(presents(&headers, "gw-key"));
        assert!(!presents(&headers, "gw-ke"));
        assert!(!presents(&headers, "gw-key2"));
        let mut headers = HeaderMap::new();
        headers.insert("x-api-key", HeaderValue::from_static("gw-key"));
        assert!(presents(&headers, "gw-key"));
        assert!(!presents(&HeaderMap::new(), "gw-key"));
    }
}
