//! Provider error bodies, as the classifier reads them.
//!
//! Input: two bytes of status, then the body. Checks: nothing panics; a
//! body is an envelope only when it is a JSON object with an `error` member;
//! `Display` never shows the message; a 1xx, 2xx or 3xx answer is a success
//! whatever its body; the classification of a stream's error event and of a
//! 429 never panic, and an overload is never fatal.

#![no_main]

use http::{HeaderMap, StatusCode};
use libfuzzer_sys::fuzz_target;
use llm_retry::classify::{Classification, ProviderError};
use llm_retry::fuzzing::{classify_response, classify_stream_error};

fuzz_target!(|input: &[u8]| {
    let Some((status, body)) = input.split_first_chunk::<2>() else {
        return;
    };
    let status = 100 + u16::from_le_bytes(*status) % 500;
    let status = StatusCode::from_u16(status).expect("100..=599");
    let provider = ProviderError::parse(body);
    let headers = HeaderMap::new();
    let verdict = classify_response(status, &headers, provider.as_ref());
    if !(status.is_client_error() || status.is_server_error()) {
        assert_eq!(verdict, Classification::Success);
    }
    let _ = classify_stream_error(provider.as_ref());
    let Some(error) = provider else {
        return;
    };
    let stripped = body.strip_prefix("\u{feff}".as_bytes()).unwrap_or(body);
    let value: serde_json::Value = serde_json::from_slice(stripped).expect("an envelope is JSON");
    assert!(value.as_object().is_some_and(|o| o.contains_key("error")));
    let shown = error.to_string();
    assert!(
        shown == "provider error"
            || Some(shown.as_str()) == error.kind()
            || Some(shown.as_str()) == error.code()
    );
    if error.is_overloaded() {
        let verdict = classify_response(StatusCode::from_u16(529).unwrap(), &headers, Some(&error));
        assert!(verdict.is_retryable());
    }
    let _ = error.context_overflow();
    let _ = (error.is_rate_limit(), error.is_quota());
});
