//! Reading the config file (`gateway.toml`): its schema, and the
//! validation that turns it into a [`Config`] or refuses it naming the
//! field and its line. Above the routes and targets: each route's failover
//! and each target's retry stack are built once here to validate them.

mod shared;

use crate::config::{ClientKey, Config, ConfigError, RouteConfig, TargetConfig};
use crate::duration;
use http::{HeaderName, HeaderValue, Uri};
use serde::Deserialize;
use shared::SharedFile;
use std::net::SocketAddr;
use std::ops::Range;
use std::time::Duration;
use toml::Spanned;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    listen: Option<Spanned<String>>,
    shutdown_grace: Option<Spanned<String>>,
    max_body: Option<Spanned<usize>>,
    max_in_flight: Option<Spanned<usize>>,
    body_timeout: Option<Spanned<String>>,
    header_read_timeout: Option<Spanned<String>>,
    stream_idle_timeout: Option<Spanned<String>>,
    client_key_env: Option<Spanned<String>>,
    shared: Option<Spanned<SharedFile>>,
    #[serde(default, rename = "route")]
    routes: Vec<Spanned<RouteFile>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RouteFile {
    name: Spanned<String>,
    path_prefix: Option<Spanned<String>>,
    #[serde(default)]
    models: Vec<String>,
    max_target_attempts: Option<Spanned<usize>>,
    max_upstream_sends: Option<Spanned<u32>>,
    deadline: Option<Spanned<String>>,
    exhaustion_retry: Option<Spanned<ExhaustionFile>>,
    state_bound_header: Option<Spanned<String>>,
    #[serde(default, rename = "target")]
    targets: Vec<Spanned<TargetFile>>,
}

impl RouteFile {
    /// Where `field` (a setting's name, as errors name it) is written, when
    /// it is.
    fn span_of(&self, field: &str) -> Option<Range<usize>> {
        let retry = self.exhaustion_retry.as_ref();
        match field {
            "name" => Some(self.name.span()),
            "path_prefix" => self.path_prefix.as_ref().map(Spanned::span),
            "max_target_attempts" => self.max_target_attempts.as_ref().map(Spanned::span),
            "max_upstream_sends" => self.max_upstream_sends.as_ref().map(Spanned::span),
            "deadline" => self.deadline.as_ref().map(Spanned::span),
            "state_bound_header" => self.state_bound_header.as_ref().map(Spanned::span),
            "exhaustion_retry.max_rounds" => retry.map(|r| r.get_ref().max_rounds.span()),
            "exhaustion_retry.max_wait" => retry.map(|r| r.get_ref().max_wait.span()),
            _ => None,
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ExhaustionFile {
    max_rounds: Spanned<u32>,
    max_wait: Spanned<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TargetFile {
    name: Spanned<String>,
    base_url: Spanned<String>,
    api_key_env: Option<Spanned<String>>,
    auth: Option<Spanned<String>>,
    model: Option<Spanned<String>>,
    max_retries: Option<Spanned<u32>>,
    max_server_wait: Option<Spanned<String>>,
    attempt_timeout: Option<Spanned<String>>,
    first_content_timeout: Option<Spanned<String>>,
    requests_per_minute: Option<Spanned<u32>>,
    #[serde(default)]
    cooldown: bool,
    unhealthy_after: Option<Spanned<HealthFile>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct HealthFile {
    failures: u32,
    within: String,
}

impl TargetFile {
    /// Where `field` is written, when it is.
    fn span_of(&self, field: &str) -> Option<Range<usize>> {
        let span = |value: &Option<Spanned<String>>| value.as_ref().map(Spanned::span);
        match field {
            "name" => Some(self.name.span()),
            "base_url" => Some(self.base_url.span()),
            "api_key_env" => span(&self.api_key_env),
            "auth" => span(&self.auth),
            "model" => span(&self.model),
            "attempt_timeout" => span(&self.attempt_timeout),
            "max_server_wait" => span(&self.max_server_wait),
            "first_content_timeout" => span(&self.first_content_timeout),
            "max_retries" => self.max_retries.as_ref().map(Spanned::span),
            "requests_per_minute" => self.requests_per_minute.as_ref().map(Spanned::span),
            "unhealthy_after" => self.unhealthy_after.as_ref().map(Spanned::span),
            _ => None,
        }
    }
}

/// The longest provider-named wait a target's stack waits out by default.
const DEFAULT_MAX_SERVER_WAIT: Duration = Duration::from_secs(2);

/// Most retries a target's own stack may make per attempt.
const MAX_TARGET_RETRIES: u32 = 10;
/// A route's deadline when none is given.
const DEFAULT_DEADLINE: Duration = Duration::from_secs(600);

impl Config {
    /// Parses and validates `text`, reading credentials with `env`.
    pub fn parse(text: &str, env: impl Fn(&str) -> Option<String>) -> Result<Config, ConfigError> {
        let line_of =
            |span: Range<usize>| Some(text[..span.start.min(text.len())].matches('\n').count() + 1);
        let file: File = toml::from_str(text).map_err(|error| ConfigError {
            line: error.span().and_then(line_of),
            field: "file".to_owned(),
            problem: error.message().to_owned(),
        })?;
        let listen = match &file.listen {
            None => SocketAddr::from(([127, 0, 0, 1], 8080)),
            Some(listen) => listen.get_ref().parse().map_err(|_| ConfigError {
                line: line_of(listen.span()),
                field: "listen".to_owned(),
                problem: format!("{:?} is not an address and port", listen.get_ref()),
            })?,
        };
        let at_top = |field: &str, span: Range<usize>, problem: String| ConfigError {
            line: line_of(span),
            field: field.to_owned(),
            problem,
        };
        // A top-level duration: its default when absent, read by `parse`.
        let duration_of = |field: &str,
                           value: &Option<Spanned<String>>,
                           default: Duration,
                           parse: fn(&str) -> Result<Duration, String>| {
            value.as_ref().map_or(Ok(default), |text| {
                parse(text.get_ref()).map_err(|problem| at_top(field, text.span(), problem))
            })
        };
        // A top-level count: its default when absent; zero refused.
        let count_of = |field: &str, value: &Option<Spanned<usize>>, default: usize| match value {
            Some(n) if *n.get_ref() == 0 => {
                Err(at_top(field, n.span(), "must be more than 0".to_owned()))
            }
            Some(n) => Ok(*n.get_ref()),
            None => Ok(default),
        };
        let shutdown_grace = duration_of(
            "shutdown_grace",
            &file.shutdown_grace,
            Duration::from_secs(30),
            duration::parse,
        )?;
        let max_body = count_of("max_body", &file.max_body, 16 << 20)?;
        let max_in_flight = count_of("max_in_flight", &file.max_in_flight, 1024)?;
        let body_timeout = duration_of(
            "body_timeout",
            &file.body_timeout,
            Duration::from_secs(60),
            duration::parse_positive,
        )?;
        let header_read_timeout = duration_of(
            "header_read_timeout",
            &file.header_read_timeout,
            Duration::from_secs(30),
            duration::parse_positive,
        )?;
        let stream_idle_timeout = duration_of(
            "stream_idle_timeout",
            &file.stream_idle_timeout,
            Duration::from_secs(300),
            duration::parse_positive,
        )?;
        let client_key = match &file.client_key_env {
            Some(var) => match env(var.get_ref()).filter(|key| !key.is_empty()) {
                Some(key) => Some(ClientKey(key)),
                None => {
                    return Err(at_top(
                        "client_key_env",
                        var.span(),
                        format!("the environment variable {} is not set", var.get_ref()),
                    ))
                }
            },
            None => None,
        };
        let shared = file
            .shared
            .as_ref()
            .map(|shared| shared.get_ref().validate(shared.span(), line_of, &env))
            .transpose()?;
        if file.routes.is_empty() {
            return Err(ConfigError {
                line: None,
                field: "route".to_owned(),
                problem: "at least one [[route]] is needed".to_owned(),
            });
        }
        let mut routes = Vec::with_capacity(file.routes.len());
        for spanned in &file.routes {
            let route = spanned.get_ref();
            let name = route.name.get_ref();
            // At the field's own line when it is written, else the route's.
            let at = |field: &str, problem: String| ConfigError {
                line: line_of(route.span_of(field).unwrap_or(spanned.span())),
                field: format!("route[{name}].{field}"),
                problem,
            };
            if shared.is_some() {
                crate::shared_config::marks_name(name).map_err(|p| at("name", p))?;
            }
            if routes.iter().any(|r: &RouteConfig| &r.name == name) {
                return Err(at("name", "is used by an earlier route".to_owned()));
            }
            if route
                .path_prefix
                .as_ref()
                .is_some_and(|p| !p.get_ref().starts_with('/'))
            {
                return Err(at("path_prefix", "must start with /".to_owned()));
            }
            let deadline = match &route.deadline {
                Some(text) => {
                    duration::parse_positive(text.get_ref()).map_err(|p| at("deadline", p))?
                }
                None => DEFAULT_DEADLINE,
            };
            let exhaustion_retry = match route.exhaustion_retry.as_ref().map(Spanned::get_ref) {
                Some(retry) => Some(llm_retry::failover::ExhaustionRetry::new(
                    *retry.max_rounds.get_ref(),
                    duration::parse(retry.max_wait.get_ref())
                        .map_err(|p| at("exhaustion_retry.max_wait", p))?,
                )),
                None => None,
            };
            let state_bound_header = match route.state_bound_header.as_ref().map(Spanned::get_ref) {
                Some(header) => Some(HeaderName::try_from(header.as_str()).map_err(|_| {
                    at(
                        "state_bound_header",
                        format!("{header:?} is not a header name"),
                    )
                })?),
                None => None,
            };
            if route.targets.is_empty() {
                return Err(at(
                    "target",
                    "at least one [[route.target]] is needed".to_owned(),
                ));
            }
            let mut targets: Vec<TargetConfig> = Vec::with_capacity(route.targets.len());
            for spanned in &route.targets {
                let file = spanned.get_ref();
                let mut target = target(file, &env).map_err(|(field, problem)| ConfigError {
                    line: line_of(file.span_of(field).unwrap_or(spanned.span())),
                    field: format!("route[{name}].target[{}].{field}", file.name.get_ref()),
                    problem,
                })?;
                if file.max_retries.is_none() && route.targets.len() > 1 {
                    target.max_retries = 0;
                }
                match &file.max_server_wait {
                    Some(written) if target.max_server_wait >= deadline => {
                        return Err(ConfigError {
                            line: line_of(written.span()),
                            field: format!("route[{name}].target[{}].max_server_wait", target.name),
                            problem: format!(
                                "{:?} is not shorter than the route's deadline ({deadline:?})",
                                target.max_server_wait
                            ),
                        });
                    }
                    _ => target.max_server_wait = target.max_server_wait.min(deadline),
                }
                if shared.is_some() {
                    crate::shared_config::target_name(name, &target.name).map_err(|problem| {
                        ConfigError {
                            line: line_of(file.name.span()),
                            field: format!("route[{name}].target[{}].name", target.name),
                            problem,
                        }
                    })?;
                }
                if targets.iter().any(|t| t.name == target.name) {
                    return Err(ConfigError {
                        line: line_of(file.name.span()),
                        field: format!("route[{name}].target[{}].name", target.name),
                        problem: "is used by an earlier target of the route".to_owned(),
                    });
                }
                targets.push(target);
            }
            let config = RouteConfig {
                name: name.clone(),
                path_prefix: route.path_prefix.as_ref().map(|p| p.get_ref().clone()),
                models: route.models.clone(),
                max_target_attempts: route.max_target_attempts.as_ref().map(|n| *n.get_ref()),
                max_upstream_sends: route.max_upstream_sends.as_ref().map(|n| *n.get_ref()),
                deadline,
                exhaustion_retry,
                state_bound_header,
                targets,
            };
            // The failover's own validation of its budgets, at this route's line.
            if let Err(error) = crate::route::failover_for(&config) {
                return Err(at(error.setting(), error.to_string()));
            }
            // The targets' own retry stacks, built once to validate them.
            for target in &config.targets {
                if let Err(error) = crate::upstream::validate(&config, target) {
                    return Err(at(&format!("target[{}]", target.name), error.to_string()));
                }
            }
            if let Some(earlier) = routes.iter().find(|r| crate::route::shadows(r, &config)) {
                return Err(ConfigError {
                    line: line_of(spanned.span()),
                    field: format!("route[{name}]"),
                    problem: format!(
                        "is never reached: route[{}] before it takes every request it would \
                         (same or wider path_prefix, and models)",
                        earlier.name
                    ),
                });
            }
            routes.push(config);
        }
        // Keys sent on behalf of whoever can connect: only to clients that
        // present the gateway's own key, or on loopback.
        let keyed = routes
            .iter()
            .flat_map(|r| &r.targets)
            .any(|t| t.credential.is_some());
        if keyed && client_key.is_none() && !listen.ip().is_loopback() {
            return Err(ConfigError {
                line: file.listen.as_ref().and_then(|l| line_of(l.span())),
                field: "listen".to_owned(),
                problem: format!(
                    "{listen} is not loopback and targets send their own keys: set client_key_env so only clients holding the gateway's key can spend them"
                ),
            });
        }
        Ok(Config {
            listen,
            shutdown_grace,
            max_body,
            max_in_flight,
            body_timeout,
            header_read_timeout,
            stream_idle_timeout,
            client_key,
            routes,
            shared,
        })
    }
}

/// One target's table, validated: `Err((field, problem))`.
fn target(
    file: &TargetFile,
    env: &impl Fn(&str) -> Option<String>,
) -> Result<TargetConfig, (&'static str, String)> {
    let text = |value: &Option<Spanned<String>>| value.as_ref().map(|v| v.get_ref().clone());
    let written_url = file.base_url.get_ref();
    let base_url: Uri = written_url
        .parse()
        .map_err(|_| ("base_url", format!("{written_url:?} is not a URL")))?;
    match base_url.scheme_str() {
        Some("http" | "https") => {}
        _ => {
            return Err((
                "base_url",
                format!("{written_url:?} must start with http:// or https://"),
            ))
        }
    }
    if base_url.authority().is_none() {
        return Err(("base_url", format!("{written_url:?} has no host")));
    }
    if base_url.query().is_some() {
        return Err(("base_url", "must not have a query".to_owned()));
    }
    if base_url
        .authority()
        .is_some_and(|a| a.as_str().contains('@'))
    {
        return Err((
            "base_url",
            "must not carry a user or password (use api_key_env)".to_owned(),
        ));
    }
    let auth_written = text(&file.auth);
    let auth = match auth_written.as_deref() {
        None | Some("bearer") => None,
        Some("x-api-key") => Some(crate::upstream::X_API_KEY),
        Some("api-key") => Some(crate::upstream::API_KEY),
        Some(other) => {
            return Err((
                "auth",
                format!("{other:?} is not one of bearer, x-api-key, api-key"),
            ))
        }
    };
    let credential = match text(&file.api_key_env) {
        None if file.auth.is_some() => {
            return Err((
                "auth",
                "is set but api_key_env is not: there is no key to send".to_owned(),
            ))
        }
        None => None,
        Some(var) => {
            let key = env(&var).filter(|key| !key.is_empty()).ok_or_else(|| {
                (
                    "api_key_env",
                    format!("the environment variable {var} is not set"),
                )
            })?;
            let (name, value) = match auth {
                Some(name) => (name, key),
                None => (http::header::AUTHORIZATION, format!("Bearer {key}")),
            };
            let mut value = HeaderValue::try_from(value).map_err(|_| {
                (
                    "api_key_env",
                    format!("the value of {var} is not a valid header value"),
                )
            })?;
            value.set_sensitive(true);
            Some((name, value))
        }
    };
    let loopback = base_url.host().is_some_and(|host| {
        host == "localhost"
            || host
                .trim_matches(['[', ']'])
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback())
    });
    if credential.is_some() && base_url.scheme_str() == Some("http") && !loopback {
        return Err((
            "base_url",
            format!(
                "{written_url:?} is plain http to another host: the key would travel in clear (use https)"
            ),
        ));
    }
    let max_retries = file.max_retries.as_ref().map_or(2, |n| *n.get_ref());
    if max_retries > MAX_TARGET_RETRIES {
        return Err((
            "max_retries",
            format!("{max_retries} is more than {MAX_TARGET_RETRIES}"),
        ));
    }
    // A target's timeout: absent, or more than zero.
    let timeout = |field: &'static str, written: &Option<Spanned<String>>| {
        written
            .as_ref()
            .map(|w| duration::parse_positive(w.get_ref()))
            .transpose()
            .map_err(|problem| (field, problem))
    };
    let attempt_timeout = timeout("attempt_timeout", &file.attempt_timeout)?;
    let max_server_wait = match &file.max_server_wait {
        Some(written) => duration::parse(written.get_ref()).map_err(|p| ("max_server_wait", p))?,
        None => DEFAULT_MAX_SERVER_WAIT,
    };
    let first_content_timeout = timeout("first_content_timeout", &file.first_content_timeout)?;
    let unhealthy_after = match file.unhealthy_after.as_ref().map(Spanned::get_ref) {
        None => None,
        Some(HealthFile { failures: 0, .. }) => {
            return Err(("unhealthy_after", "failures must be more than 0".to_owned()))
        }
        Some(health) => {
            let within = duration::parse_positive(&health.within)
                .map_err(|problem| ("unhealthy_after", format!("within: {problem}")))?;
            Some((health.failures, within))
        }
    };
    let requests_per_minute = file.requests_per_minute.as_ref().map(|n| *n.get_ref());
    if requests_per_minute == Some(0) {
        return Err(("requests_per_minute", "must be more than 0".to_owned()));
    }
    Ok(TargetConfig {
        name: file.name.get_ref().clone(),
        base_url,
        credential,
        model: text(&file.model),
        max_retries,
        max_server_wait,
        attempt_timeout,
        first_content_timeout,
        requests_per_minute,
        cooldown: file.cooldown,
        unhealthy_after,
    })
}
