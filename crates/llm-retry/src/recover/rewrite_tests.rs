//! Table tests for [`rewrite_body`].

#![allow(clippy::unwrap_used)]

use super::*;
use serde_json::Value;

fn cut(body: &str, n: u64) -> Result<(String, EditApplied), RewriteError> {
    let (out, applied) = rewrite_body(body.as_bytes(), &BodyEdit::MaxTokens(n))?;
    Ok((String::from_utf8(out.to_vec()).unwrap(), applied))
}

fn applied(field: &'static str, old: &str, new: &str) -> EditApplied {
    EditApplied {
        field,
        old: old.to_owned(),
        new: new.to_owned(),
    }
}

/// The body as a `Value`, with `fields` removed from the top level.
fn without(body: &[u8], fields: &[&str]) -> Value {
    let mut value: Value = serde_json::from_slice(body).unwrap();
    for field in fields {
        value.as_object_mut().unwrap().remove(*field);
    }
    value
}

#[test]
fn max_tokens_table() {
    let cases = [
        (
            r#"{"messages":[ {"a" : 1} ],"max_tokens":20000}"#,
            r#"{"messages":[ {"a" : 1} ],"max_tokens":10941}"#,
            applied("max_tokens", "20000", "10941"),
        ),
        (
            "{\n  \"model\" : \"gpt-4o\",\n  \"max_completion_tokens\" : 4096\n}\n",
            r#"{"model":"gpt-4o","max_completion_tokens":10941}"#,
            applied("max_completion_tokens", "4096", "10941"),
        ),
        (
            r#"{"input":"hi","max_output_tokens":null}"#,
            r#"{"input":"hi","max_output_tokens":10941}"#,
            applied("max_output_tokens", "null", "10941"),
        ),
        // Several: all are set, the first of MAX_TOKENS_FIELDS is reported.
        (
            r#"{"max_output_tokens":1,"max_completion_tokens":2,"max_tokens":3}"#,
            r#"{"max_output_tokens":10941,"max_completion_tokens":10941,"max_tokens":10941}"#,
            applied("max_tokens", "3", "10941"),
        ),
        // Duplicates: every occurrence, the last one reported.
        (
            r#"{"max_tokens":1,"x":[],"max_tokens":2.5e3}"#,
            r#"{"max_tokens":10941,"x":[],"max_tokens":10941}"#,
            applied("max_tokens", "2.5e3", "10941"),
        ),
        // A key spelled with escapes is the same key.
        (
            r#"{"max\u005ftokens":7}"#,
            r#"{"max_tokens":10941}"#,
            applied("max_tokens", "7", "10941"),
        ),
    ];
    for (body, want_body, want_applied) in cases {
        assert_eq!(
            cut(body, 10941),
            Ok((want_body.to_owned(), want_applied)),
            "{body}"
        );
    }
}

#[test]
fn model_edit_reports_json_strings() {
    let body = br#"{"model":"claude-sonnet-4-5","max_tokens":20000}"#;
    let edit = BodyEdit::Model("claude-haiku-4-5 \"fast\"".to_owned());
    let (out, done) = rewrite_body(body, &edit).unwrap();
    assert_eq!(
        &out[..],
        br#"{"model":"claude-haiku-4-5 \"fast\"","max_tokens":20000}"#
    );
    assert_eq!(
        done,
        applied(
            "model",
            "\"claude-sonnet-4-5\"",
            "\"claude-haiku-4-5 \\\"fast\\\"\""
        )
    );
    let max = BodyEdit::MaxTokens(u64::MAX);
    let (_, done) = rewrite_body(body, &max).unwrap();
    assert_eq!(done.new, "18446744073709551615");
}

#[test]
fn missing_fields_and_bad_bodies_are_refused() {
    let missing_model = rewrite_body(br#"{"max_tokens":1}"#, &BodyEdit::Model("m".into()));
    assert_eq!(missing_model, Err(RewriteError::FieldMissing("model")));
    let not_json = Err(RewriteError::NotJsonObject);
    let cases: [(&[u8], _); 12] = [
        (
            br#"{"model":"m"}"#,
            Err(RewriteError::FieldMissing("max_tokens")),
        ),
        (
            br#"{"params":{"max_tokens":1}}"#,
            Err(RewriteError::FieldMissing("max_tokens")),
        ),
        (
            br#"{"maxTokens":1}"#,
            Err(RewriteError::FieldMissing("max_tokens")),
        ),
        (b"{}", Err(RewriteError::FieldMissing("max_tokens"))),
        (b"", not_json.clone()),
        (br#"[{"max_tokens":1}]"#, not_json.clone()),
        (br#""{\"max_tokens\":1}""#, not_json.clone()),
        (br#"{"max_tokens":1"#, not_json.clone()),
        (br#"{"max_tokens":1}{}"#, not_json.clone()),
        (b"\xef\xbb\xbf{\"max_tokens\":1}", not_json.clone()),
        (b"{\"max_tokens\":1,\"x\":\"\xff\"}", not_json.clone()),
        (b"{\"max_tokens\":1,\"x\":\"\xc3\"}", not_json.clone()),
    ];
    for (body, want) in cases {
        let got = rewrite_body(body, &BodyEdit::MaxTokens(5)).map(|(_, a)| a);
        assert_eq!(got, want, "{}", String::from_utf8_lossy(body));
    }
}

#[test]
fn every_other_value_is_kept_byte_for_byte() {
    let members = [
        ("\"model\"", "\"claude-sonnet-4-5\""),
        ("\"messages\"", "[ {\"a\" : 1},\n\t{\"b\":[ ]} ]"),
        ("\"temperature\"", "1.0e+0"),
        ("\"big\"", "123456789012345678901234567890"),
        ("\"neg\"", "-0"),
        ("\"esc\"", r#""caf\u00e9 \/ \ud83d\ude00 \"q\" \\""#),
        ("\"unicode\"", "\"日本語 😀\""),
        ("\"clé \\u0000\\n\"", "{\"nested\" :{\"max_tokens\" : 5}}"),
        ("\"max_tokens\"", "20000"),
        ("\"stop\"", "null"),
    ];
    let body = members
        .iter()
        .map(|(k, v)| format!("\n  {k} :  {v}"))
        .collect::<Vec<_>>()
        .join(" ,");
    let body = format!("{{{body}\n}}");
    let (out, done) = rewrite_body(body.as_bytes(), &BodyEdit::MaxTokens(42)).unwrap();
    assert_eq!(done, applied("max_tokens", "20000", "42"));
    let text = std::str::from_utf8(&out).unwrap();
    // Raw text, nested whitespace and escapes included, is still there.
    for (_, value) in members.iter().filter(|(k, _)| *k != "\"max_tokens\"") {
        assert!(text.contains(value), "{value} changed in {text}");
    }
    assert!(text.contains("\"clé \\u0000\\n\":"), "{text}");
    assert_eq!(
        without(&out, &["max_tokens"]),
        without(body.as_bytes(), &["max_tokens"])
    );
    let value: Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(value["max_tokens"], 42);
}

#[test]
fn key_order_is_kept() {
    let body = br#"{"z":1,"max_tokens":2,"a":3,"m":4,"b":5}"#;
    let (out, _) = rewrite_body(body, &BodyEdit::MaxTokens(9)).unwrap();
    assert_eq!(&out[..], br#"{"z":1,"max_tokens":9,"a":3,"m":4,"b":5}"#);
}

#[test]
fn big_bodies_are_rewritten_whole() {
    let content = "x\\n\u{e9}".repeat(1 << 18);
    let body = format!(
        r#"{{"model":"m","messages":[{{"role":"user","content":"{content}"}}],"max_tokens":20000}}"#
    );
    assert!(body.len() > 1 << 20);
    let (out, done) = rewrite_body(body.as_bytes(), &BodyEdit::MaxTokens(10941)).unwrap();
    assert_eq!(done.old, "20000");
    assert_eq!(out.len(), body.len());
    assert_eq!(&out[..], body.replace("20000", "10941").as_bytes());
}

#[test]
fn errors_say_what_cannot_be_done() {
    let not_json = RewriteError::NotJsonObject.to_string();
    assert!(not_json.contains("request body is not a JSON object, so max_tokens cannot be cut"));
    let missing = RewriteError::FieldMissing("max_tokens").to_string();
    assert!(missing.contains("max_completion_tokens"), "{missing}");
    let model = RewriteError::FieldMissing("model").to_string();
    assert!(model.contains("no top-level `model` field"), "{model}");
}
