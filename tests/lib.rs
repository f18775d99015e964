//! End-to-end tests for llm-retry live in `tests/`.

// The README's code blocks, compiled and run as doctests of this crate,
// which depends on every crate they use.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
struct ReadmeDoctests;
