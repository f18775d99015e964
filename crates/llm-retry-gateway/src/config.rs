//! What the config file (`gateway.toml`) says, validated: [`Config`] and
//! its parts, and the [`ConfigError`] a refused file gets. Reading and
//! validating the file is [`load`](crate::load)'s.

use crate::shared_config::SharedConfig;
use http::{HeaderName, HeaderValue, Uri};
use std::fmt;
use std::net::SocketAddr;
use std::time::Duration;

/// A validated gateway configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// Where the gateway listens.
    pub listen: SocketAddr,
    /// How long in-flight requests may run after a shutdown signal.
    pub shutdown_grace: Duration,
    /// The largest request body accepted, in bytes.
    pub max_body: usize,
    /// Requests in flight at most; past it new ones get `503`.
    pub max_in_flight: usize,
    /// How long reading a request's body may take.
    pub body_timeout: Duration,
    /// How long a client may take to send a request's head (HTTP/1: the
    /// request line and headers); past it the connection is closed.
    pub header_read_timeout: Duration,
    /// How long an answer's body may go without a frame before it is ended.
    pub stream_idle_timeout: Duration,
    /// The key clients must present (`Authorization: Bearer …` or
    /// `x-api-key`), when one is configured.
    pub client_key: Option<ClientKey>,
    /// The routes, matched in order.
    pub routes: Vec<RouteConfig>,
    /// The Redis this gateway shares retry budgets and failover marks
    /// through with its other replicas, when `[shared]` is set.
    pub shared: Option<SharedConfig>,
}

/// One route: which requests it takes and the targets it sends them to.
#[derive(Debug, Clone)]
pub struct RouteConfig {
    /// The route's name (a metrics label).
    pub name: String,
    /// Requests whose path starts with this; any path when `None`.
    pub path_prefix: Option<String>,
    /// Requests whose body's `model` is one of these; any model when empty.
    pub models: Vec<String>,
    /// Targets tried per round at most.
    pub max_target_attempts: Option<usize>,
    /// Upstream sends per request at most.
    pub max_upstream_sends: Option<u32>,
    /// Time a request may take, waits and rounds included.
    pub deadline: Duration,
    /// Further rounds after every target turned a request away.
    pub exhaustion_retry: Option<llm_retry::failover::ExhaustionRetry>,
    /// A request header that binds a request to provider state.
    pub state_bound_header: Option<HeaderName>,
    /// The targets, in priority order.
    pub targets: Vec<TargetConfig>,
}

/// One upstream of a route.
#[derive(Clone)]
pub struct TargetConfig {
    /// The target's name (a metrics label).
    pub name: String,
    /// Scheme, authority and optional base path of the upstream.
    pub base_url: Uri,
    /// The credential header the gateway sends instead of the client's.
    pub credential: Option<(HeaderName, HeaderValue)>,
    /// The model the request's `model` is rewritten to.
    pub model: Option<String>,
    /// Retries per attempt of this target (its own retry stack). Default 2
    /// on a route with one target, 0 on a route with several: there the
    /// next target is the retry, and further rounds (opt-in) the delayed
    /// one.
    pub max_retries: u32,
    /// The longest wait a provider names that this target's stack waits
    /// out before it resends (default 2 s, and never the route's deadline
    /// or more): a longer one ends the target's attempt at once, so the
    /// failover moves on and its give-up names the provider's wait.
    pub max_server_wait: Duration,
    /// Time to the answer's head (a stream's first content) per send.
    pub attempt_timeout: Option<Duration>,
    /// Abandon the target when nothing arrived in this time.
    pub first_content_timeout: Option<Duration>,
    /// Requests per minute the provider allows this key.
    pub requests_per_minute: Option<u32>,
    /// Skip the target, for the requests naming the same model, while a
    /// wait its provider named runs.
    pub cooldown: bool,
    /// Skip the target for the window once it failed this many times
    /// within it: `(failures, window)`.
    pub unhealthy_after: Option<(u32, Duration)>,
}

impl fmt::Debug for TargetConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TargetConfig")
            .field("name", &self.name)
            .field("base_url", &self.base_url)
            .field(
                "credential",
                &self.credential.as_ref().map(|(name, _)| name),
            )
            .field("model", &self.model)
            .field("max_retries", &self.max_retries)
            .field("max_server_wait", &self.max_server_wait)
            .finish_non_exhaustive()
    }
}

/// The key clients must present. Never printed.
#[derive(Clone)]
pub struct ClientKey(pub(crate) String);

impl fmt::Debug for ClientKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ClientKey(..)")
    }
}

/// A config file that cannot be used: where, which field, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// The 1-based line of the table or value at fault, when known.
    pub line: Option<usize>,
    /// The field, as a path: `route[claude].target[primary].base_url`.
    pub field: String,
    /// What is wrong.
    pub problem: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(line) => write!(f, "line {line}: {}: {}", self.field, self.problem),
            None => write!(f, "{}: {}", self.field, self.problem),
        }
    }
}

impl std::error::Error for ConfigError {}
