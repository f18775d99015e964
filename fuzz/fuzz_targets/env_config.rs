//! The retry policy's environment configuration (`LLM_RETRY_*`).
//!
//! Input: values separated by newlines, given to the variables in order
//! (an empty value leaves its variable unset). Checks: nothing panics; a
//! refusal names the variable at fault and quotes its value escaped, never
//! raw; a policy that builds keeps every bound it was given.

#![no_main]

use libfuzzer_sys::fuzz_target;
use llm_retry::RetryPolicy;

const VARS: &[&str] = &[
    "LLM_RETRY_MAX_RETRIES",
    "LLM_RETRY_MAX_ELAPSED_SECS",
    "LLM_RETRY_MAX_SERVER_WAIT_SECS",
    "LLM_RETRY_INITIAL_BACKOFF_MS",
    "LLM_RETRY_MAX_BACKOFF_MS",
    "LLM_RETRY_JITTER",
    "LLM_RETRY_MAX_REPLAY_BODY_BYTES",
    "LLM_RETRY_MAX_CONSECUTIVE_OVERLOADS",
    "LLM_RETRY_FALLBACK_MODEL",
    "LLM_RETRY_BEHIND_GATEWAY",
];

fuzz_target!(|input: &[u8]| {
    let text = String::from_utf8_lossy(input);
    let values: Vec<&str> = text.split('\n').collect();
    let lookup = |name: &str| {
        let at = VARS.iter().position(|v| *v == name)?;
        values.get(at).map(|v| (*v).to_owned())
    };
    let built = RetryPolicy::builder().from_env_with(lookup);
    let builder = match built {
        Ok(builder) => builder,
        Err(error) => {
            let shown = error.to_string();
            assert!(VARS.iter().any(|v| shown.contains(v)), "{shown}");
            assert!(!shown.contains('\n') && !shown.contains('\r'), "{shown:?}");
            return;
        }
    };
    let Ok(policy) = builder.build() else {
        return;
    };
    if let Some(retries) = lookup("LLM_RETRY_MAX_RETRIES").and_then(|v| v.trim().parse().ok()) {
        let retries: u32 = retries;
        assert_eq!(policy.max_retries(), retries);
    }
});
