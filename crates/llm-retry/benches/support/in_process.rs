//! The in-process upstream both success-path benchmarks call: it drains
//! the request body frame by frame (as a client sending it would), then
//! answers `200 application/json` with a small Messages API body.

use bytes::Bytes;
use http::{Request, Response};
use http_body::Body;
use http_body_util::{BodyExt, Full};
use std::convert::Infallible;
use std::hint::black_box;

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
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
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
