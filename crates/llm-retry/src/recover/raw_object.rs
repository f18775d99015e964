//! A JSON object read as its top-level members, values kept as raw text.
//!
//! `serde_json::Value` would re-serialise every nested value (reformatting
//! numbers, re-escaping strings, reordering keys); here each member's value
//! is a [`RawValue`] borrowed from the input, so it can be written back byte
//! for byte. Keys are decoded (escapes resolved) and re-escaped on output.

use serde::de::{Deserializer, MapAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;
use std::fmt;

/// The members of one JSON object, in document order, duplicates kept.
#[derive(Debug)]
pub(super) struct RawObject<'a> {
    pub(super) members: Vec<(String, &'a RawValue)>,
}

impl<'a> RawObject<'a> {
    /// Parses `text` as exactly one JSON object (surrounding whitespace
    /// allowed); `None` for anything else. Never panics: nested values are
    /// skipped without recursion, so depth costs memory in the input only.
    pub(super) fn parse(text: &'a str) -> Option<RawObject<'a>> {
        serde_json::from_str(text).ok()
    }

    /// Writes the object back as `{"key":raw,…}`, with `new` in place of
    /// the value of every member whose key satisfies `replace`.
    pub(super) fn write(&self, replace: impl Fn(&str) -> bool, new: &str) -> Vec<u8> {
        let sizes = self
            .members
            .iter()
            .map(|(k, v)| k.len() + v.get().len() + 4);
        let mut out = Vec::with_capacity(sizes.sum::<usize>() + new.len() + 2);
        out.push(b'{');
        for (index, (key, value)) in self.members.iter().enumerate() {
            if index > 0 {
                out.push(b',');
            }
            push_json_string(&mut out, key);
            out.push(b':');
            let value = if replace(key) { new } else { value.get() };
            out.extend_from_slice(value.as_bytes());
        }
        out.push(b'}');
        out
    }
}

/// Appends `s` as a JSON string literal.
fn push_json_string(out: &mut Vec<u8>, s: &str) {
    // Serialising a `str` into a `Vec` cannot fail; the fallback is never taken.
    if serde_json::to_writer(&mut *out, s).is_err() {
        out.extend_from_slice(b"\"\"");
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for RawObject<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(MembersVisitor(std::marker::PhantomData))
    }
}

struct MembersVisitor<'a>(std::marker::PhantomData<&'a ()>);

impl<'de: 'a, 'a> Visitor<'de> for MembersVisitor<'a> {
    type Value = RawObject<'a>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<M: MapAccess<'de>>(self, mut map: M) -> Result<Self::Value, M::Error> {
        let mut members = Vec::with_capacity(map.size_hint().unwrap_or(8).min(64));
        while let Some(key) = map.next_key::<String>()? {
            let value: &'de RawValue = map.next_value()?;
            members.push((key, value));
        }
        Ok(RawObject { members })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys_and_values(text: &str) -> Option<Vec<(String, String)>> {
        let object = RawObject::parse(text)?;
        let pairs = object.members.iter();
        Some(
            pairs
                .map(|(k, v)| (k.clone(), v.get().to_owned()))
                .collect(),
        )
    }

    #[test]
    fn members_keep_order_duplicates_and_raw_text() {
        let text = " {\"b\" : [ 1 ,2 ] ,\"a\":1.50e1, \"b\":{ }, \"\\u00e9\\n\":\"x\\/\"}\n";
        let want = [
            ("b", "[ 1 ,2 ]"),
            ("a", "1.50e1"),
            ("b", "{ }"),
            ("é\n", "\"x\\/\""),
        ];
        let want: Vec<_> = want
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        assert_eq!(keys_and_values(text), Some(want));
    }

    #[test]
    fn only_a_single_object_parses() {
        for text in [
            "",
            " ",
            "[]",
            "1",
            "\"{}\"",
            "null",
            "{",
            "{}}",
            "{} {}",
            "{\"a\"}",
            "{\"a\":}",
            "{\"a\":1,}",
            "{'a':1}",
            "\u{feff}{}",
            "{\"a\":01}",
        ] {
            assert!(RawObject::parse(text).is_none(), "{text:?}");
        }
        assert_eq!(keys_and_values(" {} "), Some(Vec::new()));
    }

    #[test]
    fn deep_nesting_does_not_overflow_the_stack() {
        let depth = 200_000;
        let text = format!("{{\"a\":{}{}}}", "[".repeat(depth), "]".repeat(depth));
        let object = RawObject::parse(&text).expect("valid");
        assert_eq!(object.members[0].1.get().len(), 2 * depth);
    }

    #[test]
    fn write_escapes_keys() {
        let object = RawObject::parse(r#"{"q\"\\\u0001":1,"x":2}"#).expect("valid");
        let out = object.write(|k| k == "x", "3");
        assert_eq!(out, br#"{"q\"\\\u0001":1,"x":3}"#);
    }
}
