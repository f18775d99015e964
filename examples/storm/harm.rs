//! The shapes a gate must not make worse: upstreams whose refusals or
//! stated quotas are no evidence that this key, or this model, is out of
//! capacity, each with its own workload, and the row each is measured
//! against.

use crate::config::Config;
use crate::policies::Policy;
use crate::stacks::Stack;
use crate::upstream::{DRAW_HEADER, PATH};
use llm_retry_mock::{Limit, Quota, Reply, Route, Script};
use std::time::{Duration, SystemTime};

/// When a run of these scenarios is stopped: requests still running then
/// are dropped and count as not served.
pub(crate) const CUTOFF: Duration = Duration::from_secs(60);

/// How long the held model of [`Harm::PerModel`] is refused.
pub(crate) const HELD_FOR: Duration = Duration::from_secs(5);
/// The model held for [`HELD_FOR`] in [`Harm::PerModel`].
pub(crate) const HELD_MODEL: &str = "claude-opus-4-5";
/// The model on the same key that is always served.
pub(crate) const FREE_MODEL: &str = "claude-haiku-4-5";

/// Share of answers refused at random, in percent.
const REFUSED_PCT: u32 = 15;
const OVERLOADED_PCT: u32 = 10;

/// An upstream shape where a gate has nothing to act on, and its workload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Harm {
    /// 429 to a random share of answers, whatever the rate; `retry-after: 1`.
    RefusedNamed,
    /// The same, no wait named.
    RefusedUnnamed,
    /// OpenAI's head on every answer: a large quota, nearly all of it left.
    OpenAiHead,
    /// Anthropic's head on every answer: a large quota, nearly all left.
    AnthropicHead,
    /// One model refused for a while (with the wait to its end), another
    /// model on the same key always served.
    PerModel,
    /// 529 to a random share of answers, whatever the concurrency.
    Overloaded,
}

/// What a scenario's targets are measured against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Target {
    /// ≥ 99 % served; completion ≤ 1.2× and sends per request ≤ 1.1× the baseline's.
    ServedTimeSends,
    /// Completion ≤ 1.2× the baseline's.
    Time,
    /// The free model's completion ≤ 1.2× the baseline's; the held model
    /// served, none of it before its wait is over.
    FreeModelHeldModel,
    /// Completion and p50 ≤ 1.2× the baseline's.
    TimeP50,
}

impl Harm {
    /// In their numbers' order.
    pub(crate) const ALL: [Harm; 6] = [
        Harm::RefusedNamed,
        Harm::RefusedUnnamed,
        Harm::OpenAiHead,
        Harm::AnthropicHead,
        Harm::PerModel,
        Harm::Overloaded,
    ];

    /// The scenario's number in the matrix.
    pub(crate) fn number(self) -> &'static str {
        match self {
            Harm::RefusedNamed => "10a",
            Harm::RefusedUnnamed => "10b",
            Harm::OpenAiHead => "11a",
            Harm::AnthropicHead => "11b",
            Harm::PerModel => "12",
            Harm::Overloaded => "13",
        }
    }

    pub(crate) fn label(self) -> &'static str {
        match self {
            Harm::RefusedNamed => "random 429s, retry-after: 1",
            Harm::RefusedUnnamed => "random 429s, no wait named",
            Harm::OpenAiHead => "burst under a stated quota, OpenAI head",
            Harm::AnthropicHead => "burst under a stated quota, Anthropic head",
            Harm::PerModel => "one model held, another free",
            Harm::Overloaded => "random 529s",
        }
    }

    /// The row the targets compare `llm-retry defaults` with.
    pub(crate) fn baseline(self) -> Policy {
        match self {
            Harm::OpenAiHead | Harm::AnthropicHead => Policy::Model(crate::models::Model::NoRetry),
            _ => Policy::Middleware(Stack::RetryOnly),
        }
    }

    pub(crate) fn target(self) -> Target {
        match self {
            Harm::RefusedNamed | Harm::RefusedUnnamed => Target::ServedTimeSends,
            Harm::OpenAiHead | Harm::AnthropicHead => Target::Time,
            Harm::PerModel => Target::FreeModelHeldModel,
            Harm::Overloaded => Target::TimeP50,
        }
    }

    /// The workload: (clients, requests each, response time).
    fn workload(self) -> (usize, usize, Duration) {
        let ms = Duration::from_millis;
        match self {
            Harm::RefusedNamed | Harm::RefusedUnnamed => (60, 10, ms(20)),
            Harm::OpenAiHead | Harm::AnthropicHead => (200, 2, ms(20)),
            Harm::PerModel => (40, 10, ms(20)),
            Harm::Overloaded => (60, 10, ms(100)),
        }
    }

    /// Runs of each row, of which the one with the median completion is
    /// reported. A burst's whole run lasts tens of milliseconds, which one
    /// run's scheduling on a busy machine moves by a fifth either way. A
    /// random share's completion rests on its unluckiest request; its
    /// refusals are drawn per client, request and attempt, the same in
    /// every row and run, so what moves it is the backoff's jitter and
    /// scheduling.
    pub(crate) fn repeats(self) -> usize {
        match self {
            Harm::OpenAiHead | Harm::AnthropicHead => 5,
            Harm::RefusedNamed | Harm::RefusedUnnamed | Harm::Overloaded => 3,
            Harm::PerModel => 1,
        }
    }

    /// The quota the known-quota row is told: (per second, burst). Where
    /// a quota is stated, that one (the burst is what remains of it);
    /// elsewhere one far above anything these workloads send.
    fn known_quota(self, clients: usize) -> (u32, u32) {
        match self {
            Harm::OpenAiHead => (10_000u32.div_ceil(60), 9_998),
            Harm::AnthropicHead => (4_000u32.div_ceil(60), 3_999),
            _ => (100_000, u32::try_from(clients).unwrap_or(u32::MAX)),
        }
    }

    /// The run's parameters: the base's seed and output, this scenario's
    /// workload and known quota.
    pub(crate) fn config(self, base: &Config) -> Config {
        let (clients, requests, latency) = self.workload();
        let (capacity, burst) = self.known_quota(clients);
        let mut config = base.clone();
        config.outage = Duration::ZERO;
        config.clients = clients;
        config.requests = requests;
        config.latency = latency;
        config.capacity = capacity;
        config.burst = burst;
        config.known_tokens = None;
        config
    }

    /// The model client `c`'s bodies name: in [`Harm::PerModel`] even
    /// clients ask for the held model and odd ones for the free one, so a
    /// free request never waits behind a held one in its own client.
    pub(crate) fn model(self, c: usize) -> Option<&'static str> {
        match self {
            Harm::PerModel if c.is_multiple_of(2) => Some(HELD_MODEL),
            Harm::PerModel => Some(FREE_MODEL),
            _ => None,
        }
    }

    pub(crate) fn describe(self) -> String {
        let (clients, requests, latency) = self.workload();
        let ms = latency.as_millis();
        let what = match self {
            Harm::RefusedNamed => format!(
                "`429 rate_limit_error` with `retry-after: 1` to a random {REFUSED_PCT} % of \
                 attempts (`Route::mix_per`, drawn per client, request and attempt, the same in every row), whatever the rate: a shared organisation quota drained \
                 by others, a tenant limit in front; nothing else limits"
            ),
            Harm::RefusedUnnamed => format!(
                "`429 rate_limit_error` with no wait named to a random {REFUSED_PCT} % of \
                 attempts (`Route::mix_per`, as in 10a), whatever the rate; nothing else limits"
            ),
            Harm::OpenAiHead => "every answer is a 200 carrying OpenAI's head for a large \
                 quota with room left: `x-ratelimit-limit-requests: 10000`, \
                 `x-ratelimit-remaining-requests: 9998`, `x-ratelimit-reset-requests: 6ms`, \
                 and tokens (`2000000` limit, `1999000` remaining, reset `30ms`); all \
                 clients send at once"
                .to_owned(),
            Harm::AnthropicHead => "every answer is a 200 carrying Anthropic's head for a \
                 large quota with room left: `anthropic-ratelimit-requests-limit: 4000`, \
                 `-remaining: 3999`, `-reset:` an RFC 3339 instant 60 s after the upstream \
                 started; all clients send at once"
                .to_owned(),
            Harm::PerModel => format!(
                "one key, two models: even clients' bodies name `{HELD_MODEL}`, odd clients' \
                 `{FREE_MODEL}` (`Route::by_model`). Every `{HELD_MODEL}` request in the first \
                 {} s gets `429 rate_limit_error` naming the wait to the end of those {} s \
                 (`retry-after-ms`, and `retry-after` rounded up), then is served; \
                 `{FREE_MODEL}` is always served",
                HELD_FOR.as_secs(),
                HELD_FOR.as_secs()
            ),
            Harm::Overloaded => format!(
                "`529 overloaded_error` with no wait named to a random {OVERLOADED_PCT} % of \
                 attempts (`Route::mix_per`, as in 10a), whatever the concurrency: a platform-wide overload; \
                 nothing else limits"
            ),
        };
        let repeats = match self.repeats() {
            1 => String::new(),
            n => format!(
                " Each row is run {n} times, one after the other across the rows, and the run \
                 with the median completion is shown."
            ),
        };
        format!("{what}; {clients} clients × {requests} requests, {ms} ms per reply.{repeats}")
    }

    pub(crate) fn script(self, config: &Config) -> Script {
        let latency = config.latency;
        let ok = Reply::anthropic_ok("Hello! How can I help?").delay(latency);
        // Drawn per request id and attempt: every row meets the same
        // refusals, whatever order its sends arrive in.
        let mix = |pct: u32, refused: Reply| {
            Route::mix_per(
                http::HeaderName::from_static(DRAW_HEADER),
                [(100 - pct, ok.clone()), (pct, refused.delay(latency))],
            )
        };
        let route = match self {
            Harm::RefusedNamed => mix(REFUSED_PCT, Reply::rate_limited(Some(1))),
            Harm::RefusedUnnamed => mix(REFUSED_PCT, Reply::rate_limited(None)),
            Harm::Overloaded => mix(OVERLOADED_PCT, Reply::overloaded()),
            Harm::OpenAiHead => Route::always(
                ok.header("x-ratelimit-limit-requests", "10000")
                    .header("x-ratelimit-remaining-requests", "9998")
                    .header("x-ratelimit-reset-requests", "6ms")
                    .header("x-ratelimit-limit-tokens", "2000000")
                    .header("x-ratelimit-remaining-tokens", "1999000")
                    .header("x-ratelimit-reset-tokens", "30ms"),
            ),
            Harm::AnthropicHead => {
                let in_a_minute = SystemTime::now()
                    .duration_since(SystemTime::UNIX_EPOCH)
                    .map_or(0, |d| d.as_secs())
                    + 60;
                Route::always(
                    ok.header("anthropic-ratelimit-requests-limit", "4000")
                        .header("anthropic-ratelimit-requests-remaining", "3999")
                        .header(
                            "anthropic-ratelimit-requests-reset",
                            &crate::markdown::rfc3339(in_a_minute),
                        ),
                )
            }
            Harm::PerModel => {
                // A first window already spent refuses everyone until it
                // ends, each told the wait to then; later windows admit
                // far more than the workload sends.
                let held = Limit::new(Quota::Window {
                    limit: 1_000_000,
                    length: HELD_FOR,
                })
                .first_window_spent();
                let ok = Route::always(ok);
                Route::by_model(
                    [(
                        HELD_MODEL,
                        Route::limited(held, Reply::rate_limited(None).delay(latency), ok.clone()),
                    )],
                    ok,
                )
            }
        };
        Script::new().seed(config.seed).route(PATH, route)
    }
}
