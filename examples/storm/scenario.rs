//! The scenarios: what the upstream answers, and how long clients keep
//! sending.

use crate::config::Config;
use crate::harm::Harm;
use crate::matrix::Shaped;
use crate::upstream::PATH;
use llm_retry_mock::{Reply, Route, Script};
use tokio::time::Instant;

/// Which upstream and which workload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scenario {
    /// Fixed requests per client against the token bucket.
    RateLimit,
    /// Closed loop for the ideal duration, 503 for a window in the middle.
    Outage,
    /// Fixed requests per client against a provider-shaped limit.
    Shaped(Shaped),
    /// Fixed requests per client against a shape a gate must not make worse.
    Harm(Harm),
}

impl Scenario {
    pub(crate) fn label(self) -> &'static str {
        match self {
            Scenario::RateLimit => "rate limit",
            Scenario::Outage => "outage",
            Scenario::Shaped(shaped) => shaped.label(),
            Scenario::Harm(harm) => harm.label(),
        }
    }

    /// The mock upstream's script: C requests/s with a burst, each reply
    /// after the fixed response time; in the outage, 503 inside the window.
    pub(crate) fn script(self, config: &Config) -> Script {
        let latency = config.latency;
        let ok = Route::always(Reply::anthropic_ok("Hello! How can I help?").delay(latency));
        let limited = Route::capacity(
            config.capacity,
            config.burst,
            Reply::rate_limited(None).delay(latency),
            ok,
        );
        let route = match self {
            Scenario::Shaped(shaped) => return shaped.script(config),
            Scenario::Harm(harm) => return harm.script(config),
            Scenario::RateLimit => limited,
            Scenario::Outage => Route::outage(
                config.outage_window(),
                Reply::anthropic_error(503, "api_error", "Service unavailable").delay(latency),
                limited,
            ),
        };
        Script::new().route(PATH, route)
    }

    /// When clients stop starting requests, for a run whose upstream
    /// started at `t0`: `None` is after a fixed count each.
    pub(crate) fn deadline(self, config: &Config, t0: Instant) -> Option<Instant> {
        match self {
            Scenario::RateLimit | Scenario::Shaped(_) | Scenario::Harm(_) => None,
            Scenario::Outage => Some(t0 + config.ideal_duration()),
        }
    }

    /// How long after the upstream's start a run is stopped, if ever:
    /// requests still running are dropped then.
    pub(crate) fn cutoff(self) -> Option<std::time::Duration> {
        match self {
            Scenario::Harm(_) => Some(crate::harm::CUTOFF),
            _ => None,
        }
    }

    /// The model client `c`'s request bodies name, where the scenario
    /// names one (`None`: the storm's usual bodies).
    pub(crate) fn model(self, c: usize) -> Option<&'static str> {
        match self {
            Scenario::Harm(harm) => harm.model(c),
            _ => None,
        }
    }

    /// How many logical requests the run will have, if known up front.
    pub(crate) fn total(self, config: &Config) -> Option<usize> {
        match self {
            Scenario::RateLimit | Scenario::Shaped(_) | Scenario::Harm(_) => {
                Some(config.logical_requests())
            }
            Scenario::Outage => None,
        }
    }
}
