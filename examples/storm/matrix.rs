//! The provider-shaped scenarios: upstreams limited the way Anthropic,
//! OpenAI, Azure OpenAI and gateways limit a key, each with its own client
//! count, capacity and response time, and what each forces on any client.

use crate::config::Config;
use crate::stats::Run;
use crate::upstream::PATH;
use llm_retry_mock::{Limit, Quota, Reply, Route, Script, Shape};
use std::time::Duration;

/// A provider-shaped upstream and its workload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Shaped {
    /// Token bucket; whole-second `retry-after`; `anthropic-ratelimit-*` on every answer.
    Anthropic,
    /// Token bucket; `x-ratelimit-*` on every answer; `retry-after-ms` on 429.
    OpenAi,
    /// Fixed windows; `retry-after` to the window's end; remaining counts only.
    Azure,
    /// The first window is spent: everyone is told the same whole second.
    WindowReset,
    /// A tokens-per-minute quota; one request in ten is large.
    Tokens,
    /// 529 `overloaded_error` past N requests in flight.
    Concurrency,
    /// A gateway that answers 429 with `x-should-retry: false`.
    Gateway,
}

/// The quota in force, for the bound and for the known-quota row.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Capacity {
    /// Requests per second, and what is there at the start.
    Rate { per_sec: f64, initial: f64 },
    /// `limit` requests per window of `length`.
    Window {
        limit: u64,
        length: Duration,
        spent: bool,
    },
    /// Tokens per second and burst (requests are not limited).
    Tokens { per_sec: f64, burst: f64 },
    /// Requests in flight.
    InFlight(u32),
}

impl Shaped {
    /// In their numbers' order, which the report's summary keeps.
    pub(crate) const ALL: [Shaped; 7] = [
        Shaped::Anthropic,
        Shaped::OpenAi,
        Shaped::Azure,
        Shaped::WindowReset,
        Shaped::Tokens,
        Shaped::Concurrency,
        Shaped::Gateway,
    ];

    /// The scenario's number in the matrix (1 and 8 are the classic two).
    pub(crate) fn number(self) -> usize {
        match self {
            Shaped::Anthropic => 2,
            Shaped::OpenAi => 3,
            Shaped::Azure => 4,
            Shaped::WindowReset => 5,
            Shaped::Tokens => 6,
            Shaped::Concurrency => 7,
            Shaped::Gateway => 9,
        }
    }

    pub(crate) fn label(self) -> &'static str {
        match self {
            Shaped::Anthropic => "Anthropic-shaped bucket",
            Shaped::OpenAi => "OpenAI-shaped bucket",
            Shaped::Azure => "Azure-shaped windows",
            Shaped::WindowReset => "window reset",
            Shaped::Tokens => "tokens per minute",
            Shaped::Concurrency => "concurrency limit (529)",
            Shaped::Gateway => "gateway, x-should-retry: false",
        }
    }

    /// The workload: (clients, requests each, response time).
    fn workload(self) -> (usize, usize, Duration) {
        let ms = Duration::from_millis;
        match self {
            Shaped::Anthropic => (100, 6, ms(20)),
            Shaped::OpenAi => (150, 5, ms(20)),
            Shaped::Azure => (100, 8, ms(20)),
            Shaped::WindowReset => (200, 4, ms(20)),
            Shaped::Tokens => (100, 6, ms(20)),
            Shaped::Concurrency => (120, 10, ms(100)),
            Shaped::Gateway => (100, 6, ms(20)),
        }
    }

    pub(crate) fn capacity(self) -> Capacity {
        match self {
            Shaped::Anthropic => Capacity::Rate {
                per_sec: 100.0,
                initial: 20.0,
            },
            Shaped::OpenAi => Capacity::Rate {
                per_sec: 150.0,
                initial: 30.0,
            },
            Shaped::Azure => Capacity::Window {
                limit: 200,
                length: Duration::from_secs(2),
                spent: false,
            },
            Shaped::WindowReset => Capacity::Window {
                limit: 400,
                length: Duration::from_secs(1),
                spent: true,
            },
            Shaped::Tokens => Capacity::Tokens {
                per_sec: 100_000.0,
                burst: 100_000.0,
            },
            Shaped::Concurrency => Capacity::InFlight(40),
            Shaped::Gateway => Capacity::Rate {
                per_sec: 100.0,
                initial: 10.0,
            },
        }
    }

    /// The run's parameters: the base's seed and output, this scenario's
    /// workload, and its request capacity as C (for goodput and the
    /// known-quota row).
    pub(crate) fn config(self, base: &Config) -> Config {
        let (clients, requests, latency) = self.workload();
        let (capacity, burst) = match self.capacity() {
            Capacity::Rate { per_sec, initial } => (per_sec, initial),
            Capacity::Window { limit, length, .. } => {
                (limit as f64 / length.as_secs_f64(), limit as f64)
            }
            Capacity::Tokens { per_sec, .. } => (per_sec / mean_cost(), 10.0),
            Capacity::InFlight(n) => (f64::from(n) / latency.as_secs_f64(), f64::from(n)),
        };
        let mut config = base.clone();
        // No 503 window here: the outage is its own scenario.
        config.outage = Duration::ZERO;
        config.clients = clients;
        config.requests = requests;
        config.latency = latency;
        config.capacity = capacity.round() as u32;
        config.burst = burst.round() as u32;
        config.known_tokens = match self.capacity() {
            Capacity::Tokens { per_sec, burst } => Some(((per_sec * 60.0) as u32, burst as u32)),
            _ => None,
        };
        config
    }

    pub(crate) fn describe(self) -> String {
        let (clients, requests, latency) = self.workload();
        let ms = latency.as_millis();
        let what = match self {
            Shaped::Anthropic => "a token bucket of 100 requests/s in bursts of 20; a 429 says \
                `retry-after` in whole seconds, rounded up (no `retry-after-ms`), and every \
                answer carries `anthropic-ratelimit-requests-{limit,remaining,reset}` (reset \
                as RFC 3339, whole seconds)"
                .to_owned(),
            Shaped::OpenAi => "a token bucket of 150 requests/s in bursts of 30; every answer \
                carries `x-ratelimit-{limit,remaining,reset}-requests` (reset as a Go \
                duration), a 429 `retry-after-ms` and `retry-after`"
                .to_owned(),
            Shaped::Azure => "fixed windows of 200 requests per 2 s (a per-minute window, \
                scaled); a 429 says `retry-after` and `retry-after-ms` to the window's end, \
                every answer `x-ratelimit-remaining-requests` with no reset"
                .to_owned(),
            Shaped::WindowReset => "windows of 400 requests per second, the first already \
                spent: every request in the first second is told `retry-after: 1` (and \
                `retry-after-ms` to the reset), then served"
                .to_owned(),
            Shaped::Tokens => format!(
                "a token bucket of 100 000 tokens/s (OpenAI-shaped `x-ratelimit-*-tokens` \
                 headers), requests unlimited; a request costs its `max_tokens` plus a \
                 quarter of its bytes: nine in ten ask 256 tokens, one in ten 8 192 (about \
                 {:.0} tokens a request on average)",
                mean_cost()
            ),
            Shaped::Concurrency => "`529 overloaded_error` (no wait) past 40 requests in \
                flight; 100 ms per reply, so 400 requests/s at most"
                .to_owned(),
            Shaped::Gateway => "a gateway over a bucket of 100 requests/s in bursts of 10, \
                which gives up on the client's behalf: its 429 carries the exact wait \
                (`retry-after-ms`, `retry-after`) and `x-should-retry: false`"
                .to_owned(),
        };
        format!("{what}; {clients} clients × {requests} requests, {ms} ms per reply.")
    }

    pub(crate) fn script(self, config: &Config) -> Script {
        let latency = config.latency;
        let ok = Route::always(Reply::anthropic_ok("Hello! How can I help?").delay(latency));
        let limited = Reply::rate_limited(None).delay(latency);
        // The upstream is built from the scenario's capacity, so the bound
        // and the known-quota row read the same numbers.
        let bucket = |per_sec: f64, burst: f64| Quota::Bucket {
            per_second: per_sec as u64,
            burst: burst as u64,
        };
        // Requests all but unlimited where another quota is the limit.
        let unlimited = bucket(100_000.0, 100_000.0);
        let limit = match self.capacity() {
            Capacity::Rate { per_sec, initial } => Limit::new(bucket(per_sec, initial)),
            Capacity::Window {
                limit,
                length,
                spent,
            } => {
                let window = Limit::new(Quota::Window { limit, length });
                if spent {
                    window.first_window_spent()
                } else {
                    window
                }
            }
            Capacity::Tokens { per_sec, burst } => {
                Limit::new(unlimited).tokens(bucket(per_sec, burst))
            }
            Capacity::InFlight(n) => Limit::new(unlimited).max_in_flight(n),
        };
        let shape = match self {
            Shaped::Anthropic => Shape::Anthropic,
            Shaped::OpenAi | Shaped::Tokens => Shape::OpenAi,
            Shaped::Azure | Shaped::WindowReset => Shape::Azure,
            Shaped::Concurrency | Shaped::Gateway => Shape::Exact,
        };
        let when_limited = match self {
            Shaped::Gateway => limited.header("x-should-retry", "false"),
            _ => limited,
        };
        Script::new().route(PATH, Route::limited(limit.shape(shape), when_limited, ok))
    }

    /// The largest share of requests any client can have served: behind a
    /// gateway that forbids retrying, the first wave's refusals are final.
    pub(crate) fn most_served(self, config: &Config) -> f64 {
        match (self, self.capacity()) {
            (Shaped::Gateway, Capacity::Rate { initial, .. }) => {
                let logical = config.logical_requests() as f64;
                1.0 - (config.clients as f64 - initial).max(0.0) / logical
            }
            _ => 1.0,
        }
    }

    /// The largest share `run` can have served: also final, where refusals
    /// are, is every refused send that went before the first refusal came
    /// back to the client (the first wave's, and the next request of a
    /// client the first wave served, when it went before any refusal came
    /// back: a client told nothing but successes sends it).
    pub(crate) fn most_served_in(self, config: &Config, run: &Run) -> f64 {
        let most = self.most_served(config);
        if most >= 1.0 {
            return most;
        }
        let unwarned = run.unwarned_refusals as f64 / run.logical.max(1) as f64;
        most.min(1.0 - unwarned)
    }

    /// Sends per request any client must make: the first wave, sent before
    /// anything came back, gets what the upstream cannot admit at once.
    pub(crate) fn forced_sends(self, config: &Config) -> f64 {
        let at_once = match self.capacity() {
            Capacity::Rate { initial, .. } => initial,
            Capacity::Window { limit, spent, .. } => {
                if spent {
                    0.0
                } else {
                    limit as f64
                }
            }
            Capacity::Tokens { burst, .. } => burst / mean_cost(),
            Capacity::InFlight(n) => f64::from(n),
        };
        // Behind a gateway that forbids retrying, a refusal ends the request.
        if self == Shaped::Gateway {
            return 1.0;
        }
        forced_beyond(config, at_once)
    }

    /// The shortest time the workload can take: the work over the
    /// capacity, plus the waits the scenario forces, plus one reply.
    pub(crate) fn bound(self, config: &Config) -> Duration {
        let logical = config.logical_requests() as f64;
        let latency = config.latency.as_secs_f64();
        let secs = match self.capacity() {
            Capacity::Rate { per_sec, initial } => rate_secs(config, per_sec, initial),
            Capacity::Window {
                limit,
                length,
                spent,
            } => {
                let windows = (logical / limit as f64).ceil();
                let waits = if spent { windows } else { windows - 1.0 };
                waits * length.as_secs_f64()
            }
            Capacity::Tokens { per_sec, burst } => {
                (logical * mean_cost() - burst).max(0.0) / per_sec
            }
            Capacity::InFlight(n) => (logical / f64::from(n) - 1.0).max(0.0) * latency,
        };
        Duration::from_secs_f64(secs + latency)
    }
}

/// Sends per request when the first wave's sends beyond `at_once` are
/// refused once each.
pub(crate) fn forced_beyond(config: &Config, at_once: f64) -> f64 {
    1.0 + (config.clients as f64 - at_once).max(0.0) / config.logical_requests() as f64
}

/// Seconds the work takes at `per_sec` after an `initial` burst.
pub(crate) fn rate_secs(config: &Config, per_sec: f64, initial: f64) -> f64 {
    (config.logical_requests() as f64 - initial).max(0.0) / per_sec
}

/// The mean token cost of the storm's requests (see `upstream::request`).
pub(crate) fn mean_cost() -> f64 {
    let (small, large) = crate::upstream::token_costs();
    (9.0 * small as f64 + large as f64) / 10.0
}
