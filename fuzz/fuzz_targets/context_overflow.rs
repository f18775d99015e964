//! Context-overflow messages, and the `max_tokens` cut computed from them.
//!
//! Input: the provider's message (any bytes, lossily made text) inside an
//! Anthropic and an OpenAI envelope. Checks: nothing panics; both envelopes
//! read the same counts; a cut, when made, is at least the floor and
//! exactly `max(floor, limit - input - margin)`; a refusal says why.

#![no_main]

use libfuzzer_sys::fuzz_target;
use llm_retry::classify::ProviderError;
use llm_retry::fuzzing::{overflow_max_tokens, CutRefused};
use llm_retry::policy::OverflowCut;
use serde_json::json;

fuzz_target!(|input: &[u8]| {
    let message = String::from_utf8_lossy(input);
    let anthropic = json!({"type": "error", "error": {
        "type": "invalid_request_error", "message": message}});
    let openai = json!({"error": {"message": message, "type": "invalid_request_error",
        "param": "messages", "code": "context_length_exceeded"}});
    let read = |body: serde_json::Value| {
        let bytes = serde_json::to_vec(&body).expect("serialisable");
        ProviderError::parse(&bytes).expect("an envelope")
    };
    let from_openai = read(openai)
        .context_overflow()
        .expect("the code names an overflow");
    if let Some(counts) = read(anthropic).context_overflow() {
        assert_eq!(counts, from_openai);
    }
    let cut = OverflowCut::default();
    match overflow_max_tokens(&from_openai, &cut) {
        Ok(max_tokens) => {
            let input = from_openai.input_tokens.expect("a cut needs the input");
            let limit = from_openai.context_limit.expect("a cut needs the limit");
            assert!(input < limit);
            assert_eq!(
                max_tokens,
                (limit - input).saturating_sub(cut.margin).max(cut.floor)
            );
        }
        Err(CutRefused::CountsUnknown) => {
            assert!(from_openai.input_tokens.is_none() || from_openai.context_limit.is_none());
        }
        Err(CutRefused::InputExceedsLimit {
            input_tokens,
            context_limit,
        }) => {
            assert!(input_tokens >= context_limit);
        }
        Err(_) => {}
    }
});
