//! The llm-retry engine for reqwest clients, as a
//! [reqwest-middleware](https://docs.rs/reqwest-middleware) [`Middleware`](reqwest_middleware::Middleware).
//!
//! One line gives a reqwest client what `llm-retry` gives a tower stack:
//! 429s, 529s, 5xx, resets and timeouts retried the way the server asks
//! (`Retry-After`, `retry-after-ms`, `x-should-retry`, rate-limit reset
//! headers), jittered backoff when it says nothing, hard bounds on
//! attempts and time, a shared retry budget and rate-limit gate, recovery
//! actions (a smaller `max_tokens`, a fallback model, fresh credentials),
//! streamed answers never replayed once content reached the caller, and a
//! [`RetryReport`](llm_retry::RetryReport) saying what happened.
//!
//! It is not a second engine: every attempt is judged by the same
//! [`RetryPolicy`](llm_retry::RetryPolicy) as with the tower layers.
//!
//! ```no_run
//! use llm_retry_reqwest::RetryMiddleware;
//! use reqwest_middleware::ClientBuilder;
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let client = ClientBuilder::new(reqwest::Client::new())
//!     .with(RetryMiddleware::default())
//!     .build();
//! let response = client
//!     .post("https://api.openai.com/v1/chat/completions")
//!     .bearer_auth("sk-...")
//!     .body(r#"{"model":"gpt-4o-mini","messages":[{"role":"user","content":"Hi"}]}"#)
//!     .send()
//!     .await;
//! match response {
//!     Ok(response) => {
//!         let report = llm_retry_reqwest::report(&response);
//!         println!("{} after {:?} sends", response.status(), report.map(|r| r.attempts));
//!     }
//!     Err(error) => match llm_retry_reqwest::retry_error(&error) {
//!         Some(retry) => println!("gave up: {retry} ({:?})", retry.report().stop),
//!         None => println!("failed: {error}"),
//!     },
//! }
//! # Ok(())
//! # }
//! ```
//!
//! # Differences from reqwest-retry
//!
//! - `Retry-After`, `retry-after-ms` and `x-should-retry` are honoured.
//! - A streamed request body is sent at once and replayed from the first
//!   send's copy; reqwest-retry fails such a request before sending it.
//! - The body of an error answer is read (within a bound) to tell an
//!   overload, a rate limit or a context overflow from a plain 4xx/5xx.
//! - 409 is retried; 501 and 505 are not (they will not change on a resend).
//!
//! # Timeouts
//!
//! A per-request `.timeout(d)` (and the client's own timeout) bounds each
//! attempt, as reqwest applies it to every send; the whole request,
//! waits included, is bounded by the policy's
//! [`max_elapsed`](llm_retry::RetryPolicyBuilder::max_elapsed).
//!
//! # Redirects and refused streams
//!
//! A body reqwest can clone (bytes: a string, a `Vec`, JSON) reaches
//! reqwest as the same bytes on every attempt, shared, not copied. reqwest
//! itself then follows a `307`/`308` redirect of it (by the client's
//! redirect policy) and, with its `http2` feature, resends it on an HTTP/2
//! refused stream; the engine sees one attempt. A streamed body reaches
//! reqwest as a stream until the engine holds all of it (its resends go as
//! bytes); a `307`/`308` of a streamed send is handed over as it came.
//!
//! # Limits
//!
//! Extensions written by the middleware below an attempt that was
//! cancelled (an attempt timeout) are not handed back; those of the last
//! attempt that finished are.
//!
//! # Feature flags
//!
//! None. reqwest and reqwest-middleware are used with their default
//! features off, so the TLS stack (and every other reqwest feature) is
//! yours to choose in your own dependency on reqwest.
#![forbid(unsafe_code)]

mod attempt;
mod convert;
mod error;
mod last_uri;
mod middleware;

pub use error::{report, reqwest_error, retry_error};
pub use middleware::RetryMiddleware;
