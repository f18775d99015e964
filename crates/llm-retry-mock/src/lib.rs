//! A scripted, fault-injecting LLM API upstream on loopback, for testing
//! retry stacks against the real thing: a real hyper 1 server, real sockets,
//! real resets.
//!
//! # Overview
//!
//! - [`Script`] maps exact paths to [`Route`]s (plus an optional fallback;
//!   unknown paths get a 404 JSON error).
//! - A [`Route`] answers successive requests: [`Route::always`],
//!   [`Route::sequence`] (the last reply repeats), [`Route::sequence_then`],
//!   or a seeded weighted [`Route::mix`] (drawn by arrival, or with
//!   [`Route::mix_per`] per request id and attempt); an upstream under load with
//!   [`Route::capacity`] (a shared token bucket answering 429 with the exact
//!   `Retry-After` when empty), [`Route::limited`] (a provider's limits,
//!   stated in its headers) and [`Route::outage`] (a window of 503s); one
//!   route per model named in the request body with [`Route::by_model`].
//! - A [`Reply`] is a status, headers (arbitrary bytes allowed) and a body —
//!   whole JSON, or an SSE stream of [`SseEvent`]s with per-event delays —
//!   optionally delayed before the headers, or a fault:
//!   [`Reply::reset_before_headers`] (TCP RST after reading the request) and
//!   [`Reply::reset_after_bytes`] (the connection closes mid-body).
//!   Presets speak Anthropic and OpenAI: [`Reply::anthropic_ok`],
//!   [`Reply::rate_limited`], [`Reply::overloaded`],
//!   [`Reply::anthropic_stream`], [`Reply::openai_stream`]…
//! - [`MockServer`] serves a script on `127.0.0.1` (HTTP/1.1 and h2c) and
//!   records every request, before answering it, as a [`RecordedRequest`].
//!
//! All waits use the tokio clock, so `#[tokio::test(start_paused = true)]`
//! drives them without real sleeping.
//!
//! # Example
//!
//! ```
//! use bytes::Bytes;
//! use http_body_util::{BodyExt, Full};
//! use hyper_util::client::legacy::Client;
//! use hyper_util::rt::TokioExecutor;
//! use llm_retry_mock::{MockServer, Reply, Route, Script};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
//! let script = Script::new().route(
//!     "/v1/messages",
//!     Route::sequence([
//!         Reply::overloaded(),
//!         Reply::rate_limited(Some(1)),
//!         Reply::anthropic_ok("Hello!"),
//!     ]),
//! );
//! let server = MockServer::start(script).await?;
//! let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
//!
//! let mut statuses = Vec::new();
//! for _ in 0..3 {
//!     let request = http::Request::post(server.url("/v1/messages"))
//!         .header("content-type", "application/json")
//!         .body(Full::new(Bytes::from_static(br#"{"model":"claude"}"#)))?;
//!     let response = client.request(request).await?;
//!     statuses.push(response.status().as_u16());
//!     let body = response.into_body().collect().await?.to_bytes();
//!     assert!(!body.is_empty());
//! }
//! assert_eq!(statuses, [529, 429, 200]);
//! assert_eq!(server.requests_to("/v1/messages"), 3);
//! assert_eq!(server.requests()[0].body, Bytes::from_static(br#"{"model":"claude"}"#));
//! server.shutdown().await;
//! # Ok(())
//! # }
//! ```
//!
//! # Faults and their guarantees
//!
//! | reply | the client sees |
//! |---|---|
//! | [`Reply::reset_before_headers`] | connection reset (RST) before any response byte |
//! | [`Reply::reset_after_bytes`]`(n)` | headers, exactly `min(n, len)` body bytes, then an incomplete-body error |
//! | [`Reply::delay`] | nothing until the delay passed (tokio clock) |
//! | [`SseEvent::after`] | the stream pauses before that event |
//!
//! Over HTTP/2 a fault ends the whole connection, every stream on it.
//!
//! # Feature flags
//!
//! None.

#![warn(
    missing_docs,
    missing_debug_implementations,
    rust_2018_idioms,
    unreachable_pub
)]
#![forbid(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod body;
mod canned;
mod conn;
mod handler;
mod limit;
mod limiter;
mod record;
mod reply;
mod router;
mod script;
mod server;
mod sse;

pub use limit::{Limit, Quota, Shape};
pub use record::RecordedRequest;
pub use reply::{Reply, ResponseReply};
pub use script::{Route, Script, DEFAULT_MAX_REQUEST_BODY};
pub use server::MockServer;
pub use sse::SseEvent;
