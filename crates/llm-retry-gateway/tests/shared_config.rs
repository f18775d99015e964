//! The `[shared]` table: what is accepted, every refusal naming its field
//! and line, and a Redis password never printed.
#![allow(clippy::unwrap_used)]

use llm_retry_gateway::{Config, FailureMode};
use std::time::Duration;

const ROUTE: &str = r#"
[[route]]
name = "claude"

[[route.target]]
name = "primary"
base_url = "http://127.0.0.1:9"
cooldown = true
"#;

const PASSWORD: &str = "hunter2-redis";

fn env(_: &str) -> Option<String> {
    None
}

/// A config with `shared` as its `[shared]` table (line 2 on).
fn with_shared(shared: &str) -> String {
    format!("\n[shared]\n{shared}\n{ROUTE}")
}

#[test]
fn a_full_shared_table_is_read_and_its_password_never_printed() {
    let text = with_shared(&format!(
        "redis_url = \"redis://gateway:{PASSWORD}@redis.internal:6379/2\"\n\
         timeout = \"20ms\"\nsync_interval = \"250ms\"\nreplicas = 3\n\
         failure_mode = \"fail_closed\""
    ));
    let config = Config::parse(&text, env).unwrap();
    let shared = config.shared.as_ref().unwrap();
    assert_eq!(shared.timeout, Duration::from_millis(20));
    assert_eq!(shared.sync_interval, Duration::from_millis(250));
    assert_eq!(shared.replicas, 3);
    assert_eq!(shared.failure_mode, FailureMode::FailClosed);
    assert_eq!(
        shared.redis_url.to_string(),
        "redis://***@redis.internal:6379/2"
    );
    let debug = format!("{config:?}");
    assert!(debug.contains("redis.internal"), "{debug}");
    assert!(!debug.contains(PASSWORD), "{debug}");
    assert!(!debug.contains("gateway:"), "{debug}");
}

#[test]
fn only_the_url_is_needed_and_without_the_table_nothing_is_shared() {
    let config = Config::parse(&with_shared("redis_url = \"redis://127.0.0.1\""), env).unwrap();
    let shared = config.shared.unwrap();
    assert_eq!(shared.timeout, Duration::from_millis(5));
    assert_eq!(shared.sync_interval, Duration::from_millis(100));
    assert_eq!(shared.replicas, 1);
    assert_eq!(shared.failure_mode, FailureMode::FailOpen);
    assert!(Config::parse(ROUTE, env).unwrap().shared.is_none());
}

#[test]
fn a_bad_shared_table_is_refused_naming_the_field_and_line() {
    let url = format!("redis_url = \"redis://:{PASSWORD}@redis:6379\"");
    // (the table's lines after `[shared]`, the field, its line)
    let cases = [
        (
            format!("{url}\ntimeout = \"0ms\""),
            "shared.timeout",
            Some(4),
        ),
        (format!("{url}\ntimeout = \"5\""), "shared.timeout", Some(4)),
        (
            format!("{url}\nsync_interval = \"0s\""),
            "shared.sync_interval",
            Some(4),
        ),
        (format!("{url}\nreplicas = 0"), "shared.replicas", Some(4)),
        (
            format!("{url}\nnamespace = \"team:a\""),
            "shared.namespace",
            Some(4),
        ),
        (
            format!("{url}\nnamespace = \"\""),
            "shared.namespace",
            Some(4),
        ),
        (
            format!("{url}\nredis_url_env = \"REDIS_URL\""),
            "shared.redis_url",
            Some(3),
        ),
        (
            "redis_url_env = \"UNSET\"".to_owned(),
            "shared.redis_url_env",
            Some(3),
        ),
        (
            format!("{url}\nfailure_mode = \"maybe\""),
            "shared.failure_mode",
            Some(4),
        ),
        (format!("{url}\npassword = \"x\""), "file", Some(4)),
        // Without a URL: the table's line.
        ("timeout = \"5ms\"".to_owned(), "shared.redis_url", Some(2)),
        (
            format!("redis_url = \"http://:{PASSWORD}@redis:6379\""),
            "shared.redis_url",
            Some(3),
        ),
        (
            format!("redis_url = \"redis://:{PASSWORD}@redis:port\""),
            "shared.redis_url",
            Some(3),
        ),
    ];
    for (table, field, line) in cases {
        let error = Config::parse(&with_shared(&table), env).unwrap_err();
        assert_eq!(error.field, field, "{error}");
        assert_eq!(error.line, line, "{error}");
        assert!(!error.to_string().contains(PASSWORD), "{error}");
    }
}

#[test]
fn with_the_table_route_and_target_names_must_make_redis_names() {
    let shared = "[shared]\nredis_url = \"redis://127.0.0.1\"\n";
    let route = |route: &str, target: &str| {
        format!("[[route]]\nname = \"{route}\"\n[[route.target]]\nname = \"{target}\"\nbase_url = \"http://127.0.0.1:9\"\n")
    };
    let long = "t".repeat(60);
    let cases = [
        (route("has space", "t"), "route[has space].name", Some(4)),
        (
            route("claude", &long),
            &*format!("route[claude].target[{long}].name"),
            Some(6),
        ),
    ];
    for (routes, field, line) in cases {
        assert!(Config::parse(&routes, env).is_ok(), "fine without [shared]");
        let error = Config::parse(&format!("{shared}{routes}"), env).unwrap_err();
        assert_eq!(error.field, field, "{error}");
        assert_eq!(error.line, line, "{error}");
        assert!(error.problem.contains("Redis"), "{error}");
    }
}

/// The example config's `[shared]` table, uncommented, is accepted.
#[test]
fn the_example_shared_table_is_accepted_once_uncommented() {
    let example =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/gateway.example.toml"))
            .unwrap();
    let start = example.find("# [shared]\n").unwrap();
    let table: String = example[start..]
        .lines()
        .take_while(|line| line.starts_with("# "))
        .map(|line| format!("{}\n", &line[2..]))
        .collect();
    assert!(table.contains("failure_mode"), "{table}");
    assert!(table.contains("key_secret_env"), "{table}");
    let with_secret = |var: &str| (var == "GATEWAY_KEY_SECRET").then(|| "s".repeat(32));
    let config = Config::parse(&format!("{table}{ROUTE}"), with_secret).unwrap();
    let shared = config.shared.unwrap();
    assert_eq!(shared.replicas, 3);
    assert_eq!(shared.namespace, "llm-retry");
    assert_eq!(
        shared.redis_url.to_string(),
        "redis://***@redis.internal:6379/0"
    );
}

/// The Redis URL, password included, from the environment: read, used,
/// never printed; problems with it name the variable's line and the
/// redacted URL only.
#[test]
fn the_url_may_come_from_the_environment() {
    fn from_env(var: &str) -> Option<String> {
        match var {
            "REDIS_URL" => Some(format!("rediss://gateway:{PASSWORD}@redis.internal:6380/1")),
            "BAD_REDIS_URL" => Some(format!("http://gateway:{PASSWORD}@redis.internal")),
            "EMPTY" => Some(String::new()),
            _ => None,
        }
    }
    let config = Config::parse(
        &with_shared("redis_url_env = \"REDIS_URL\"\nnamespace = \"team-a.prod\""),
        from_env,
    )
    .unwrap();
    let shared = config.shared.as_ref().unwrap();
    assert_eq!(
        shared.redis_url.to_string(),
        "rediss://***@redis.internal:6380/1"
    );
    assert_eq!(shared.namespace, "team-a.prod");
    assert!(!format!("{config:?}").contains(PASSWORD));
    for var in ["BAD_REDIS_URL", "EMPTY"] {
        let error = Config::parse(
            &with_shared(&format!("redis_url_env = \"{var}\"")),
            from_env,
        )
        .unwrap_err();
        assert_eq!(error.field, "shared.redis_url_env", "{error}");
        assert_eq!(error.line, Some(3), "{error}");
        assert!(!error.to_string().contains(PASSWORD), "{error}");
    }
}

/// `rediss://` (TLS) is built in; the namespace defaults to `llm-retry`.
#[test]
fn tls_urls_are_accepted_and_the_namespace_has_a_default() {
    let config = Config::parse(
        &with_shared("redis_url = \"rediss://redis.internal:6380\""),
        env,
    )
    .unwrap();
    assert_eq!(config.shared.unwrap().namespace, "llm-retry");
}

/// The gates' key fingerprints are keyed by `key_secret_env`'s value when
/// it is set (at least 16 bytes), else by the Redis URL; neither is ever
/// printed, and a problem names the variable, never its value.
#[test]
fn the_fingerprint_secret_may_come_from_the_environment() {
    const SECRET: &str = "a-fleet-secret-0123456789";
    fn from_env(var: &str) -> Option<String> {
        match var {
            "KEY_SECRET" => Some(SECRET.to_owned()),
            "SHORT" => Some("short".to_owned()),
            _ => None,
        }
    }
    let url = format!("redis_url = \"redis://:{PASSWORD}@redis:6379\"");
    let from_url = Config::parse(&with_shared(&url), from_env).unwrap();
    let from_var = Config::parse(
        &with_shared(&format!("{url}\nkey_secret_env = \"KEY_SECRET\"")),
        from_env,
    )
    .unwrap();
    let (from_url, from_var) = (from_url.shared.unwrap(), from_var.shared.unwrap());
    assert_ne!(from_url.key_secret, from_var.key_secret);
    for debug in [format!("{from_url:?}"), format!("{from_var:?}")] {
        assert!(
            !debug.contains(SECRET) && !debug.contains(PASSWORD),
            "{debug}"
        );
    }
    for var in ["SHORT", "UNSET"] {
        let error = Config::parse(
            &with_shared(&format!("{url}\nkey_secret_env = \"{var}\"")),
            from_env,
        )
        .unwrap_err();
        assert_eq!(error.field, "shared.key_secret_env", "{error}");
        assert_eq!(error.line, Some(4), "{error}");
        assert!(!error.to_string().contains("short"), "{error}");
    }
}

/// A password with characters a URL needs escaped (a base64 key holds `/`;
/// others `#` or `?`): such a URL is refused, and the refusal, which names
/// the URL, must not print the password, from the file or the environment.
#[test]
fn a_refused_redis_url_never_prints_its_password() {
    let cases = [
        (
            "redis://:Zm9vYmFy/c2VjcmV0PQ==@redis.internal:6379",
            "c2VjcmV0PQ",
        ),
        (
            "redis://:Zm9vYmFy/c2VjcmV0PQ==@redis.internal:6379",
            "Zm9vYmFy",
        ),
        (
            "rediss://default:s3cr3tPART#tail@redis.internal:6380",
            "s3cr3tPART",
        ),
        ("redis://:s3cr3tPART?tail@redis.internal", "s3cr3tPART"),
    ];
    for (url, secret) in cases {
        let from_file = Config::parse(&with_shared(&format!("redis_url = \"{url}\"")), env);
        let error = from_file.unwrap_err();
        assert_eq!(error.field, "shared.redis_url", "{error}");
        assert!(!error.to_string().contains(secret), "{error}");
        let from_env = Config::parse(&with_shared("redis_url_env = \"REDIS_URL\""), |_| {
            Some(url.to_owned())
        });
        let error = from_env.unwrap_err();
        assert!(!error.to_string().contains(secret), "{error}");
    }
}
