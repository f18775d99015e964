//! Configuring a [`RetryPolicyBuilder`] from environment variables.
//!
//! Every variable is one entry of [`VARS`]: its name, what it expects (for
//! the error message) and how a parsed value is applied through a public
//! builder setter. Adding a variable is adding an entry.

use super::RetryPolicyBuilder;
use crate::backoff::Jitter;
use crate::ConfigError;
use std::time::Duration;

/// Longest duration accepted in seconds: one year. Anything longer is a
/// typo (milliseconds written as seconds) rather than a retry bound.
const MAX_SECS: f64 = 365.0 * 24.0 * 3600.0;

/// One environment variable: its name, what a valid value looks like, and
/// how it is applied (`None` when the value does not parse).
struct Var {
    name: &'static str,
    expects: &'static str,
    apply: fn(RetryPolicyBuilder, &str) -> Option<RetryPolicyBuilder>,
}

/// The variables read, in the order they are applied.
const VARS: &[Var] = &[
    Var {
        name: "LLM_RETRY_MAX_RETRIES",
        expects: "a whole number of retries (0–4294967295)",
        apply: |b, v| Some(b.max_retries(v.parse().ok()?)),
    },
    Var {
        name: "LLM_RETRY_MAX_ELAPSED_SECS",
        expects: "a number of seconds from 0 to 31536000 (one year), such as 300 or 2.5",
        apply: |b, v| Some(b.max_elapsed(secs(v)?)),
    },
    Var {
        name: "LLM_RETRY_MAX_SERVER_WAIT_SECS",
        expects: "a number of seconds from 0 to 31536000 (one year), such as 120 or 2.5",
        apply: |b, v| Some(b.max_server_wait(secs(v)?)),
    },
    Var {
        name: "LLM_RETRY_INITIAL_BACKOFF_MS",
        expects: "a whole number of milliseconds (0–18446744073709551615)",
        apply: |b, v| Some(b.initial_backoff(Duration::from_millis(v.parse().ok()?))),
    },
    Var {
        name: "LLM_RETRY_MAX_BACKOFF_MS",
        expects: "a whole number of milliseconds (0–18446744073709551615)",
        apply: |b, v| Some(b.max_backoff(Duration::from_millis(v.parse().ok()?))),
    },
    Var {
        name: "LLM_RETRY_JITTER",
        expects: "one of proportional, equal, full or none",
        apply: |b, v| Some(b.jitter(jitter(v)?)),
    },
    Var {
        name: "LLM_RETRY_MAX_REPLAY_BODY_BYTES",
        expects: "a whole number of bytes",
        apply: |b, v| Some(b.max_replay_body(v.parse().ok()?)),
    },
    Var {
        name: "LLM_RETRY_MAX_CONSECUTIVE_OVERLOADS",
        expects: "a whole number of overloads in a row (0 never counts)",
        apply: |b, v| Some(b.max_consecutive_overloads(v.parse().ok()?)),
    },
    Var {
        name: "LLM_RETRY_FALLBACK_MODEL",
        expects: "a model name, switched to automatically after repeated overloads",
        apply: |b, v| Some(b.fallback_model(v, super::FallbackMode::Automatic)),
    },
    Var {
        name: "LLM_RETRY_BEHIND_GATEWAY",
        expects: "true or false",
        apply: |b, v| Some(b.behind_gateway(flag(v)?)),
    },
];

/// `true`/`false` (also `1`/`0`, `yes`/`no`), any case.
fn flag(value: &str) -> Option<bool> {
    match value.to_ascii_lowercase().as_str() {
        "true" | "1" | "yes" => Some(true),
        "false" | "0" | "no" => Some(false),
        _ => None,
    }
}

/// Non-negative, finite seconds up to [`MAX_SECS`].
fn secs(value: &str) -> Option<Duration> {
    let secs: f64 = value.parse().ok()?;
    if !(0.0..=MAX_SECS).contains(&secs) {
        return None; // negative, NaN, infinite or too long
    }
    Duration::try_from_secs_f64(secs).ok()
}

/// A jitter kind by name, ASCII case ignored.
fn jitter(value: &str) -> Option<Jitter> {
    const KINDS: [(&str, Jitter); 4] = [
        ("proportional", Jitter::Proportional { fraction: 0.25 }),
        ("equal", Jitter::Equal),
        ("full", Jitter::Full),
        ("none", Jitter::None),
    ];
    let kinds = KINDS.iter();
    kinds
        .filter(|(name, _)| name.eq_ignore_ascii_case(value))
        .map(|&(_, kind)| kind)
        .next()
}

impl RetryPolicyBuilder {
    /// Overrides settings from the process environment; see
    /// [`from_env_with`](RetryPolicyBuilder::from_env_with) for the variables.
    ///
    /// A value that is not valid UTF-8 is reported as malformed.
    pub fn from_env(self) -> Result<RetryPolicyBuilder, ConfigError> {
        self.from_env_with(|name| std::env::var_os(name).map(|v| v.to_string_lossy().into_owned()))
    }

    /// Overrides settings from variables read through `lookup` (a name →
    /// value function, for tests or another configuration source).
    ///
    /// | variable | value | sets |
    /// |---|---|---|
    /// | `LLM_RETRY_MAX_RETRIES` | whole number (`u32`) | [`max_retries`](Self::max_retries) |
    /// | `LLM_RETRY_MAX_ELAPSED_SECS` | seconds, fractions allowed (`2.5`), 0 to 31 536 000 | [`max_elapsed`](Self::max_elapsed) |
    /// | `LLM_RETRY_MAX_SERVER_WAIT_SECS` | seconds, fractions allowed, 0 to 31 536 000 | [`max_server_wait`](Self::max_server_wait) |
    /// | `LLM_RETRY_INITIAL_BACKOFF_MS` | whole milliseconds (`u64`) | [`initial_backoff`](Self::initial_backoff) |
    /// | `LLM_RETRY_MAX_BACKOFF_MS` | whole milliseconds (`u64`) | [`max_backoff`](Self::max_backoff) |
    /// | `LLM_RETRY_JITTER` | `proportional` (+0–25 %), `equal`, `full` or `none` | [`jitter`](Self::jitter) |
    /// | `LLM_RETRY_MAX_REPLAY_BODY_BYTES` | whole bytes (`usize`) | [`max_replay_body`](Self::max_replay_body) |
    /// | `LLM_RETRY_MAX_CONSECUTIVE_OVERLOADS` | whole number (`u32`) | [`max_consecutive_overloads`](Self::max_consecutive_overloads) |
    /// | `LLM_RETRY_FALLBACK_MODEL` | a model name | [`fallback_model`](Self::fallback_model), automatic mode |
    /// | `LLM_RETRY_BEHIND_GATEWAY` | `true`/`false`, `1`/`0`, `yes`/`no` | [`behind_gateway`](Self::behind_gateway) |
    ///
    /// A variable that is unset, empty or only whitespace leaves the
    /// builder's value alone; surrounding whitespace is ignored and jitter
    /// names are case-insensitive. The first malformed value — negative,
    /// fractional where a whole number is expected, NaN, infinite, out of
    /// range — is an error naming the variable, the value and what was
    /// expected. Combinations (such as a maximum backoff below the initial
    /// one) are checked by [`build`](Self::build), as for the setters.
    ///
    /// ```
    /// use llm_retry::RetryPolicy;
    ///
    /// let env = |name: &str| match name {
    ///     "LLM_RETRY_MAX_RETRIES" => Some("3".to_owned()),
    ///     "LLM_RETRY_MAX_SERVER_WAIT_SECS" => Some("30.5".to_owned()),
    ///     _ => None,
    /// };
    /// let policy = RetryPolicy::builder().from_env_with(env)?.build()?;
    /// assert_eq!(policy.max_retries(), 3);
    ///
    /// let err = RetryPolicy::builder()
    ///     .from_env_with(|_| Some("ten".to_owned()))
    ///     .expect_err("malformed");
    /// assert!(err.to_string().contains("LLM_RETRY_MAX_RETRIES: ten is not a whole number"));
    /// # Ok::<(), llm_retry::ConfigError>(())
    /// ```
    pub fn from_env_with<F: Fn(&str) -> Option<String>>(
        self,
        lookup: F,
    ) -> Result<RetryPolicyBuilder, ConfigError> {
        VARS.iter().try_fold(self, |builder, var| {
            let Some(raw) = lookup(var.name) else {
                return Ok(builder);
            };
            let value = raw.trim();
            if value.is_empty() {
                return Ok(builder);
            }
            (var.apply)(builder, value).ok_or_else(|| {
                ConfigError::new(
                    "retry policy",
                    var.name,
                    format!("{} is not {}", value.escape_debug(), var.expects),
                )
            })
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::RetryPolicy;
    use std::collections::HashMap;

    fn with(vars: &[(&str, &str)]) -> Result<RetryPolicy, String> {
        let vars: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        let builder = RetryPolicy::builder().from_env_with(|name| vars.get(name).cloned());
        builder.and_then(|b| b.build()).map_err(|e| e.to_string())
    }

    #[test]
    fn unset_and_empty_variables_leave_the_defaults() {
        let default = RetryPolicy::default();
        let blank: Vec<(&str, &str)> = VARS.iter().map(|v| (v.name, " \t")).collect();
        for policy in [with(&[]).unwrap(), with(&blank).unwrap()] {
            assert_eq!(policy.limits(), default.limits());
            assert_eq!(policy.backoff(), default.backoff());
            assert_eq!(policy.max_replay_body(), default.max_replay_body());
        }
        let unrelated = with(&[("LLM_RETRY_UNKNOWN", "x"), ("max_retries", "x")]).unwrap();
        assert_eq!(unrelated.limits(), default.limits());
    }

    #[test]
    fn each_variable_sets_its_value() {
        let p = with(&[("LLM_RETRY_MAX_RETRIES", " 4294967295 ")]).unwrap();
        assert_eq!(p.limits().max_retries, u32::MAX);
        let p = with(&[("LLM_RETRY_MAX_RETRIES", "0")]).unwrap();
        assert_eq!(p.limits().max_retries, 0);
        let p = with(&[("LLM_RETRY_MAX_ELAPSED_SECS", "2.5")]).unwrap();
        assert_eq!(p.limits().max_elapsed, Duration::from_millis(2500));
        let p = with(&[("LLM_RETRY_MAX_ELAPSED_SECS", "31536000")]).unwrap();
        assert_eq!(p.limits().max_elapsed, Duration::from_secs(31_536_000));
        let p = with(&[("LLM_RETRY_MAX_SERVER_WAIT_SECS", "0")]).unwrap();
        assert_eq!(p.limits().max_server_wait, Duration::ZERO);
        let p = with(&[("LLM_RETRY_MAX_SERVER_WAIT_SECS", "1e1")]).unwrap();
        assert_eq!(p.limits().max_server_wait, Duration::from_secs(10));
        let p = with(&[
            ("LLM_RETRY_INITIAL_BACKOFF_MS", "250"),
            ("LLM_RETRY_MAX_BACKOFF_MS", "18446744073709551615"),
        ])
        .unwrap();
        assert_eq!(p.backoff().initial(), Duration::from_millis(250));
        assert_eq!(p.backoff().max(), Duration::from_millis(u64::MAX));
        let p = with(&[("LLM_RETRY_MAX_REPLAY_BODY_BYTES", "1048576")]).unwrap();
        assert_eq!(p.max_replay_body(), 1 << 20);
        let jitters = [
            ("proportional", Jitter::Proportional { fraction: 0.25 }),
            ("Equal", Jitter::Equal),
            ("FULL", Jitter::Full),
            ("none", Jitter::None),
        ];
        for (name, want) in jitters {
            let p = with(&[("LLM_RETRY_JITTER", name)]).unwrap();
            assert_eq!(p.backoff().jitter(), want, "{name}");
        }
        let p = with(&[
            ("LLM_RETRY_MAX_CONSECUTIVE_OVERLOADS", "5"),
            ("LLM_RETRY_FALLBACK_MODEL", "claude-haiku-4-5"),
            ("LLM_RETRY_BEHIND_GATEWAY", "Yes"),
        ])
        .unwrap();
        assert_eq!(p.max_consecutive_overloads(), 5);
        let fallback = p.fallback().unwrap();
        assert_eq!(
            (fallback.model.as_str(), &fallback.mode),
            ("claude-haiku-4-5", &super::super::FallbackMode::Automatic)
        );
        assert!(p.behind_gateway());
        assert!(with(&[("LLM_RETRY_BEHIND_GATEWAY", "maybe")])
            .unwrap_err()
            .contains("LLM_RETRY_BEHIND_GATEWAY: maybe"));
    }

    #[test]
    fn a_flag_reads_each_spelling_of_yes_and_no() {
        for (value, want) in [
            ("true", true),
            ("1", true),
            ("YES", true),
            ("False", false),
            ("0", false),
            ("no", false),
        ] {
            let vars = [("LLM_RETRY_BEHIND_GATEWAY", value)];
            let on = RetryPolicy::builder()
                .behind_gateway(!want)
                .from_env_with(|name| {
                    vars.iter()
                        .find(|(k, _)| *k == name)
                        .map(|(_, v)| (*v).to_owned())
                })
                .and_then(|b| b.build())
                .unwrap()
                .behind_gateway();
            assert_eq!(on, want, "{value}");
        }
    }

    /// The process environment of the tests names no `LLM_RETRY_*`
    /// variable, so reading it keeps what the builder was given.
    #[test]
    fn reading_the_process_environment_keeps_what_no_variable_names() {
        if std::env::vars().any(|(name, _)| name.starts_with("LLM_RETRY_")) {
            return; // set by whoever runs the tests: nothing to conclude
        }
        let p = RetryPolicy::builder()
            .max_retries(3)
            .from_env()
            .unwrap()
            .build()
            .unwrap();
        assert_eq!(p.limits().max_retries, 3);
    }

    #[test]
    fn malformed_values_name_the_variable_value_and_expectation() {
        let secs = "is not a number of seconds from 0 to 31536000";
        let ms = "is not a whole number of milliseconds";
        let cases = [
            (
                "LLM_RETRY_MAX_RETRIES",
                "ten",
                "LLM_RETRY_MAX_RETRIES: ten is not a whole number of retries (0–4294967295)",
            ),
            ("LLM_RETRY_MAX_RETRIES", "-1", "whole number of retries"),
            (
                "LLM_RETRY_MAX_RETRIES",
                "4294967296",
                "whole number of retries",
            ),
            ("LLM_RETRY_MAX_RETRIES", "3.0", "whole number of retries"),
            ("LLM_RETRY_MAX_ELAPSED_SECS", "-1", secs),
            ("LLM_RETRY_MAX_ELAPSED_SECS", "NaN", secs),
            ("LLM_RETRY_MAX_ELAPSED_SECS", "inf", secs),
            ("LLM_RETRY_MAX_ELAPSED_SECS", "1e300", secs),
            ("LLM_RETRY_MAX_ELAPSED_SECS", "31536000.5", secs),
            ("LLM_RETRY_MAX_ELAPSED_SECS", "30s", secs),
            ("LLM_RETRY_MAX_SERVER_WAIT_SECS", "-0.5", secs),
            ("LLM_RETRY_MAX_SERVER_WAIT_SECS", "infinity", secs),
            ("LLM_RETRY_INITIAL_BACKOFF_MS", "0.5", ms),
            ("LLM_RETRY_INITIAL_BACKOFF_MS", "18446744073709551616", ms),
            ("LLM_RETRY_MAX_BACKOFF_MS", "1_000", ms),
            (
                "LLM_RETRY_JITTER",
                "random",
                "LLM_RETRY_JITTER: random is not one of proportional, equal, full or none",
            ),
            (
                "LLM_RETRY_MAX_REPLAY_BODY_BYTES",
                "16MiB",
                ": 16MiB is not a whole number of bytes",
            ),
            ("LLM_RETRY_MAX_RETRIES", "1\u{7}2\n", r": 1\u{7}2 is not"),
        ];
        for (name, value, want) in cases {
            let err = with(&[(name, value)]).expect_err(value);
            assert!(
                err.contains(name) && err.contains(want),
                "{name}={value}: {err}"
            );
        }
    }

    #[test]
    fn combinations_are_still_checked_when_built() {
        let err = with(&[("LLM_RETRY_MAX_ELAPSED_SECS", "0")]).unwrap_err();
        assert!(err.contains("max_elapsed: must be positive"), "{err}");
        let inverted = [
            ("LLM_RETRY_INITIAL_BACKOFF_MS", "2000"),
            ("LLM_RETRY_MAX_BACKOFF_MS", "1000"),
        ];
        assert!(with(&inverted).unwrap_err().contains("max_backoff"));
    }

    #[test]
    fn every_variable_is_prefixed_and_unique() {
        let mut names: Vec<&str> = VARS.iter().map(|v| v.name).collect();
        assert!(names.iter().all(|n| n.starts_with("LLM_RETRY_")));
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), VARS.len());
    }
}
