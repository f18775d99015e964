//! [`RateLimitLayer`]: quotas and the gate they share.

use super::adaptive::AdaptiveRate;
use super::gate::Gate;
use super::gcra::Pace;
use super::RateLimit;
use tower::Layer;

/// Paces every send to a key at the rate its provider allows, first in,
/// first out, and holds the key when the provider names a wait.
///
/// Clones share one gate: build the layer once per client (or gateway
/// route) and clone it. See the [module docs](crate::rate_limit).
#[derive(Debug, Clone)]
pub struct RateLimitLayer {
    gate: Gate,
}

/// Quotas for [`RateLimitLayer`]. All optional: without any, the gate only
/// learns holds from 429 answers.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Quotas {
    /// Requests per minute, and how many may go at once (default: one
    /// second's worth, at least 1).
    pub requests_per_minute: Option<(u32, Option<u32>)>,
    /// Tokens per minute (cost from [`TokenCost`](super::TokenCost)), and
    /// how many may go at once (default: a whole minute's worth, as
    /// providers' token buckets allow).
    pub tokens_per_minute: Option<(u32, Option<u32>)>,
    /// Opt-in: learn each key's send rate from its 429s between these bounds.
    pub adaptive: Option<AdaptiveRate>,
}

impl Quotas {
    /// No quota: only learned holds.
    pub const fn none() -> Quotas {
        Quotas {
            requests_per_minute: None,
            tokens_per_minute: None,
            adaptive: None,
        }
    }

    /// Adds a requests-per-minute quota with the default burst.
    pub const fn requests_per_minute(mut self, per_minute: u32) -> Quotas {
        self.requests_per_minute = Some((per_minute, None));
        self
    }

    /// Adds a requests-per-minute quota with an explicit burst.
    pub const fn requests_per_minute_with_burst(mut self, per_minute: u32, burst: u32) -> Quotas {
        self.requests_per_minute = Some((per_minute, Some(burst)));
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

    /// Adds a tokens-per-minute quota with the default burst.
    pub const fn tokens_per_minute(mut self, per_minute: u32) -> Quotas {
        self.tokens_per_minute = Some((per_minute, None));
        self
    }
}

impl RateLimitLayer {
    /// A gate enforcing `quotas` per key. Invalid adaptive bounds (zero,
    /// inverted, a NaN, or an infinite floor) are rejected.
    pub fn try_new(quotas: Quotas) -> Result<RateLimitLayer, crate::policy::ConfigError> {
        let adaptive = match quotas.adaptive {
            Some(bounds) => Some(bounds.checked().ok_or_else(|| {
                crate::policy::ConfigError::invalid(format!(
                    "adaptive rate bounds {} to {} sends/s must be positive and ordered, with a finite floor",
                    bounds.min_per_sec, bounds.max_per_sec
                ))
            })?),
            None => None,
        };
        let mut layer = RateLimitLayer::new(Quotas {
            adaptive: None,
            ..quotas
        });
        layer.gate = layer.gate.with_adaptive(adaptive);
        Ok(layer)
    }

    /// A gate with no quota that learns each key's rate from its 429s
    /// ([`Quotas::learned`]): unpaced until a key's first 429. The default
    /// gate of [`ClientLayer`](crate::ClientLayer).
    pub fn learned() -> RateLimitLayer {
        let quotas = Quotas::none().learned();
        RateLimitLayer {
            gate: Gate::new(None, None, quotas.adaptive),
        }
    }

    /// A gate enforcing `quotas` per key (adaptive bounds are ignored:
    /// use [`try_new`](Self::try_new) for them).
    pub fn new(quotas: Quotas) -> RateLimitLayer {
        let requests = quotas
            .requests_per_minute
            .and_then(|(rate, burst)| Pace::per_minute(rate, burst.unwrap_or((rate / 60).max(1))));
        let tokens = quotas
            .tokens_per_minute
            .and_then(|(rate, burst)| Pace::per_minute(rate, burst.unwrap_or(rate)));
        RateLimitLayer {
            gate: Gate::new(requests, tokens, None),
        }
    }
}

impl<S> Layer<S> for RateLimitLayer {
    type Service = RateLimit<S>;

    fn layer(&self, inner: S) -> RateLimit<S> {
        RateLimit::new(inner, self.gate.clone())
    }
}
