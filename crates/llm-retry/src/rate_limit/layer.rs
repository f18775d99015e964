//! [`RateLimitLayer`]: quotas and the gate they share.

use super::adaptive::AdaptiveRate;
use super::gate::Gate;
use super::gcra::Pace;
use super::quota_book::Paces;
use super::RateLimit;
use crate::ConfigError;
use tower::Layer;

/// Paces every send to a key at the rate its provider allows, first in,
/// first out, and holds the key when the provider names a wait.
///
/// Clones share one gate: build the layer once per client (or gateway
/// route) and clone it. See the [module docs](crate::rate_limit).
#[derive(Debug, Clone)]
pub struct RateLimitLayer {
    pub(super) gate: Gate,
}

/// Quotas for [`RateLimitLayer`], built with named methods. All optional:
/// without any, the gate only holds a key for the waits its 429s name.
///
/// ```
/// use llm_retry::rate_limit::{Quotas, RateLimitLayer};
///
/// let gate = RateLimitLayer::new(
///     Quotas::none()
///         .requests_per_minute(3_000)
///         .tokens_per_minute(400_000),
/// )?;
/// assert!(RateLimitLayer::new(Quotas::none().requests_per_minute(0)).is_err());
/// # let _ = gate;
/// # Ok::<(), llm_retry::ConfigError>(())
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Quotas {
    requests: Option<Quota>,
    tokens: Option<Quota>,
    adaptive: Option<AdaptiveRate>,
}

/// One per-minute quota and how many may go at once.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Quota {
    per_minute: u32,
    burst: Option<u32>,
}

/// A quota of `per_minute`, `burst` of which may go at once (`None`: the
/// quota's default).
const fn quota(per_minute: u32, burst: Option<u32>) -> Option<Quota> {
    Some(Quota { per_minute, burst })
}

impl Quotas {
    /// No quota: only learned holds.
    pub const fn none() -> Quotas {
        Quotas {
            requests: None,
            tokens: None,
            adaptive: None,
        }
    }

    /// Adds a requests-per-minute quota; one second's worth (at least 1)
    /// may go at once.
    pub const fn requests_per_minute(mut self, per_minute: u32) -> Quotas {
        self.requests = quota(per_minute, None);
        self
    }

    /// Adds a requests-per-minute quota of which `burst` may go at once.
    pub const fn requests_per_minute_with_burst(mut self, per_minute: u32, burst: u32) -> Quotas {
        self.requests = quota(per_minute, Some(burst));
        self
    }

    /// Adds a tokens-per-minute quota (cost from [`TokenCost`](super::TokenCost));
    /// a whole minute's worth may go at once, as providers' token buckets allow.
    pub const fn tokens_per_minute(mut self, per_minute: u32) -> Quotas {
        self.tokens = quota(per_minute, None);
        self
    }

    /// Adds a tokens-per-minute quota of which `burst` tokens may go at once.
    pub const fn tokens_per_minute_with_burst(mut self, per_minute: u32, burst: u32) -> Quotas {
        self.tokens = quota(per_minute, Some(burst));
        self
    }

    /// Learns each key's send rate from its 429s (additive increase,
    /// multiplicative decrease), starting at `max_per_sec` and never
    /// below `min_per_sec`.
    pub const fn adaptive(mut self, min_per_sec: f64, max_per_sec: f64) -> Quotas {
        self.adaptive = Some(AdaptiveRate {
            min_per_sec,
            max_per_sec,
        });
        self
    }

    /// Learns each key's send rate from its 429s with no bounds to
    /// configure: a key is unpaced until its first 429, which sets its rate
    /// (one send per wait the 429 named to the millisecond, else the
    /// successes per second since its first send), grows it until the next
    /// 429 in case it was low, and from there adapts as
    /// [`adaptive`](Self::adaptive) does, never below one send per second.
    /// This is what [`ClientLayer`](crate::ClientLayer) uses by default.
    ///
    /// Every 429 counts as news about the rate: an upstream that answers
    /// 429 whatever the rate drives it down to its floor.
    pub const fn learned(self) -> Quotas {
        self.adaptive(1.0, f64::INFINITY)
    }
}

/// A refused gate setting.
fn refused(setting: &'static str, problem: String) -> ConfigError {
    ConfigError::new("rate-limit gate", setting, problem)
}

/// The pace of a quota, or why it is refused.
fn pace(
    quota: Option<Quota>,
    setting: &'static str,
    default_burst: fn(u32) -> u32,
) -> Result<Option<Pace>, ConfigError> {
    let Some(Quota { per_minute, burst }) = quota else {
        return Ok(None);
    };
    if per_minute == 0 {
        return Err(refused(setting, "must be positive, got 0".into()));
    }
    if burst == Some(0) {
        return Err(refused(setting, "the burst must be positive, got 0".into()));
    }
    let burst = burst.unwrap_or_else(|| default_burst(per_minute));
    Ok(Pace::per_minute(per_minute, burst))
}

impl RateLimitLayer {
    /// A gate enforcing `quotas` per key. A zero rate or burst, and
    /// adaptive bounds that are not positive and ordered with a finite
    /// floor, are refused.
    pub fn new(quotas: Quotas) -> Result<RateLimitLayer, ConfigError> {
        let requests = pace(quotas.requests, "requests_per_minute", |rate| {
            (rate / 60).max(1)
        })?;
        let tokens = pace(quotas.tokens, "tokens_per_minute", |rate| rate)?;
        if let Some(bounds) = quotas.adaptive.filter(|bounds| bounds.checked().is_none()) {
            return Err(refused(
                "adaptive",
                format!(
                    "bounds {} to {} sends/s must be positive and ordered, with a finite floor",
                    bounds.min_per_sec, bounds.max_per_sec
                ),
            ));
        }
        Ok(RateLimitLayer {
            gate: Gate::new(requests, tokens, quotas.adaptive, None),
        })
    }

    /// A gate with no quota that learns each key's rate from its 429s
    /// ([`Quotas::learned`]): unpaced until a key's first 429. The default
    /// gate of [`ClientLayer`](crate::ClientLayer).
    pub fn learned() -> RateLimitLayer {
        let quotas = Quotas::none().learned();
        RateLimitLayer {
            gate: Gate::new(None, None, quotas.adaptive, None),
        }
    }

    /// This gate, sharing what it knows of a key with other replicas
    /// through `shared`, which every send asks once before it goes
    /// ([`SharedGate::turn`](super::SharedGate::turn): for `RedisGate`, one
    /// round trip a send):
    /// - the holds it sets (a 429's named wait on a key and model) are
    ///   published, and a send to a key another replica holds waits until
    ///   that hold ends, unless the hold is longer than the send honours
    ///   (its `max_server_wait`): then it goes, and learns the wait itself;
    /// - a send to a key with a request or token quota the gate was told,
    ///   or its provider stated (slightly under it, bursting to the room
    ///   it stated), also takes its turn in the fleet's pace of that quota
    ///   (a send's token turn at its estimated cost), so the replicas
    ///   together keep to it; a turn past the send's deadline refuses it
    ///   (`GateError::PastDeadline`), as a local one does.
    ///
    /// Learned rates, stated windows and in-flight ceilings stay with each
    /// replica. The gate's keys become fingerprints under
    /// [`SharedGate::key_secret`](super::SharedGate::key_secret). Call it
    /// before cloning the layer: the clones made before keep the gate they
    /// had.
    #[must_use]
    pub fn share_with(self, shared: std::sync::Arc<dyn super::SharedGate>) -> RateLimitLayer {
        let Paces { requests, tokens } = self.gate.paces;
        RateLimitLayer {
            gate: Gate::new(requests, tokens, self.gate.adaptive, Some(shared)),
        }
    }

    /// The gate over `inner` of a retry loop right above it that keeps
    /// the notes of the sends it lets go while the gate is quiet (a
    /// [`ClientLayer`](crate::ClientLayer)'s): such a send passes through
    /// it untouched. With the gate, for that loop.
    pub(crate) fn layer_under_retry<S>(&self, inner: S) -> (RateLimit<S>, Gate) {
        (
            RateLimit::new(inner, self.gate.clone(), true),
            self.gate.clone(),
        )
    }
}

impl<S> Layer<S> for RateLimitLayer {
    type Service = RateLimit<S>;

    fn layer(&self, inner: S) -> RateLimit<S> {
        RateLimit::new(inner, self.gate.clone(), false)
    }
}
