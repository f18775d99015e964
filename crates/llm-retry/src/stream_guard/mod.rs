//! Retry a stream until its first content byte, never after.
//!
//! LLM providers often answer `200` and then fail inside the stream:
//! Anthropic's first event may be `event: error` with `overloaded_error`,
//! OpenAI sends in-band error objects, connections reset before the first
//! token. [`StreamGuardLayer`] holds a streamed response (`text/event-stream`)
//! back until its first *content* event, reading at most a small prefix
//! (64 KiB by default) for at most a time limit:
//!
//! - *Uncommitted* — nothing reached the caller. An error event, an in-band
//!   error, a reset, an empty stream or `[DONE]` before content becomes a
//!   [`PreContentError`] that the retry policy classifies (an
//!   `overloaded_error` event counts as an overload, `rate_limit_error` as a
//!   429).
//! - *Committed* — the held prefix is released unchanged and the rest
//!   streams through. From the first forwarded byte the attempt is never
//!   replayed: a later failure ends the body with [`StreamInterrupted`], and
//!   the response's [`StreamCommit`] tells any outer
//!   retry loop to keep its hands off.
//!
//! Place it under [`RetryLayer`](crate::RetryLayer):
//!
//! ```no_run
//! use llm_retry::stream_guard::StreamGuardLayer;
//! use llm_retry::{RetryLayer, RetryPolicy};
//! use tower::ServiceBuilder;
//!
//! # fn wrap<C>(client: C) {
//! let service = ServiceBuilder::new()
//!     .layer(RetryLayer::new(RetryPolicy::default()))
//!     .layer(StreamGuardLayer::new())
//!     .service(client);
//! # let _ = service;
//! # }
//! ```
//!
//! Non-streamed responses pass through untouched, with no added allocation.

mod body;
mod commit;
mod error;
pub mod future;
mod hold;
mod layer;
mod service;

pub use crate::sse::EventRules;
pub use body::GuardedBody;
pub use commit::{StreamCommit, StreamEnd};
pub use error::{PreContentError, StreamInterrupted};
pub use layer::StreamGuardLayer;
pub use service::StreamGuard;

#[cfg(test)]
mod guard_tests;
