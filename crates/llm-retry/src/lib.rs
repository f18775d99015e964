//! Retries for LLM API calls that survive rate limits, overloads and flaky
//! networks, without ever replaying what a caller already read.
#![warn(missing_docs, missing_debug_implementations, rust_2018_idioms, unreachable_pub)]
#![forbid(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod classify;
pub mod hint;

pub mod backoff;
pub mod budget;
pub mod replay;

mod error;
mod hooks;
mod report;

pub use error::{BoxError, ErrorKind, RetryError};
pub use hooks::{on_retry, NoHooks, OnRetry, RetryEvent, RetryHooks};
pub use replay::ReplayBody;
pub use report::{RetryReport, StopReason};
pub mod policy;
pub use policy::{RetryPolicy, RetryPolicyBuilder};
mod retry;
pub use retry::{ResponseFuture, Retry, RetryBody, RetryLayer};
