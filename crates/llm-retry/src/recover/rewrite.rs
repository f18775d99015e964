//! Rewriting one top-level field of a JSON request body.

use super::raw_object::RawObject;
use bytes::Bytes;
use std::fmt;

/// The output-token fields a [`BodyEdit::MaxTokens`] rewrites, in the order
/// that picks the one reported: Anthropic and OpenAI Chat Completions
/// (`max_tokens`), newer OpenAI Chat Completions (`max_completion_tokens`),
/// OpenAI Responses (`max_output_tokens`).
pub const MAX_TOKENS_FIELDS: [&str; 3] =
    ["max_tokens", "max_completion_tokens", "max_output_tokens"];

/// The field a [`BodyEdit::Model`] rewrites.
const MODEL_FIELDS: [&str; 1] = ["model"];

/// One change to a JSON request body.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum BodyEdit {
    /// Set whichever output-token field the request used (`max_tokens`,
    /// `max_completion_tokens` or `max_output_tokens`) to this value.
    MaxTokens(u64),
    /// Set the top-level `model`.
    Model(String),
}

/// What an edit changed: the field, its old value (as JSON text) and new value.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct EditApplied {
    /// The field that was rewritten.
    pub field: &'static str,
    /// Its previous value, as JSON text.
    pub old: String,
    /// Its new value, as JSON text.
    pub new: String,
}

/// Why a body could not be rewritten.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RewriteError {
    /// The body is not a JSON object.
    NotJsonObject,
    /// The body has none of the fields the edit targets.
    FieldMissing(&'static str),
}

impl fmt::Display for RewriteError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RewriteError::NotJsonObject => f.write_str(
                "request body is not a JSON object, so max_tokens cannot be cut \
                 nor the model replaced",
            ),
            RewriteError::FieldMissing("max_tokens") => f.write_str(
                "request body has no top-level max_tokens, max_completion_tokens or \
                 max_output_tokens field, so max_tokens cannot be cut",
            ),
            RewriteError::FieldMissing(field) => write!(
                f,
                "request body has no top-level `{field}` field, so it cannot be rewritten"
            ),
        }
    }
}

impl std::error::Error for RewriteError {}

/// Applies `edit` to a JSON object body; everything else is kept.
///
/// Only top-level members are touched. Every other member keeps its key
/// order and its value byte for byte (nested formatting, number spelling
/// and string escapes included); whitespace between top-level members is
/// dropped and keys are re-escaped (`"\u00e9"` may become `"é"`), which
/// changes no JSON value.
///
/// - [`BodyEdit::MaxTokens`] rewrites every top-level member named in
///   [`MAX_TOKENS_FIELDS`]. When several are present all are set, and the
///   one reported is the first of that list (`max_tokens` before
///   `max_completion_tokens` before `max_output_tokens`), whatever the order
///   in the body. None present → [`RewriteError::FieldMissing`]`("max_tokens")`.
/// - [`BodyEdit::Model`] rewrites `model`; missing →
///   [`RewriteError::FieldMissing`]`("model")`.
///
/// Whatever the old value (a number, `null`, a string), it is replaced. A key
/// that occurs more than once is rewritten at every occurrence; the reported
/// old value is the last one, the one most JSON parsers keep.
///
/// Not UTF-8, not JSON, not exactly one object (a byte-order mark, trailing
/// data) → [`RewriteError::NotJsonObject`]. Never panics; nesting depth is
/// bounded only by the body's size.
pub fn rewrite_body(body: &[u8], edit: &BodyEdit) -> Result<(Bytes, EditApplied), RewriteError> {
    let text = std::str::from_utf8(body).map_err(|_| RewriteError::NotJsonObject)?;
    let object = RawObject::parse(text).ok_or(RewriteError::NotJsonObject)?;
    let (targets, new): (&[&'static str], String) = match edit {
        BodyEdit::MaxTokens(n) => (&MAX_TOKENS_FIELDS, n.to_string()),
        BodyEdit::Model(model) => (
            &MODEL_FIELDS,
            serde_json::Value::from(model.as_str()).to_string(),
        ),
    };
    let last_value = |field: &str| {
        let mut same = object.members.iter().filter(|(key, _)| key == field);
        same.next_back().map(|(_, value)| value.get())
    };
    let Some((field, old)) = targets
        .iter()
        .find_map(|&field| Some((field, last_value(field)?)))
    else {
        return Err(RewriteError::FieldMissing(targets[0]));
    };
    let old = old.to_owned();
    let out = object.write(|key| targets.contains(&key), &new);
    Ok((Bytes::from(out), EditApplied { field, old, new }))
}

/// The output-token limit a JSON request body asks for: the first of
/// [`MAX_TOKENS_FIELDS`] present at top level with a whole-number value.
pub fn requested_max_tokens(body: &[u8]) -> Option<u64> {
    let text = std::str::from_utf8(body).ok()?;
    let object = RawObject::parse(text)?;
    MAX_TOKENS_FIELDS.iter().find_map(|field| {
        object
            .members
            .iter()
            .find(|(key, _)| key == field)
            .and_then(|(_, value)| value.get().trim().parse::<u64>().ok())
    })
}

#[cfg(test)]
mod doc_examples {
    //! The examples this module's documentation carried while it was public.
    #![allow(clippy::unwrap_used)]

    #[test]
    fn example_1() {
        use crate::recover::{rewrite_body, BodyEdit};

        let body = br#"{"model":"m","max_tokens":20000,"messages":[ {"role":"user"} ]}"#;
        let (new, applied) = rewrite_body(body, &BodyEdit::MaxTokens(10941)).expect("rewritable");
        assert_eq!(
            &new[..],
            br#"{"model":"m","max_tokens":10941,"messages":[ {"role":"user"} ]}"#
        );
        assert_eq!(
            (applied.field, applied.old.as_str()),
            ("max_tokens", "20000")
        );
    }
}
