//! The config file's `[shared]` table: where replicas share their retry
//! budgets and failover marks (Redis), and what each replica does while it
//! cannot reach it.

use crate::config::ConfigError;
use crate::duration;
use llm_retry_redis::{FailureMode, SharedOptions, StateName, DEFAULT_NAMESPACE};
use serde::Deserialize;
use std::fmt;
use std::ops::Range;
use std::time::Duration;
use toml::Spanned;

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
    secret: String,
    from_env: bool,
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
pub struct RedisUrl(String);

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
    let (rest, had_query) = match rest.find(['?', '#']) {
        Some(at) => (&rest[..at], true),
        None => (rest, false),
    };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let (authority, path) = rest.split_at(authority_end);
    let host = match authority.rfind('@') {
        Some(at) => format!("***@{}", &authority[at + 1..]),
        None => authority.to_owned(),
    };
    let query = if had_query { "?***" } else { "" };
    format!("{scheme}://{host}{path}{query}")
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct SharedFile {
    redis_url: Option<Spanned<String>>,
    redis_url_env: Option<Spanned<String>>,
    namespace: Option<Spanned<String>>,
    timeout: Option<Spanned<String>>,
    sync_interval: Option<Spanned<String>>,
    replicas: Option<Spanned<u32>>,
    failure_mode: Option<Spanned<String>>,
    key_secret_env: Option<Spanned<String>>,
}

/// Shortest secret `key_secret_env` may hold.
const MIN_KEY_SECRET: usize = 16;

/// Schemes the Redis client is built with (`rediss`: TLS, through rustls
/// and the system's roots).
const SCHEMES: [&str; 4] = ["redis", "rediss", "unix", "redis+unix"];

impl SharedFile {
    /// Validates the table, written at `table`; `line_of` turns a span
    /// into its line, `env` reads `redis_url_env`.
    pub(crate) fn validate(
        &self,
        table: Range<usize>,
        line_of: impl Fn(Range<usize>) -> Option<usize>,
        env: &impl Fn(&str) -> Option<String>,
    ) -> Result<SharedConfig, ConfigError> {
        let at = |field: &str, span: Range<usize>, problem: String| ConfigError {
            line: line_of(span),
            field: format!("shared.{field}"),
            problem,
        };
        let (field, span, url) =
            match (&self.redis_url, &self.redis_url_env) {
                (Some(url), None) => ("redis_url", url.span(), url.get_ref().clone()),
                (None, Some(var)) => match env(var.get_ref()).filter(|url| !url.is_empty()) {
                    Some(url) => ("redis_url_env", var.span(), url),
                    None => {
                        return Err(at(
                            "redis_url_env",
                            var.span(),
                            format!("the environment variable {} is not set", var.get_ref()),
                        ))
                    }
                },
                (Some(url), Some(_)) => {
                    return Err(at(
                        "redis_url",
                        url.span(),
                        "set redis_url or redis_url_env, not both".to_owned(),
                    ))
                }
                (None, None) => return Err(at(
                    "redis_url",
                    table,
                    "is required (or redis_url_env, naming an environment variable that holds it)"
                        .to_owned(),
                )),
            };
        let redis_url = RedisUrl(url);
        // Problems name the redacted URL only: never a password.
        let scheme = redis_url.0.split_once("://").map(|(scheme, _)| scheme);
        if !scheme.is_some_and(|s| SCHEMES.contains(&s)) {
            return Err(at(
                field,
                span,
                format!(
                    "{redis_url} must start with redis://, rediss://, unix:// or redis+unix://"
                ),
            ));
        }
        if redis::Client::open(redis_url.0.as_str()).is_err() {
            return Err(at(
                field,
                span,
                format!(
                    "{redis_url} is not a Redis URL (redis[s]://[user:password@]host[:port][/db])"
                ),
            ));
        }
        let namespace = match &self.namespace {
            None => DEFAULT_NAMESPACE.to_owned(),
            Some(namespace) => {
                let checked = StateName::new("probe")
                    .and_then(|name| name.in_namespace(namespace.get_ref()))
                    .map_err(|error| at("namespace", namespace.span(), error.to_string()))?;
                checked.namespace().to_owned()
            }
        };
        let duration_of = |field: &str, value: &Option<Spanned<String>>, default: Duration| {
            value.as_ref().map_or(Ok(default), |text| {
                duration::parse_positive(text.get_ref())
                    .map_err(|problem| at(field, text.span(), problem))
            })
        };
        // Unset, as a library user's store would have them.
        let defaults = SharedOptions::default();
        let timeout = duration_of("timeout", &self.timeout, defaults.timeout)?;
        let sync_interval =
            duration_of("sync_interval", &self.sync_interval, defaults.sync_interval)?;
        let replicas = match &self.replicas {
            Some(n) if *n.get_ref() == 0 => {
                return Err(at("replicas", n.span(), "must be more than 0".to_owned()))
            }
            Some(n) => *n.get_ref(),
            None => 1,
        };
        let failure_mode = match self.failure_mode.as_ref() {
            None => FailureMode::FailOpen,
            Some(mode) => match mode.get_ref().as_str() {
                "fail_open" => FailureMode::FailOpen,
                "fail_closed" => FailureMode::FailClosed,
                other => {
                    return Err(at(
                        "failure_mode",
                        mode.span(),
                        format!("{other:?} is not one of fail_open, fail_closed"),
                    ))
                }
            },
        };
        let key_secret = match &self.key_secret_env {
            None => KeySecret {
                secret: redis_url.0.clone(),
                from_env: false,
            },
            Some(var) => match env(var.get_ref()) {
                Some(secret) if secret.len() >= MIN_KEY_SECRET => KeySecret {
                    secret,
                    from_env: true,
                },
                Some(_) => {
                    return Err(at(
                        "key_secret_env",
                        var.span(),
                        format!(
                            "the environment variable {} holds fewer than {MIN_KEY_SECRET} bytes",
                            var.get_ref()
                        ),
                    ))
                }
                None => {
                    return Err(at(
                        "key_secret_env",
                        var.span(),
                        format!("the environment variable {} is not set", var.get_ref()),
                    ))
                }
            },
        };
        Ok(SharedConfig {
            redis_url,
            namespace,
            timeout,
            sync_interval,
            replicas,
            failure_mode,
            key_secret,
        })
    }
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
