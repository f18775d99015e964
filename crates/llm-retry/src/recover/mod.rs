//! Can the next attempt be changed to succeed? Pure rewrites of the request
//! body: a smaller `max_tokens` after a context overflow, a fallback `model`
//! after repeated overloads.
//!
//! [`overflow_max_tokens`] turns the counts of a
//! [`ContextOverflow`](crate::classify::ContextOverflow) into the new
//! `max_tokens`; [`rewrite_body`] writes it (or a fallback model) into the
//! JSON body, leaving every other value byte for byte as the caller sent it.

// Crate-private: `pub` here marks what `crate::fuzzing` re-exports for the
// fuzz targets under `--cfg fuzzing`; no other build can reach it.
#![cfg_attr(not(fuzzing), allow(unreachable_pub))]

mod overflow;
mod raw_object;
mod rewrite;
#[cfg(test)]
mod rewrite_property_tests;
#[cfg(test)]
mod rewrite_tests;
mod skim;

#[cfg(fuzzing)]
pub use overflow::CutRefused;
pub use overflow::{overflow_max_tokens, OverflowCut};
#[cfg(any(test, fuzzing))]
pub use rewrite::EditApplied;
pub use rewrite::{requested_max_tokens, rewrite_body, BodyEdit, RewriteError, MAX_TOKENS_FIELDS};
pub(crate) use skim::{skimmed_max_tokens, skimmed_model};

#[cfg(test)]
mod doc_examples {
    //! The examples this module's documentation carried while it was public.
    #![allow(clippy::unwrap_used)]

    #[test]
    fn example_1() {
        use crate::classify::ContextOverflow;
        use crate::recover::{overflow_max_tokens, rewrite_body, BodyEdit, OverflowCut};

        fn overflow() -> ContextOverflow {
            crate::classify::ProviderError::parse(br#"{"error":{"type":"invalid_request_error",
                "message":"input length and `max_tokens` exceed context limit: 188059 + 20000 > 200000"}}"#)
                .and_then(|e| e.context_overflow())
                .expect("overflow")
        }
        let overflow: ContextOverflow = overflow(); // "188059 + 20000 > 200000"
        let max_tokens =
            overflow_max_tokens(&overflow, &OverflowCut::default()).expect("a cut helps");
        let body = br#"{"model":"claude-sonnet-4-5","max_tokens":20000,"messages":[]}"#;
        let (body, applied) =
            rewrite_body(body, &BodyEdit::MaxTokens(max_tokens)).expect("JSON body");
        assert_eq!(
            &body[..],
            br#"{"model":"claude-sonnet-4-5","max_tokens":10941,"messages":[]}"#
        );
        assert_eq!(
            (applied.old.as_str(), applied.new.as_str()),
            ("20000", "10941")
        );
    }
}
