//! The config file's `[shared]` table, read and validated into a
//! [`SharedConfig`].

use crate::config::ConfigError;
use crate::duration;
use crate::shared_config::{KeySecret, RedisUrl, SharedConfig};
use llm_retry_redis::{FailureMode, SharedOptions, StateName, DEFAULT_NAMESPACE};
use serde::Deserialize;
use std::ops::Range;
use std::time::Duration;
use toml::Spanned;

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
