//! Chat Completions chunks: does this `chat.completion.chunk` carry output?

use serde_json::{Map, Value};

/// Whether `object` is a Chat Completions chunk: `"object":
/// "chat.completion.chunk"`, or (Azure's prompt-filter chunk, some
/// compatible servers) no or an empty `object` next to a `choices` array.
pub(super) fn is_chunk(object: &Map<String, Value>) -> bool {
    match object.get("object") {
        Some(Value::String(kind)) if kind == "chat.completion.chunk" => true,
        None | Some(Value::Null) => object.get("choices").is_some_and(Value::is_array),
        Some(Value::String(kind)) if kind.is_empty() => {
            object.get("choices").is_some_and(Value::is_array)
        }
        _ => false,
    }
}

/// Whether a chunk carries output: some choice has a non-empty delta field
/// other than `role` (`content`, `tool_calls`, `refusal`, `function_call`,
/// `reasoning`, `reasoning_content`, `audio`, or any field not known to be
/// empty), or a `finish_reason`. `choices` missing or not an array counts as
/// output (unknown shapes commit); an empty `choices` (usage-only, prompt
/// filter results) does not.
///
/// A `finish_reason` counts as output so that an empty but complete answer
/// (`finish_reason: "stop"` or `"content_filter"` with no text) commits
/// instead of being retried as a stream that ended before content.
pub(super) fn has_output(chunk: &Map<String, Value>) -> bool {
    match chunk.get("choices") {
        Some(Value::Array(choices)) => choices.iter().any(choice_has_output),
        _ => true,
    }
}

fn choice_has_output(choice: &Value) -> bool {
    let Some(choice) = choice.as_object() else {
        return true;
    };
    if choice.get("finish_reason").is_some_and(|r| !is_empty(r)) {
        return true;
    }
    match choice.get("delta") {
        None | Some(Value::Null) => false,
        Some(Value::Object(delta)) => delta
            .iter()
            .any(|(key, value)| key != "role" && !is_empty(value)),
        Some(_) => true,
    }
}

/// `null`, `""`, `[]` or `{}`.
fn is_empty(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
        Value::Bool(_) | Value::Number(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(json: &str) -> Map<String, Value> {
        match serde_json::from_str(json) {
            Ok(Value::Object(object)) => object,
            other => panic!("not an object: {json} ({other:?})"),
        }
    }

    #[test]
    fn chunk_table() {
        let head = r#""id":"chatcmpl-123","object":"chat.completion.chunk","created":1694268190,"model":"gpt-4o-mini","system_fingerprint":"fp_44709d6fcb""#;
        let choice = |inner: &str| format!(r#"{{{head},"choices":[{inner}]}}"#);
        // (chunk, is a chunk, has output)
        let cases = [
            (choice(r#"{"index":0,"delta":{"role":"assistant","content":"","refusal":null},"logprobs":null,"finish_reason":null}"#), true, false),
            (choice(r#"{"index":0,"delta":{"role":"assistant","content":null,"reasoning_content":""},"finish_reason":null}"#), true, false),
            (choice(r#"{"index":0,"delta":{"tool_calls":[]},"finish_reason":""}"#), true, false),
            (choice(r#"{"index":0,"finish_reason":null}"#), true, false),
            (choice(r#"{"index":0,"delta":{"content":"Hello"},"logprobs":null,"finish_reason":null}"#), true, true),
            (choice(r#"{"index":0,"delta":{"content":" "},"finish_reason":null}"#), true, true),
            (choice(r#"{"index":0,"delta":{"role":"assistant","content":null,"tool_calls":[{"index":0,"id":"call_abc","type":"function","function":{"name":"get_weather","arguments":""}}]},"finish_reason":null}"#), true, true),
            (choice(r#"{"index":0,"delta":{"refusal":"I can't help with that."},"finish_reason":null}"#), true, true),
            (choice(r#"{"index":0,"delta":{"function_call":{"name":"f","arguments":""}},"finish_reason":null}"#), true, true),
            (choice(r#"{"index":0,"delta":{"reasoning_content":"Let me think"},"finish_reason":null}"#), true, true),
            (choice(r#"{"index":0,"delta":{"reasoning":"Hmm"},"finish_reason":null}"#), true, true),
            (choice(r#"{"index":0,"delta":{"audio":{"id":"audio_1","data":"UklGR"}},"finish_reason":null}"#), true, true),
            (choice(r#"{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}"#), true, true),
            (choice(r#"{"index":0,"delta":"text"}"#), true, true),
            (choice(r#"7"#), true, true),
            (choice(r#"{"index":0,"delta":{"role":"assistant"}},{"index":1,"delta":{"content":"B"}}"#), true, true),
            (format!(r#"{{{head},"choices":[],"usage":{{"prompt_tokens":9,"completion_tokens":12,"total_tokens":21}}}}"#), true, false),
            (r#"{"choices":[],"created":0,"id":"","model":"","object":"","prompt_filter_results":[{"prompt_index":0,"content_filter_results":{}}]}"#.to_owned(), true, false),
            (r#"{"id":"x","choices":[{"index":0,"delta":{"content":"Hi"}}]}"#.to_owned(), true, true),
            (format!(r#"{{{head}}}"#), true, true),
            (format!(r#"{{{head},"choices":null}}"#), true, true),
            (r#"{"object":"chat.completion","choices":[]}"#.to_owned(), false, false),
            (r#"{"object":"response","choices":[]}"#.to_owned(), false, false),
            (r#"{"type":"content_block_delta"}"#.to_owned(), false, true),
        ];
        for (json, chunk, output) in cases {
            let object = object(&json);
            assert_eq!(is_chunk(&object), chunk, "{json}");
            assert_eq!(has_output(&object), output, "{json}");
        }
    }
}
