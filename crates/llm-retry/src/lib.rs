//! Retries for LLM API calls that survive rate limits, overloads and flaky
//! networks, without ever replaying what a caller already read.
#![warn(missing_docs, missing_debug_implementations, rust_2018_idioms, unreachable_pub)]
#![forbid(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod classify;
pub mod hint;
