//! The request-body rewrite behind the `max_tokens` cut and the model
//! fallback.
//!
//! Input: eight bytes of new `max_tokens`, then the body. Checks: nothing
//! panics; a rewrite succeeds only on a JSON object holding the field; its
//! output is JSON that differs from the input only in the rewritten fields,
//! every one of them now the new value; `requested_max_tokens` reads the new
//! value back; the old value reported is the one a JSON reader sees; the
//! gate's token estimate, which skims the body instead of parsing it, reads
//! the same cap as `requested_max_tokens` from every valid JSON body.

#![no_main]

use libfuzzer_sys::fuzz_target;
use llm_retry::fuzzing::{requested_max_tokens, rewrite_body, BodyEdit, MAX_TOKENS_FIELDS};
use llm_retry::rate_limit::TokenCost;
use serde_json::{Map, Value};

fn object(bytes: &[u8]) -> Option<Map<String, Value>> {
    match serde_json::from_slice(bytes).ok()? {
        Value::Object(map) => Some(map),
        _ => None,
    }
}

/// Checks one rewrite against serde_json's reading of the body.
fn check(body: &[u8], edit: &BodyEdit, fields: &[&str], new: Value) {
    let parsed = object(body);
    let Ok((out, applied)) = rewrite_body(body, edit) else {
        if let Some(map) = &parsed {
            assert!(
                !fields.iter().any(|f| map.contains_key(*f)),
                "a field was there"
            );
        }
        return;
    };
    let Some(before) = parsed else {
        // Text serde_json refuses (a lone surrogate, say) may still be
        // rewritten; the output must then be refused alike or be JSON.
        return;
    };
    let after = object(&out).expect("the rewrite of JSON is JSON");
    assert!(fields.contains(&applied.field));
    let old: Value = serde_json::from_str(&applied.old).expect("the old value is JSON");
    assert_eq!(Some(&old), before.get(applied.field));
    assert_eq!(before.len(), after.len());
    for (key, value) in &before {
        if fields.contains(&key.as_str()) {
            assert_eq!(after[key], new);
        } else {
            assert_eq!(&after[key], value);
        }
    }
}

fuzz_target!(|input: &[u8]| {
    let Some((n, body)) = input.split_first_chunk::<8>() else {
        return;
    };
    let n = u64::from_le_bytes(*n);
    if serde_json::from_slice::<Value>(body).is_ok() {
        let parsed =
            requested_max_tokens(body).map(|cap| cap.saturating_add(body.len() as u64 / 4));
        assert_eq!(TokenCost::estimate(body).map(|c| c.0), parsed);
    }
    check(
        body,
        &BodyEdit::MaxTokens(n),
        &MAX_TOKENS_FIELDS,
        Value::from(n),
    );
    if let Ok((out, _)) = rewrite_body(body, &BodyEdit::MaxTokens(n)) {
        assert_eq!(requested_max_tokens(&out), Some(n));
    }
    let model = String::from_utf8_lossy(&body[..body.len().min(16)]).into_owned();
    check(
        body,
        &BodyEdit::Model(model.clone()),
        &["model"],
        Value::from(model),
    );
});
