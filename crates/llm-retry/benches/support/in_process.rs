//! The in-process upstream both success-path benchmarks call: it drains
//! the request body frame by frame (as a client sending it would), then
//! answers `200 application/json` with a small Messages API body.
//!
//! `OVERHEAD_HEADERS=openai` or `=anthropic` gives every answer the head
//! that provider sends with a success (its rate-limit headers among some
//! twenty others, values as its documentation shows them); unset, the
//! answer carries `content-type` alone.

use bytes::Bytes;
use http::{Request, Response};
use http_body::Body;
use http_body_util::{BodyExt, Full};
use std::convert::Infallible;
use std::hint::black_box;
use std::sync::OnceLock;

/// An OpenAI chat completion's head.
const OPENAI: &[(&str, &str)] = &[
    ("date", "Tue, 01 Dec 2026 22:20:00 GMT"),
    ("content-type", "application/json"),
    ("transfer-encoding", "chunked"),
    ("connection", "keep-alive"),
    ("access-control-expose-headers", "X-Request-ID"),
    ("openai-organization", "org-bench"),
    ("openai-processing-ms", "312"),
    ("openai-version", "2020-10-01"),
    ("x-ratelimit-limit-requests", "10000"),
    ("x-ratelimit-limit-tokens", "30000000"),
    ("x-ratelimit-remaining-requests", "9999"),
    ("x-ratelimit-remaining-tokens", "29999945"),
    ("x-ratelimit-reset-requests", "6ms"),
    ("x-ratelimit-reset-tokens", "0s"),
    ("x-request-id", "req_0123456789abcdef0123456789abcdef"),
    (
        "strict-transport-security",
        "max-age=31536000; includeSubDomains; preload",
    ),
    ("cf-cache-status", "DYNAMIC"),
    ("x-content-type-options", "nosniff"),
    ("server", "cloudflare"),
    ("cf-ray", "8f0123456789abcd-AMS"),
    ("alt-svc", "h3=\":443\"; ma=86400"),
];

/// An Anthropic Messages API head.
const ANTHROPIC: &[(&str, &str)] = &[
    ("date", "Tue, 01 Dec 2026 22:20:00 GMT"),
    ("content-type", "application/json"),
    ("transfer-encoding", "chunked"),
    ("connection", "keep-alive"),
    ("anthropic-ratelimit-requests-limit", "4000"),
    ("anthropic-ratelimit-requests-remaining", "3999"),
    ("anthropic-ratelimit-requests-reset", "2026-12-01T22:20:01Z"),
    ("anthropic-ratelimit-input-tokens-limit", "400000"),
    ("anthropic-ratelimit-input-tokens-remaining", "400000"),
    (
        "anthropic-ratelimit-input-tokens-reset",
        "2026-12-01T22:20:00Z",
    ),
    ("anthropic-ratelimit-output-tokens-limit", "80000"),
    ("anthropic-ratelimit-output-tokens-remaining", "80000"),
    (
        "anthropic-ratelimit-output-tokens-reset",
        "2026-12-01T22:20:00Z",
    ),
    ("anthropic-ratelimit-tokens-limit", "480000"),
    ("anthropic-ratelimit-tokens-remaining", "480000"),
    ("anthropic-ratelimit-tokens-reset", "2026-12-01T22:20:00Z"),
    ("request-id", "req_011CV0123456789abcdefghij"),
    (
        "strict-transport-security",
        "max-age=31536000; includeSubDomains; preload",
    ),
    (
        "anthropic-organization-id",
        "00000000-0000-0000-0000-000000000000",
    ),
    ("via", "1.1 google"),
    ("cf-cache-status", "DYNAMIC"),
    ("x-robots-tag", "none"),
    ("server", "cloudflare"),
    ("cf-ray", "8f0123456789abcd-AMS"),
];

/// The head every answer carries, built once.
fn head() -> &'static http::HeaderMap {
    static HEAD: OnceLock<http::HeaderMap> = OnceLock::new();
    HEAD.get_or_init(|| {
        let pairs = match std::env::var("OVERHEAD_HEADERS").as_deref() {
            Ok("openai") => OPENAI,
            Ok("anthropic") => ANTHROPIC,
            Ok(other) => panic!("OVERHEAD_HEADERS={other}: not openai or anthropic"),
            Err(_) => &[("content-type", "application/json")],
        };
        pairs
            .iter()
            .map(|(name, value)| {
                (
                    http::HeaderName::from_static(name),
                    http::HeaderValue::from_static(value),
                )
            })
            .collect()
    })
}

const RESPONSE: &[u8] = br#"{"id":"msg_bench","type":"message","role":"assistant","model":"claude-mock-1","content":[{"type":"text","text":"Hi!"}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":12,"output_tokens":2}}"#;

/// The upstream, for `tower::service_fn`.
pub(crate) async fn upstream<B>(request: Request<B>) -> Result<Response<Full<Bytes>>, Infallible>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: std::fmt::Debug,
{
    let mut body = request.into_body();
    let mut sent = 0;
    while let Some(frame) = body.frame().await {
        if let Some(data) = frame.expect("request body frame").data_ref() {
            sent += data.len();
        }
    }
    black_box(sent);
    let mut response = Response::new(Full::new(Bytes::from_static(RESPONSE)));
    *response.headers_mut() = head().clone();
    Ok(response)
}

/// Sends each request in turn through `svc`: `ready`, `call`, the response
/// body read to its end. What one timed call is in both benchmarks.
pub(crate) async fn send_all<S, B>(svc: &mut S, requests: Vec<Request<Full<Bytes>>>)
where
    S: tower::Service<Request<Full<Bytes>>, Response = Response<B>>,
    S::Error: std::fmt::Debug,
    B: Body<Data = Bytes>,
    B::Error: std::fmt::Debug,
{
    use tower::ServiceExt;
    for request in requests {
        let response = svc
            .ready()
            .await
            .expect("ready")
            .call(request)
            .await
            .expect("a response");
        let body = response.into_body().collect().await.expect("response body");
        black_box(body.to_bytes());
    }
}

/// A JSON Messages API request body of about `size` bytes.
pub(crate) fn json_body(size: usize) -> Bytes {
    let head =
        r#"{"model":"claude-sonnet-4-5","max_tokens":64,"messages":[{"role":"user","content":""#;
    let tail = r#""}]}"#;
    let fill = size.saturating_sub(head.len() + tail.len());
    let mut json = String::with_capacity(size);
    json.push_str(head);
    json.extend(std::iter::repeat_n('a', fill));
    json.push_str(tail);
    Bytes::from(json)
}
