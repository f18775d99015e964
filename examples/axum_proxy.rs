//! An axum service that forwards LLM calls to an upstream through
//! `ClientLayer`, streaming both ways: the caller's request body streams to
//! the upstream (and is replayed from its first send when the upstream
//! fails), and the upstream's SSE stream flows back as it arrives. A
//! failure before the stream's first content is retried behind the
//! caller's back; a final failure is answered with `x-should-retry: false`
//! so the caller's own SDK does not multiply the proxy's retries.
//!
//! ```text
//! cargo run --example axum_proxy
//! ```

use axum::body::Body;
use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use bytes::Bytes;
use http_body_util::{BodyExt, StreamBody};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use llm_retry::downstream::{mark_give_up, GiveUpHeaders, GiveUpHeadersLayer};
use llm_retry::{BoxError, ClientLayer, ClientStack, ReplayBody, RetryError, RetryPolicy};
use llm_retry_mock::{MockServer, Reply, Route, Script};
use std::convert::Infallible;
use std::time::Duration;
use tower::{Layer, ServiceExt};

/// The upstream client: retries, gate and stream guard over hyper-util,
/// under a layer that marks a final failure `x-should-retry: false`.
type Upstream = GiveUpHeaders<ClientStack<Client<HttpConnector, ReplayBody<Body>>>>;

#[derive(Clone)]
struct Proxy {
    upstream: Upstream,
    base: String,
}

/// Headers a proxy must not forward (hop-by-hop, or the proxy's own).
const NOT_FORWARDED: [&str; 5] = [
    "host",
    "connection",
    "content-length",
    "transfer-encoding",
    "te",
];

async fn forward(State(proxy): State<Proxy>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let mut upstream_request = http::Request::new(body);
    *upstream_request.method_mut() = parts.method;
    *upstream_request.uri_mut() = match format!("{}{}", proxy.base, parts.uri.path()).parse() {
        Ok(uri) => uri,
        Err(_) => return (http::StatusCode::BAD_REQUEST, "bad path").into_response(),
    };
    for (name, value) in &parts.headers {
        if !NOT_FORWARDED.contains(&name.as_str()) {
            upstream_request.headers_mut().append(name, value.clone());
        }
    }
    match proxy.upstream.oneshot(upstream_request).await {
        // The answer streams through as the upstream sends it.
        Ok(response) => response.map(Body::new),
        Err(error) => give_up(&error),
    }
}

/// The proxy's own answer when no upstream answer can be handed over.
fn give_up(error: &BoxError) -> Response {
    let mut response = (
        http::StatusCode::BAD_GATEWAY,
        [("content-type", "application/json")],
        format!(
            r#"{{"type":"error","error":{{"type":"api_error","message":"upstream: {error}"}}}}"#
        ),
    )
        .into_response();
    if let Some(retry) = error.downcast_ref::<RetryError>() {
        mark_give_up(retry.report(), response.headers_mut());
    }
    response
}

/// A request body as a stream of chunks.
type Chunked = StreamBody<futures_util::stream::Iter<std::vec::IntoIter<Frame>>>;
type Frame = Result<http_body::Frame<Bytes>, Infallible>;

/// The caller's request body as a stream of chunks, as a client sends it.
fn chunked(text: &'static str) -> Chunked {
    let chunks: Vec<_> = text
        .as_bytes()
        .chunks(16)
        .map(|c| Ok(http_body::Frame::data(Bytes::copy_from_slice(c))))
        .collect();
    StreamBody::new(futures_util::stream::iter(chunks))
}

const PROMPT: &str = r#"{"model":"claude-sonnet-4-5","max_tokens":64,"stream":true,"messages":[{"role":"user","content":"Hi"}]}"#;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), BoxError> {
    let good = Reply::anthropic_stream(&["Hello", " through", " the proxy"]);
    let expected = good.expected_body().ok_or("a complete stream")?;
    let upstream = MockServer::start(
        Script::new()
            .route(
                "/v1/messages",
                Route::sequence([
                    Reply::anthropic_stream_error("overloaded_error", "Overloaded"),
                    good,
                ]),
            )
            .route("/v1/down", Route::always(Reply::status(503))),
    )
    .await?;

    let policy = RetryPolicy::builder()
        .initial_backoff(Duration::from_millis(20))
        .max_retries(2)
        .build()?;
    let proxy = Proxy {
        upstream: GiveUpHeadersLayer::new().layer(
            ClientLayer::new(policy).layer(Client::builder(TokioExecutor::new()).build_http()),
        ),
        base: upstream.url(""),
    };
    let app = Router::new()
        .route("/v1/messages", post(forward))
        .route("/v1/down", post(forward))
        .with_state(proxy);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let address = listener.local_addr()?;
    tokio::spawn(async move { axum::serve(listener, app).await });
    eprintln!(
        "proxy on http://{address}, upstream at {}",
        upstream.url("")
    );

    // A caller with no retries of its own, streaming its request body.
    let caller = Client::builder(TokioExecutor::new()).build_http();
    let request = http::Request::post(format!("http://{address}/v1/messages"))
        .header("content-type", "application/json")
        .header("x-api-key", "sk-ant-example")
        .body(chunked(PROMPT))?;
    let response = caller.request(request).await?;
    println!("proxy answered {}", response.status());
    let mut body = response.into_body();
    let mut stream = Vec::new();
    while let Some(frame) = body.frame().await {
        if let Ok(data) = frame?.into_data() {
            stream.extend_from_slice(&data);
        }
    }
    assert_eq!(stream, expected, "one complete stream, no replayed bytes");
    let sent = upstream.requests();
    println!(
        "upstream saw {} attempts; the caller saw one stream",
        sent.len()
    );
    assert_eq!(
        sent.len(),
        2,
        "the overload before content was retried by the proxy"
    );
    assert!(
        sent.iter().all(|r| r.body == PROMPT.as_bytes()),
        "replayed byte-identical"
    );
    assert!(sent
        .iter()
        .all(|r| r.header_str("x-api-key") == Some("sk-ant-example")));

    let request = http::Request::post(format!("http://{address}/v1/down")).body(chunked(PROMPT))?;
    let response = caller.request(request).await?;
    let should_retry = response.headers().get("x-should-retry").cloned();
    println!(
        "down upstream: {} with x-should-retry: {should_retry:?}",
        response.status()
    );
    assert_eq!(response.status(), 503, "the upstream's last answer");
    assert_eq!(
        should_retry.as_ref().map(|v| v.as_bytes()),
        Some(&b"false"[..])
    );
    Ok(())
}
