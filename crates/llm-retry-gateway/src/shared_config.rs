//! The config file's `[shared]` table: where replicas share their retry
//! budgets and failover marks (Redis), and what each replica does while it
//! cannot reach it.

use llm_retry_redis::{FailureMode, StateName};
use std::fmt;
use std::time::Duration;

/// The validated `[shared]` table: replicas that name the same Redis share
/// each route's failover marks and each target's retry budget.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SharedConfig {
    /// The Redis to share through, from `redis_url` or from the
    /// environment variable `redis_url_env` names. Printed only redacted.
    pub redis_url: RedisUrl,
    /// The namespace of every key (`{<namespace>:<name>}:…`; default
    /// `llm-retry`): fleets sharing one Redis keep apart by it.
    pub namespace: String,
    /// Bound on each Redis call, connecting included (default 5 ms).
    pub timeout: Duration,
    /// How often each store syncs with Redis when nothing else asks it to
    /// (default 100 ms): other replicas learn a mark within it.
    pub sync_interval: Duration,
    /// How many replicas share the state (default 1). While Redis does not
    /// answer, each replica grants retries from its own window with the
    /// budget's floor divided by it (rounded down), so the fleet's floor
    /// stays within the budget's.
    pub replicas: u32,
    /// What a replica decides while Redis does not answer.
    pub failure_mode: FailureMode,
    /// What the gates' key fingerprints are keyed by: the value of the
    /// environment variable `key_secret_env` names, else the Redis URL as
    /// written. Never printed.
    pub key_secret: KeySecret,
}

/// The secret the gates' key fingerprints are keyed by, the same on every
/// replica. Its `Debug` shows only where it came from.
#[derive(Clone, PartialEq, Eq)]
pub struct KeySecret {
    pub(crate) secret: String,
    pub(crate) from_env: bool,
}

impl KeySecret {
    /// The secret's bytes: for the shared gate store only.
    pub(crate) fn expose(&self) -> &[u8] {
        self.secret.as_bytes()
    }
}

impl fmt::Debug for KeySecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.from_env {
            "KeySecret(<from key_secret_env>)"
        } else {
            "KeySecret(<the Redis URL>)"
        })
    }
}

/// A Redis URL. Its `Debug` and `Display` hide the user, the password and
/// the query (where a Unix socket URL carries its password).
#[derive(Clone, PartialEq, Eq)]
pub struct RedisUrl(pub(crate) String);

impl RedisUrl {
    /// The URL as written, password included: for the Redis client only.
    pub(crate) fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for RedisUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&redact(&self.0))
    }
}

impl fmt::Debug for RedisUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "RedisUrl({})", redact(&self.0))
    }
}

/// `url` with its user and password replaced by `***` and its query (and
/// fragment) by `?***`.
fn redact(url: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
    // Everything before the last `@` is taken for the user and password: a
    // password may hold a `/`, `?` or `#` (a base64 key holds `/`), and
    // such a URL, refused for it, is the one a refusal prints.
    let (user, rest) = match rest.rfind('@') {
        // An `@` after a `?` or `#` may be the query's: what follows it may
        // be the query's too, so nothing is shown.
        Some(at) if rest[..at].contains(['?', '#']) => return format!("{scheme}://***"),
        Some(at) => ("***@", &rest[at + 1..]),
        None => ("", rest),
    };
    let (rest, query) = match rest.find(['?', '#']) {
        Some(at) => (&rest[..at], "?***"),
        None => (rest, ""),
    };
    format!("{scheme}://{user}{rest}{query}")
}

/// The name under which replicas share a route's failover marks: the
/// route's name, checked as a Redis key part.
pub(crate) fn marks_name(route: &str) -> Result<StateName, String> {
    state_name(route)
}

/// The name under which replicas share a target's retry budget and its
/// gate's holds: `<route>/<target>`, as its gauge is labelled.
pub(crate) fn target_name(route: &str, target: &str) -> Result<StateName, String> {
    state_name(&format!("{route}/{target}"))
}

fn state_name(name: &str) -> Result<StateName, String> {
    StateName::new(name).map_err(|error| {
        format!("{name:?} names shared state in Redis, with [shared] set: {error}")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redaction_hides_user_password_and_query() {
        let cases = [
            ("redis://:hunter2@redis:6379/0", "redis://***@redis:6379/0"),
            ("redis://me:hunter2@redis", "redis://***@redis"),
            ("redis://redis:6379", "redis://redis:6379"),
            (
                "redis+unix:///run/redis.sock?pass=hunter2",
                "redis+unix:///run/redis.sock?***",
            ),
            ("redis://me:p@ss@redis/1", "redis://***@redis/1"),
            ("redis://:a/hunter2==@redis:6379", "redis://***@redis:6379"),
            ("redis://:hunter2?x@redis", "redis://***"),
            ("redis://:hunter2#x@redis/2", "redis://***"),
            ("redis://redis/0?password=x@hunter2", "redis://***"),
        ];
        for (url, shown) in cases {
            assert_eq!(RedisUrl(url.to_owned()).to_string(), shown, "{url}");
            assert!(!format!("{:?}", RedisUrl(url.to_owned())).contains("hunter2"));
        }
    }

    #[test]
    fn names_are_the_route_and_route_slash_target() {
        assert_eq!(
            target_name("claude", "primary").expect("valid").as_str(),
            "claude/primary"
        );
        assert_eq!(marks_name("claude").expect("valid").as_str(), "claude");
        assert!(marks_name("has space").is_err());
        assert!(target_name(&"r".repeat(40), &"t".repeat(30)).is_err());
    }
}
