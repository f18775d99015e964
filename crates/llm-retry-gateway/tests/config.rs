//! The config file: what is accepted, and every refusal naming its field
//! and line.
#![allow(clippy::unwrap_used)]

use llm_retry_gateway::Config;

const GOOD: &str = r#"
listen = "127.0.0.1:9000"

[[route]]
name = "claude"
path_prefix = "/v1/messages"
deadline = "60s"
exhaustion_retry = { max_rounds = 1, max_wait = "2s" }

[[route.target]]
name = "primary"
base_url = "https://api.anthropic.com"
api_key_env = "PRIMARY_KEY"
auth = "x-api-key"
cooldown = true

[[route.target]]
name = "backup"
base_url = "https://backup.example.com/anthropic"
api_key_env = "BACKUP_KEY"
auth = "x-api-key"
model = "claude-haiku-4-5"
max_retries = 1
"#;

fn env(var: &str) -> Option<String> {
    matches!(var, "PRIMARY_KEY" | "BACKUP_KEY").then(|| format!("secret-{var}"))
}

#[test]
fn a_good_config_is_read_and_its_secrets_stay_out_of_debug() {
    let config = Config::parse(GOOD, env).unwrap();
    assert_eq!(config.listen.to_string(), "127.0.0.1:9000");
    let route = &config.routes[0];
    assert_eq!(route.targets.len(), 2);
    assert_eq!(route.targets[1].model.as_deref(), Some("claude-haiku-4-5"));
    // On a route with several targets the next target is the retry.
    assert_eq!(route.targets[0].max_retries, 0, "the default");
    assert_eq!(route.targets[1].max_retries, 1, "as written");
    assert_eq!(
        route.targets[0].max_server_wait,
        std::time::Duration::from_secs(2)
    );
    let debug = format!("{config:?}");
    assert!(!debug.contains("secret-"), "{debug}");
}

#[test]
fn a_shutdown_grace_of_nothing_is_allowed() {
    let text = GOOD.replacen(
        "listen = \"127.0.0.1:9000\"",
        "listen = \"127.0.0.1:9000\"\nshutdown_grace = \"0s\"",
        1,
    );
    Config::parse(&text, env).unwrap();
}

#[test]
fn the_shipped_example_config_is_valid() {
    let text =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/gateway.example.toml"))
            .unwrap();
    Config::parse(&text, |var| Some(format!("test-{var}"))).unwrap();
}

#[test]
fn every_refusal_names_the_field_and_the_line_it_is_on() {
    let replace = |from: &str, to: &str| {
        assert!(GOOD.contains(from), "{from}");
        GOOD.replacen(from, to, 1)
    };
    let cases: Vec<(String, &str, Option<usize>)> = vec![
        (
            replace("listen = \"127.0.0.1:9000\"", "listen = \"nowhere\""),
            "listen",
            Some(2),
        ),
        (
            replace("deadline = \"60s\"", "deadline = \"60\""),
            "route[claude].deadline",
            Some(7),
        ),
        (
            replace("deadline = \"60s\"", "deadline = \"0s\""),
            "route[claude].deadline",
            Some(7),
        ),
        (
            replace("max_wait = \"2s\"", "max_wait = \"2m\""),
            "route[claude].exhaustion_retry.max_wait",
            Some(8),
        ),
        (
            replace("max_rounds = 1", "max_rounds = 5"),
            "route[claude].exhaustion_retry.max_rounds",
            Some(8),
        ),
        (
            replace("https://api.anthropic.com", "ftp://api.anthropic.com"),
            "route[claude].target[primary].base_url",
            Some(12),
        ),
        (
            replace(
                "https://api.anthropic.com",
                "https://api.anthropic.com/?key=1",
            ),
            "route[claude].target[primary].base_url",
            Some(12),
        ),
        (
            replace(
                "api_key_env = \"PRIMARY_KEY\"",
                "api_key_env = \"UNSET_KEY\"",
            ),
            "route[claude].target[primary].api_key_env",
            Some(13),
        ),
        (
            replace("auth = \"x-api-key\"", "auth = \"basic\""),
            "route[claude].target[primary].auth",
            Some(14),
        ),
        (
            replace("max_retries = 1", "max_retries = 50"),
            "route[claude].target[backup].max_retries",
            Some(23),
        ),
        (
            replace(
                "max_retries = 1",
                "max_retries = 1\nmax_server_wait = \"60s\"",
            ),
            "route[claude].target[backup].max_server_wait",
            Some(24),
        ),
        (
            replace(
                "max_retries = 1",
                "max_retries = 1\nmax_server_wait = \"soon\"",
            ),
            "route[claude].target[backup].max_server_wait",
            Some(24),
        ),
        (
            replace("name = \"backup\"", "name = \"primary\""),
            "route[claude].target[primary].name",
            Some(18),
        ),
        (
            replace("path_prefix = \"/v1/messages\"", "path_prefix = \"v1\""),
            "route[claude].path_prefix",
            Some(6),
        ),
        (
            replace(
                "deadline = \"60s\"",
                "deadline = \"60s\"\nmax_upstream_sends = 0",
            ),
            "route[claude].max_upstream_sends",
            Some(8),
        ),
        (
            replace("cooldown = true", "cooldown = true\ncolour = \"blue\""),
            "file",
            Some(16),
        ),
        (
            replace("deadline = \"60s\"", "deadline = \"1s\""),
            "route[claude].exhaustion_retry.max_wait",
            Some(8),
        ),
        (
            replace(
                "listen = \"127.0.0.1:9000\"",
                "listen = \"127.0.0.1:9000\"\nbody_timeout = \"0s\"",
            ),
            "body_timeout",
            Some(3),
        ),
        (
            replace(
                "max_retries = 1",
                "max_retries = 1\nattempt_timeout = \"0ms\"",
            ),
            "route[claude].target[backup].attempt_timeout",
            Some(24),
        ),
        ("listen = \"127.0.0.1:1\"\n".to_owned(), "route", None),
    ];
    for (text, field, line) in cases {
        let error = Config::parse(&text, env).unwrap_err();
        assert_eq!(error.field, field, "{error}");
        assert_eq!(error.line, line, "{error}");
        assert!(!error.to_string().contains("secret-"), "{error}");
    }
}

#[test]
fn a_route_an_earlier_route_takes_every_request_of_is_refused() {
    let route = |name: &str, prefix: Option<&str>, models: &[&str]| {
        let prefix = prefix.map_or(String::new(), |p| format!("path_prefix = \"{p}\"\n"));
        let models = if models.is_empty() {
            String::new()
        } else {
            format!("models = {models:?}\n")
        };
        format!(
            "[[route]]\nname = \"{name}\"\n{prefix}{models}\n[[route.target]]\nname = \"t\"\nbase_url = \"http://127.0.0.1:9\"\n\n"
        )
    };
    // (earlier route, later route, whether the later one is never reached)
    let cases = [
        ((None, &[][..]), (Some("/v1/messages"), &[][..]), true),
        ((Some("/v1"), &[]), (Some("/v1/messages"), &[]), true),
        ((Some("/v1/"), &[]), (Some("/v1/messages"), &[]), true),
        (
            (Some("/v1/messages"), &[]),
            (Some("/v1/messages"), &[]),
            true,
        ),
        ((Some("/v1"), &[]), (Some("/v1"), &["gpt-4o"]), true),
        ((None, &["a", "b"]), (None, &["b"]), true),
        ((None, &["a", "b"]), (Some("/v1"), &["a", "b"]), true),
        // Reachable: a narrower or different path, or a model the earlier
        // route does not take.
        ((Some("/v1/messages"), &[]), (Some("/v1"), &[]), false),
        ((Some("/v1"), &[]), (Some("/v10"), &[]), false),
        ((Some("/v1/"), &[]), (Some("/v1"), &[]), false),
        ((Some("/v1/messages"), &[]), (None, &[]), false),
        ((None, &["a"]), (None, &[]), false),
        ((None, &["a"]), (None, &["a", "b"]), false),
        ((Some("/v1"), &["a"]), (Some("/v1/chat"), &["b"]), false),
    ];
    for ((first_prefix, first_models), (second_prefix, second_models), shadowed) in cases {
        let first = route("first", first_prefix, first_models);
        let second = route("second", second_prefix, second_models);
        let text = format!("{first}{second}");
        let first_lines = first.matches('\n').count();
        match Config::parse(&text, env) {
            Ok(_) => assert!(!shadowed, "accepted:\n{text}"),
            Err(error) => {
                assert!(shadowed, "{error}\n{text}");
                assert_eq!(error.field, "route[second]");
                assert!(error.problem.contains("route[first]"), "{error}");
                assert_eq!(error.line, Some(first_lines + 1), "{error}");
            }
        }
    }
}

#[test]
fn a_targets_health_window_is_read_and_checked() {
    let with =
        |health: &str| GOOD.replacen("cooldown = true", &format!("cooldown = true\n{health}"), 1);
    let config = Config::parse(
        &with("unhealthy_after = { failures = 3, within = \"20s\" }"),
        env,
    )
    .unwrap();
    assert_eq!(
        config.routes[0].targets[0].unhealthy_after,
        Some((3, std::time::Duration::from_secs(20)))
    );
    assert_eq!(config.routes[0].targets[1].unhealthy_after, None);
    for bad in [
        "unhealthy_after = { failures = 0, within = \"20s\" }",
        "unhealthy_after = { failures = 3, within = \"0s\" }",
        "unhealthy_after = { failures = 3, within = \"20\" }",
    ] {
        let error = Config::parse(&with(bad), env).unwrap_err();
        assert_eq!(
            error.field, "route[claude].target[primary].unhealthy_after",
            "{error}"
        );
        assert_eq!(error.line, Some(16), "{error}");
    }
}
