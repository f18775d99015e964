//! The output cap of a request body, read by skimming: top-level members
//! found by skipping strings with a vectorised search instead of parsing
//! every byte of the prompt.
//!
//! A token-paced key estimates every send's cost from its body, and the
//! body is mostly one long prompt. [`requested_max_tokens`](super::requested_max_tokens)
//! parses and validates all of it (about 5 instructions per byte);
//! skimming reads the structure only (a fraction of that on long strings).
//!
//! Invariant: on every valid JSON object the answer is the same as
//! [`requested_max_tokens`](super::requested_max_tokens)'s. A member name
//! with an escape in it is handed to that parser; a body that is not valid
//! JSON may get an answer where the parser gives none (an estimate for a
//! body its upstream will refuse anyway), never a panic.

use super::MAX_TOKENS_FIELDS;

/// The first of [`MAX_TOKENS_FIELDS`] present at top level with a
/// whole-number value, as [`requested_max_tokens`](super::requested_max_tokens)
/// reads it from a valid body.
pub(crate) fn skimmed_max_tokens(body: &[u8]) -> Option<u64> {
    match skim(body, &MAX_TOKENS_FIELDS) {
        Skimmed::Found(values) => values
            .iter()
            .flatten()
            .find_map(|raw| std::str::from_utf8(raw).ok()?.trim().parse::<u64>().ok()),
        Skimmed::Escaped => super::requested_max_tokens(body),
        Skimmed::Malformed => None,
    }
}

/// The raw JSON value of the body's top-level `model` member (its quotes
/// included), found by skimming up to it. `None` when the body is not a
/// JSON object as far as that, names no model, or has a member name with
/// an escape in it before it (a request keyed without its model is keyed
/// as before models counted).
pub(crate) fn skimmed_model(body: &[u8]) -> Option<&[u8]> {
    match skim(body, &["model"]) {
        Skimmed::Found([model]) => model,
        Skimmed::Escaped | Skimmed::Malformed => None,
    }
}

enum Skimmed<'a, const N: usize> {
    /// The raw value of the first member of each name.
    Found([Option<&'a [u8]>; N]),
    /// A member name has an escape: only a parser can compare it.
    Escaped,
    /// Not a JSON object.
    Malformed,
}

fn skim<'a, const N: usize>(body: &'a [u8], names: &[&str; N]) -> Skimmed<'a, N> {
    let mut found = [None; N];
    let mut at = skip_space(body, 0);
    if body.get(at) != Some(&b'{') {
        return Skimmed::Malformed;
    }
    at = skip_space(body, at + 1);
    if body.get(at) == Some(&b'}') {
        return Skimmed::Found(found);
    }
    loop {
        let Some(key_end) = string_end(body, at) else {
            return Skimmed::Malformed;
        };
        let key = &body[at + 1..key_end - 1];
        if key.contains(&b'\\') {
            return Skimmed::Escaped;
        }
        at = skip_space(body, key_end);
        if body.get(at) != Some(&b':') {
            return Skimmed::Malformed;
        }
        let start = skip_space(body, at + 1);
        let Some(end) = value_end(body, start) else {
            return Skimmed::Malformed;
        };
        if let Some(i) = names.iter().position(|name| name.as_bytes() == key) {
            found[i].get_or_insert(&body[start..end]);
            // Every name found: the rest of the body cannot change them
            // (the first member of a name counts).
            if found.iter().all(Option::is_some) {
                return Skimmed::Found(found);
            }
        }
        at = skip_space(body, end);
        match body.get(at) {
            Some(b',') => at = skip_space(body, at + 1),
            Some(b'}') => return Skimmed::Found(found),
            _ => return Skimmed::Malformed,
        }
    }
}

fn skip_space(body: &[u8], mut at: usize) -> usize {
    while matches!(body.get(at), Some(b' ' | b'\t' | b'\n' | b'\r')) {
        at += 1;
    }
    at
}

/// Just past the string that starts at `at` (an opening quote).
fn string_end(body: &[u8], at: usize) -> Option<usize> {
    if body.get(at) != Some(&b'"') {
        return None;
    }
    let mut at = at + 1;
    loop {
        at += memchr::memchr2(b'"', b'\\', body.get(at..)?)?;
        match body[at] {
            // An escape takes the byte after it, whatever it is.
            b'\\' => at += 2,
            _ => return Some(at + 1),
        }
    }
}

/// Just past the value that starts at `at`. Nesting is counted, not
/// recursed into: depth costs nothing but the count.
fn value_end(body: &[u8], at: usize) -> Option<usize> {
    match body.get(at)? {
        b'"' => string_end(body, at),
        b'{' | b'[' => {
            let mut depth = 0usize;
            let mut at = at;
            loop {
                match body.get(at)? {
                    b'"' => {
                        at = string_end(body, at)?;
                        continue;
                    }
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth -= 1;
                        if depth == 0 {
                            return Some(at + 1);
                        }
                    }
                    _ => {}
                }
                at += 1;
            }
        }
        // A number or a literal: up to the next delimiter.
        _ => {
            let len = body[at..]
                .iter()
                .position(|b| matches!(b, b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r'))
                .unwrap_or(body.len() - at);
            (len > 0).then_some(at + len)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::recover::requested_max_tokens;
    use proptest::prelude::*;
    use serde_json::{json, Value};

    #[test]
    fn skimming_reads_the_top_level_caps_only() {
        let cases: &[(&str, Option<u64>)] = &[
            (r#"{"max_tokens":1000,"messages":[]}"#, Some(1000)),
            (
                r#" { "messages" : [{"max_tokens":5}] , "max_tokens" : 7 } "#,
                Some(7),
            ),
            (r#"{"metadata":{"max_tokens":5}}"#, None),
            (r#"{"max_tokens":"5","max_completion_tokens":9}"#, Some(9)),
            (r#"{"max_tokens":5,"max_tokens":6}"#, Some(5)),
            (r#"{"max_tokens":-1}"#, None),
            (r#"{"max_tokens":1e3}"#, None),
            (
                r#"{"content":"say \"max_tokens\":9 \\","max_output_tokens":3}"#,
                Some(3),
            ),
            (r#"{"max\u005ftokens":4}"#, Some(4)),
            (r#"{}"#, None),
            (r#"[{"max_tokens":1}]"#, None),
            ("", None),
            (r#"{"max_tokens":"#, None),
            (r#"{"a":"unterminated"#, None),
            (r#"{"a":[[[[[[["#, None),
        ];
        for (body, want) in cases {
            assert_eq!(skimmed_max_tokens(body.as_bytes()), *want, "{body}");
        }
    }

    #[test]
    fn the_model_is_read_from_the_top_level_only() {
        let model = |body: &str| skimmed_model(body.as_bytes()).map(<[u8]>::to_vec);
        assert_eq!(
            model(r#"{"max_tokens":5,"model":"claude-x","messages":[{"model":"y"}]}"#),
            Some(br#""claude-x""#.to_vec())
        );
        assert_eq!(model(r#"{"messages":[{"model":"y"}]}"#), None);
        assert_eq!(model(r#"{"mo\u0064el":"z"}"#), None);
        assert_eq!(model("not json"), None);
        assert_eq!(model(r#"{"model":"#), None);
        // Found: what follows is not read (the provider judges the rest).
        assert_eq!(
            model(r#"{"model":"claude-x","messages":[oops"#),
            Some(br#""claude-x""#.to_vec())
        );
    }

    #[test]
    fn depth_costs_no_stack() {
        let deep = format!(
            "{{\"a\":{}{},\"max_tokens\":2}}",
            "[".repeat(200_000),
            "]".repeat(200_000)
        );
        assert_eq!(skimmed_max_tokens(deep.as_bytes()), Some(2));
    }

    /// Any JSON value, a few levels deep, with names that collide with the
    /// caps now and then.
    fn json_value() -> impl Strategy<Value = Value> {
        let name = prop_oneof![
            Just("max_tokens".to_owned()),
            Just("max_completion_tokens".to_owned()),
            Just("max_output_tokens".to_owned()),
            "[a-z\"\\\\ \u{e9}]{0,8}",
        ];
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            any::<f64>().prop_map(|f| json!(f)),
            "[ -~\u{e9}\n]{0,24}".prop_map(Value::from),
        ];
        leaf.prop_recursive(3, 24, 6, move |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..6).prop_map(Value::from),
                proptest::collection::vec((name.clone(), inner), 0..6)
                    .prop_map(|members| Value::Object(members.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        /// On every valid JSON text, compact or pretty, skimming gives
        /// the parser's answer.
        #[test]
        fn skimming_agrees_with_parsing_on_valid_json(value in json_value(), pretty: bool) {
            let text = if pretty {
                serde_json::to_string_pretty(&value)
            } else {
                serde_json::to_string(&value)
            }
            .expect("serialisable");
            prop_assert_eq!(skimmed_max_tokens(text.as_bytes()), requested_max_tokens(text.as_bytes()));
        }

        /// No input panics.
        #[test]
        fn no_input_panics(body in proptest::collection::vec(any::<u8>(), 0..256)) {
            let _ = skimmed_max_tokens(&body);
        }
    }
}
