//! Can the next attempt be changed to succeed? Pure rewrites of the request
//! body: a smaller `max_tokens` after a context overflow, a fallback `model`
//! after repeated overloads.

mod overflow;
mod rewrite;

pub use overflow::{overflow_max_tokens, CutRefused, OverflowCut};
pub use rewrite::{rewrite_body, BodyEdit, EditApplied, RewriteError};
