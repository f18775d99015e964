//! Properties of [`rewrite_body`]: for any JSON object, only the target
//! field changes; for any bytes, no panic.

#![allow(clippy::unwrap_used)]

use super::raw_object::RawObject;
use super::*;
use proptest::prelude::*;
use serde_json::{Map, Value};

fn leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(Value::from),
        any::<String>().prop_map(Value::from),
    ]
}

fn json() -> impl Strategy<Value = Value> {
    leaf().prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec((any::<String>(), inner), 0..6)
                .prop_map(|pairs| Value::Object(pairs.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

/// Top-level members (no target field among them), in a chosen order.
fn members() -> impl Strategy<Value = Vec<(String, Value)>> {
    let key = any::<String>().prop_filter("not a target", |k| {
        !MAX_TOKENS_FIELDS.contains(&k.as_str()) && k != "model"
    });
    prop::collection::vec((key, json()), 0..8).prop_map(|mut pairs| {
        let mut seen = std::collections::HashSet::new();
        pairs.retain(|(k, _)| seen.insert(k.clone()));
        pairs
    })
}

/// Writes an object by hand, so member order and formatting vary.
fn body_text(members: &[(String, Value)], pretty: bool) -> String {
    let encode = |v: &Value| {
        if pretty {
            serde_json::to_string_pretty(v).unwrap()
        } else {
            serde_json::to_string(v).unwrap()
        }
    };
    let sep = if pretty { " ,\n  " } else { "," };
    let pairs: Vec<String> = members
        .iter()
        .map(|(k, v)| format!("{} : {}", encode(&Value::from(k.as_str())), encode(v)))
        .collect();
    format!("{{{}}}", pairs.join(sep))
}

/// `(key, raw value)` of every member, in order.
fn raw_members(text: &[u8]) -> Vec<(String, String)> {
    let object = RawObject::parse(std::str::from_utf8(text).unwrap()).unwrap();
    let pairs = object.members.iter();
    pairs
        .map(|(k, v)| (k.clone(), v.get().to_owned()))
        .collect()
}

fn check_only_field_changed(body: &str, out: &[u8], field: &str, new: &Value) {
    let before = raw_members(body.as_bytes());
    let after = raw_members(out);
    assert_eq!(before.len(), after.len());
    for ((k0, v0), (k1, v1)) in before.iter().zip(&after) {
        assert_eq!(k0, k1, "key order");
        if k0 == field {
            assert_eq!(&serde_json::from_str::<Value>(v1).unwrap(), new);
        } else {
            assert_eq!(v0, v1, "raw value of {k0:?}");
        }
    }
    let mut value_before: Value = serde_json::from_str(body).unwrap();
    let mut value_after: Value = serde_json::from_slice(out).unwrap();
    assert_eq!(&value_after[field], new);
    value_before.as_object_mut().unwrap().remove(field);
    value_after.as_object_mut().unwrap().remove(field);
    assert_eq!(value_before, value_after);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn max_tokens_changes_and_nothing_else(
        mut members in members(),
        at in any::<prop::sample::Index>(),
        field in prop::sample::select(MAX_TOKENS_FIELDS.to_vec()),
        old in leaf(),
        new in any::<u64>(),
        pretty in any::<bool>(),
    ) {
        let at = at.index(members.len() + 1);
        members.insert(at, (field.to_owned(), old.clone()));
        let body = body_text(&members, pretty);
        let (out, done) = rewrite_body(body.as_bytes(), &BodyEdit::MaxTokens(new)).unwrap();
        prop_assert_eq!(done.field, field);
        prop_assert_eq!(done.old, serde_json::to_string(&old).unwrap());
        prop_assert_eq!(done.new, new.to_string());
        check_only_field_changed(&body, &out, field, &Value::from(new));
    }

    #[test]
    fn model_changes_and_nothing_else(
        mut members in members(),
        at in any::<prop::sample::Index>(),
        model in any::<String>(),
        pretty in any::<bool>(),
    ) {
        let at = at.index(members.len() + 1);
        members.insert(at, ("model".to_owned(), Value::from("claude-sonnet-4-5")));
        let body = body_text(&members, pretty);
        let (out, done) = rewrite_body(body.as_bytes(), &BodyEdit::Model(model.clone())).unwrap();
        prop_assert_eq!(done.old, "\"claude-sonnet-4-5\"");
        check_only_field_changed(&body, &out, "model", &Value::from(model));
    }

    #[test]
    fn missing_target_is_reported(members in members(), pretty in any::<bool>()) {
        let body = body_text(&members, pretty);
        let got = rewrite_body(body.as_bytes(), &BodyEdit::MaxTokens(1)).map(|(_, a)| a);
        prop_assert_eq!(got, Err(RewriteError::FieldMissing("max_tokens")));
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        if let Ok((out, _)) = rewrite_body(&bytes, &BodyEdit::MaxTokens(3000)) {
            prop_assert!(serde_json::from_slice::<Value>(&out).is_ok());
        }
    }

    #[test]
    fn damaged_bodies_never_panic(
        mut members in members(),
        cut in any::<prop::sample::Index>(),
        flip in any::<(prop::sample::Index, u8)>(),
    ) {
        members.insert(0, ("max_tokens".to_owned(), Value::from(1)));
        let mut body = body_text(&members, false).into_bytes();
        let (at, byte) = flip;
        let at = at.index(body.len());
        body[at] = byte;
        body.truncate(cut.index(body.len() + 1));
        for edit in [BodyEdit::MaxTokens(7), BodyEdit::Model("m".into())] {
            if let Ok((out, _)) = rewrite_body(&body, &edit) {
                let value: Value = serde_json::from_slice(&out).unwrap();
                prop_assert!(value.is_object());
            }
        }
    }
}
