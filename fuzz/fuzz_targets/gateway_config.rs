//! The gateway's TOML configuration.
//!
//! Input: the file's text (any bytes, lossily made text). Checks: nothing
//! panics; a refusal names a field, says what is wrong, and points at a line
//! the file has; a credential never appears in a refusal.

#![no_main]

use libfuzzer_sys::fuzz_target;
use llm_retry_gateway::Config;

const SECRET: &str = "sk-fuzz-secret-0123456789";

fuzz_target!(|input: &[u8]| {
    let text = String::from_utf8_lossy(input);
    let Err(error) = Config::parse(&text, |_| Some(SECRET.to_owned())) else {
        return;
    };
    assert!(!error.field.is_empty());
    assert!(!error.problem.is_empty());
    if let Some(line) = error.line {
        assert!(line >= 1 && line <= text.split('\n').count(), "line {line}");
    }
    assert!(!error.to_string().contains(SECRET));
});
