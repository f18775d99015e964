//! The shared gate: per-key pacing of every send, first in, first out.

use super::adaptive::{AdaptiveRate, Learned};
use super::gcra::{Pace, Tat};
use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::time::Instant;

/// Keys kept before idle ones are dropped.
const MAX_KEYS: usize = 4096;
/// Longest hold one answer can put on a key: a bogus or huge `Retry-After`
/// must not freeze every request to the key for hours.
pub(super) const MAX_HOLD: Duration = crate::budget::DEFAULT_MAX_SERVER_WAIT;

/// Per-key pacing state shared by every clone of one [`RateLimitLayer`](super::RateLimitLayer).
#[derive(Clone)]
pub(super) struct Gate {
    requests: Option<Pace>,
    tokens: Option<Pace>,
    adaptive: Option<AdaptiveRate>,
    keys: Arc<Mutex<HashMap<u64, KeyState>>>,
}

#[derive(Debug, Clone, Copy)]
struct KeyState {
    requests: Tat,
    tokens: Tat,
    /// No send before this instant: the provider named a wait.
    held_until: Option<Instant>,
    /// The learned rate and its pacing, in adaptive mode.
    learned: Option<(Learned, Tat)>,
}

impl KeyState {
    const NEW: KeyState = KeyState {
        requests: Tat(None),
        tokens: Tat(None),
        held_until: None,
        learned: None,
    };

    fn idle(&self, now: Instant) -> bool {
        self.requests.idle(now) && self.tokens.idle(now) && self.held_until.is_none_or(|t| t <= now)
    }
}

/// Why the gate refused a send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum GateError {
    /// The send's token cost exceeds what the quota can ever admit at once.
    NeverFits {
        /// The send's token cost.
        cost: u64,
        /// The most tokens the quota admits at once.
        capacity: u64,
    },
    /// The send's slot lies past the request's deadline.
    PastDeadline {
        /// How long the send would have waited.
        wait: Duration,
    },
}

impl fmt::Display for GateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GateError::NeverFits { cost, capacity } => write!(
                f,
                "a send costing {cost} tokens can never fit a quota admitting {capacity} at once"
            ),
            GateError::PastDeadline { wait } => write!(
                f,
                "the rate limit would hold this send {:.1} s, past the request's deadline",
                wait.as_secs_f64()
            ),
        }
    }
}

impl std::error::Error for GateError {}

impl GateError {
    /// A short, fixed name for metrics and logs.
    pub fn label(&self) -> &'static str {
        match self {
            GateError::NeverFits { .. } => "never_fits",
            GateError::PastDeadline { .. } => "past_deadline",
        }
    }
}

impl Gate {
    pub(super) fn new(
        requests: Option<Pace>,
        tokens: Option<Pace>,
        adaptive: Option<AdaptiveRate>,
    ) -> Gate {
        Gate {
            requests,
            tokens,
            adaptive,
            keys: Arc::default(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<u64, KeyState>> {
        self.keys
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Books the next slot of `key` for a send costing `tokens`, unless it
    /// would start after `deadline`. Slots are handed out in call order.
    pub(super) fn reserve(
        &self,
        key: u64,
        tokens: u64,
        now: Instant,
        deadline: Option<Instant>,
    ) -> Result<Instant, GateError> {
        if let Some(pace) = &self.tokens {
            let capacity = pace.capacity();
            if tokens > capacity {
                return Err(GateError::NeverFits {
                    cost: tokens,
                    capacity,
                });
            }
        }
        let mut keys = self.lock();
        if keys.len() >= MAX_KEYS {
            keys.retain(|_, state| !state.idle(now));
        }
        let state = keys.entry(key).or_insert(KeyState::NEW);
        let mut slot = state.held_until.map_or(now, |held| held.max(now));
        if let Some(pace) = &self.requests {
            slot = slot.max(state.requests.slot(pace, now, 1));
        }
        if let Some(pace) = &self.tokens {
            slot = slot.max(state.tokens.slot(pace, now, tokens));
        }
        if let Some(bounds) = &self.adaptive {
            let (learned, _) = state
                .learned
                .get_or_insert_with(|| (bounds.start(), Tat(None)));
            let pace = Pace {
                per_unit: learned.interval(),
                capacity: 1,
            };
            if let Some((_, tat)) = &state.learned {
                slot = slot.max(tat.slot(&pace, now, 1));
            }
        }
        if deadline.is_some_and(|deadline| slot > deadline) {
            return Err(GateError::PastDeadline { wait: slot - now });
        }
        if let Some(pace) = &self.requests {
            state.requests.book(pace, slot, 1);
        }
        if let Some(pace) = &self.tokens {
            state.tokens.book(pace, slot, tokens);
        }
        if let Some((learned, tat)) = &mut state.learned {
            let pace = Pace {
                per_unit: learned.interval(),
                capacity: 1,
            };
            tat.book(&pace, slot, 1);
        }
        Ok(slot)
    }

    /// Keeps every later send of `key` at or after `until`: the provider
    /// named a wait, and it is a fact about the key, not one request.
    pub(super) fn hold(&self, key: u64, now: Instant, wait: Duration) {
        let Some(until) = now.checked_add(wait.min(MAX_HOLD)) else {
            return;
        };
        let mut keys = self.lock();
        let state = keys.entry(key).or_insert(KeyState::NEW);
        state.held_until = Some(state.held_until.map_or(until, |held| held.max(until)));
    }
}

impl Gate {
    /// Adaptive mode: a send slotted at `sent` was answered 429.
    pub(super) fn throttled(&self, key: u64, sent: Instant, now: Instant) {
        let Some(bounds) = &self.adaptive else { return };
        if let Some((learned, tat)) = self.lock().get_mut(&key).and_then(|s| s.learned.as_mut()) {
            learned.on_throttle(bounds, sent, now, tat.0.unwrap_or(now));
            tracing::debug!(
                rate_per_sec = learned.per_sec(),
                "llm-retry: adaptive rate lowered"
            );
        }
    }

    /// Adaptive mode: a send succeeded.
    pub(super) fn succeeded(&self, key: u64, now: Instant) {
        let Some(bounds) = &self.adaptive else { return };
        if let Some((learned, _)) = self.lock().get_mut(&key).and_then(|s| s.learned.as_mut()) {
            learned.on_success(bounds, now);
        }
    }

    pub(super) fn with_adaptive(mut self, adaptive: Option<AdaptiveRate>) -> Gate {
        self.adaptive = adaptive;
        self
    }
}

impl fmt::Debug for Gate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Gate")
            .field("requests", &self.requests)
            .field("tokens", &self.tokens)
            .field("adaptive", &self.adaptive)
            .finish_non_exhaustive()
    }
}
