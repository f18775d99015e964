//! Config files of any shape: read or refused with a field, never a panic.
#![allow(clippy::unwrap_used)]

use llm_retry_gateway::Config;
use proptest::prelude::*;

/// Lines a config might have, right or wrong, to be shuffled together.
const LINES: &[&str] = &[
    "[[route]]",
    "[[route.target]]",
    "name = \"a\"",
    "name = \"b\"",
    "name = \"\"",
    "path_prefix = \"/v1\"",
    "path_prefix = \"v1\"",
    "models = [\"m\"]",
    "models = 3",
    "deadline = \"10s\"",
    "deadline = \"-1s\"",
    "deadline = \"99999999999999999999m\"",
    "exhaustion_retry = { max_rounds = 1, max_wait = \"2s\" }",
    "exhaustion_retry = { max_rounds = 4294967295, max_wait = \"0ms\" }",
    "max_upstream_sends = 0",
    "max_upstream_sends = 4294967295",
    "max_target_attempts = 18446744073709551615",
    "base_url = \"http://127.0.0.1:1\"",
    "base_url = \"https://[::1]:65535/x/\"",
    "base_url = \"http://\"",
    "base_url = \"\u{1F600}\"",
    "api_key_env = \"K\"",
    "auth = \"x-api-key\"",
    "max_retries = 99",
    "requests_per_minute = 0",
    "cooldown = true",
    "first_content_timeout = \"1.5s\"",
    "state_bound_header = \"bad header\"",
    "listen = \"127.0.0.1:0\"",
    "shutdown_grace = \"5\"",
    "max_body = 0",
    "= =",
    "[route]",
];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn any_config_is_read_or_refused_naming_a_field(lines in prop::collection::vec(0..LINES.len(), 0..24)) {
        let text: String = lines.iter().map(|i| format!("{}\n", LINES[*i])).collect();
        match Config::parse(&text, |var| (var == "K").then(|| "secret-k".to_owned())) {
            Ok(config) => prop_assert!(!config.routes.is_empty()),
            Err(error) => {
                prop_assert!(!error.field.is_empty());
                prop_assert!(!error.to_string().contains("secret-k"));
                if let Some(line) = error.line {
                    prop_assert!(line >= 1 && line <= lines.len().max(1));
                }
            }
        }
    }
}
