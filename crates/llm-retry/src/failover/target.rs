//! [`Target`]: one upstream a failover may send a request to.

use super::marks::{Mark, MarkKind, SharedMarks};
use crate::error::BoxError;
use bytes::Bytes;
use http::request::Parts;
use std::borrow::Cow;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::time::Instant;

/// Rewrites the original request for one target: its URI, credentials,
/// model. Called with a fresh copy of the original for every attempt.
pub(super) type Rewrite = Arc<dyn Fn(&mut Parts, &mut Bytes) -> Result<(), BoxError> + Send + Sync>;

/// One upstream of a [`Failover`](super::Failover): a service (typically
/// the library's retry stack over an HTTP client for one provider,
/// deployment or API key) and how a request is made for it.
pub struct Target<S> {
    pub(super) name: Arc<str>,
    pub(super) service: S,
    pub(super) rewrite: Option<Rewrite>,
    pub(super) max_sends: u32,
    pub(super) first_content_timeout: Option<Duration>,
    pub(super) cooldown: Option<Arc<Cooldown>>,
    pub(super) health: Option<Arc<Health>>,
    marks: Option<Arc<dyn SharedMarks>>,
}

impl<S: Clone> Clone for Target<S> {
    fn clone(&self) -> Self {
        Target {
            name: Arc::clone(&self.name),
            service: self.service.clone(),
            rewrite: self.rewrite.clone(),
            max_sends: self.max_sends,
            first_content_timeout: self.first_content_timeout,
            cooldown: self.cooldown.clone(),
            health: self.health.clone(),
            marks: self.marks.clone(),
        }
    }
}

impl<S> fmt::Debug for Target<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Target")
            .field("name", &self.name)
            .field("max_sends", &self.max_sends)
            .field("first_content_timeout", &self.first_content_timeout)
            .field("cooldown", &self.cooldown.is_some())
            .field("health", &self.health)
            .field("marks", &self.marks)
            .finish_non_exhaustive()
    }
}

impl<S> Target<S> {
    /// A target named `name` (in reports and metrics labels: keep the set
    /// of names small and fixed) served by `service`, which receives the
    /// original request unchanged unless [`rewrite`](Self::rewrite) says
    /// otherwise.
    pub fn new(name: impl Into<Arc<str>>, service: S) -> Target<S> {
        Target {
            name: name.into(),
            service,
            rewrite: None,
            max_sends: 1,
            first_content_timeout: None,
            cooldown: None,
            health: None,
            marks: None,
        }
    }

    /// The target's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Rewrites each attempt's copy of the original request for this
    /// target (its URI, its credentials, its model). An error ends the
    /// request with [`FailoverStop::Rewrite`](super::FailoverStop::Rewrite).
    pub fn rewrite<F>(mut self, rewrite: F) -> Target<S>
    where
        F: Fn(&mut Parts, &mut Bytes) -> Result<(), BoxError> + Send + Sync + 'static,
    {
        self.rewrite = Some(Arc::new(rewrite));
        self
    }

    /// The most upstream sends one attempt of this target can make: its
    /// retry stack's `max_retries + 1` (1, the default, for a plain
    /// client). An attempt starts only while the request's send budget has
    /// this many left, so the budget is never exceeded as long as this is
    /// at least what the target's stack may send.
    pub fn max_sends(mut self, sends: u32) -> Target<S> {
        self.max_sends = sends;
        self
    }

    /// Abandons an attempt whose answer (for a stream under the stream
    /// guard: its first content) has not arrived within `timeout`, and
    /// moves on to the next target. Such an attempt may have been executed,
    /// so it does not let a further round begin.
    pub fn first_content_timeout(mut self, timeout: Duration) -> Target<S> {
        self.first_content_timeout = Some(timeout);
        self
    }

    /// Skips this target, for every request through the failover that
    /// names the same model, until a wait its provider named has passed (at
    /// most a minute): after a rate limit (`429`) or overload (`529`) naming
    /// a wait (a `502`-`504` moves on without cooling the target), or an
    /// answer whose rate-limit headers say no request is left before the
    /// window resets. Providers limit each model apart, so requests for
    /// another model (the body's top-level `model`) still go to it. A wait
    /// named to a request that names no model, or whose model this
    /// target's [`rewrite`](Self::rewrite) changed (one deployment serving
    /// several models' requests), skips it for every model. Where a
    /// provider shares one limit among models (a model class, an alias
    /// and its dated name), each of them meets one refusal before it is
    /// skipped too. Off by default.
    pub fn cooldown(mut self) -> Target<S> {
        self.cooldown = Some(Arc::new(Cooldown::default()));
        self
    }

    /// Skips this target, for every request through the failover, for
    /// `within` once it has failed `failures` times within `within`: turned
    /// a request away, timed out before its first content, failed after a
    /// send, or handed over a 5xx answer. Then its count starts over. Off by
    /// default; a `failures` of 0 is taken as 1.
    pub fn unhealthy_after(mut self, failures: u32, within: Duration) -> Target<S> {
        self.health = Some(Arc::new(Health::new(failures, within)));
        self
    }

    /// Shares this target's [cooldown](Self::cooldown) and
    /// [unhealthy mark](Self::unhealthy_after), whichever it keeps, through
    /// `marks` under its name (a cooldown for a model under the name
    /// followed by `#model:` and a tag of the model, the same in every
    /// process): other processes that name a target the same with the same
    /// store skip it too. Give every process the same settings for it.
    pub fn shared_marks(mut self, marks: Arc<dyn SharedMarks>) -> Target<S> {
        self.marks = Some(marks);
        self
    }

    /// When the target's cooldown for `model` (its own or a shared one)
    /// ends, if it has not yet, and whether a rate limit named it.
    pub(super) fn cooldown_state(&self, model: ModelTag, now: Instant) -> Option<(Instant, bool)> {
        let own = self.cooldown.as_ref()?.state(model, now);
        let Some(marks) = &self.marks else {
            return own;
        };
        let read = |tag| {
            let mark = marks.read(&self.cooldown_name(tag), MarkKind::Cooldown)?;
            (mark.until > now).then_some((mark.until, mark.rate_limited))
        };
        let every = later(own, read(ModelTag::EVERY));
        if model == ModelTag::EVERY {
            return every;
        }
        later(every, read(model))
    }

    /// Extends the cooldown for `model`, if the target keeps one, and
    /// shares it when that moved its end (a burst of refusals naming the
    /// same end shares it once).
    pub(super) fn extend_cooldown(&self, model: ModelTag, until: Instant, rate_limited: bool) {
        let Some(cooldown) = &self.cooldown else {
            return;
        };
        if !cooldown.extend(model, until, rate_limited, Instant::now()) {
            return;
        }
        if let Some(marks) = &self.marks {
            let mark = Mark {
                until,
                rate_limited,
            };
            marks.publish(&self.cooldown_name(model), MarkKind::Cooldown, mark);
        }
    }

    /// The name a cooldown for `model` is shared under: the target's own
    /// for one that holds every model, else the target's with the model's
    /// tag (which every process computes alike).
    fn cooldown_name(&self, model: ModelTag) -> Cow<'_, str> {
        match model {
            ModelTag::EVERY => Cow::Borrowed(&self.name),
            ModelTag(tag) => Cow::Owned(format!("{}#model:{tag:016x}", self.name)),
        }
    }

    /// Until when the target is down for its failures (here or, shared,
    /// elsewhere), if it is.
    pub(super) fn down_until(&self, now: Instant) -> Option<Instant> {
        let own = self.health.as_ref()?.down_until(now);
        let shared = self.shared(MarkKind::Unhealthy, now).map(|m| m.until);
        own.max(shared)
    }

    /// Counts a failure, if the target keeps its health, and shares the
    /// mark it may set.
    pub(super) fn count_failure(&self, now: Instant) {
        let Some(health) = &self.health else {
            return;
        };
        if let (Some(until), Some(marks)) = (health.failed(now), &self.marks) {
            let mark = Mark {
                until,
                rate_limited: false,
            };
            marks.publish(&self.name, MarkKind::Unhealthy, mark);
        }
    }

    fn shared(&self, kind: MarkKind, now: Instant) -> Option<Mark> {
        let mark = self.marks.as_ref()?.read(&self.name, kind)?;
        (mark.until > now).then_some(mark)
    }
}

/// The later of two ends, with its cause.
fn later(a: Option<(Instant, bool)>, b: Option<(Instant, bool)>) -> Option<(Instant, bool)> {
    match (a, b) {
        (Some(a), Some(b)) => Some(if b.0 > a.0 { b } else { a }),
        (a, b) => a.or(b),
    }
}

/// A target's recent failures, shared by every request: past the limit
/// within the window, it is down for the window.
#[derive(Debug)]
pub(super) struct Health {
    failures: usize,
    within: Duration,
    state: Mutex<HealthState>,
}

#[derive(Debug, Default)]
struct HealthState {
    /// When the failures inside the window came, oldest first; never more
    /// than the limit.
    recent: std::collections::VecDeque<Instant>,
    down_until: Option<Instant>,
}

impl Health {
    fn new(failures: u32, within: Duration) -> Health {
        Health {
            failures: usize::try_from(failures.max(1)).unwrap_or(usize::MAX),
            within,
            state: Mutex::new(HealthState::default()),
        }
    }

    /// Counts a failure at `now`; the limit reached, the target is down
    /// for the window, until the instant returned.
    pub(super) fn failed(&self, now: Instant) -> Option<Instant> {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        while state
            .recent
            .front()
            .is_some_and(|at| now.saturating_duration_since(*at) >= self.within)
        {
            state.recent.pop_front();
        }
        state.recent.push_back(now);
        if state.recent.len() >= self.failures {
            state.recent.clear();
            state.down_until = now.checked_add(self.within);
            return state.down_until;
        }
        None
    }

    /// Until when the target is down, if it is.
    pub(super) fn down_until(&self, now: Instant) -> Option<Instant> {
        let state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.down_until.filter(|until| *until > now)
    }
}

/// Which model of a request a cooldown is kept for: a fingerprint of the
/// raw value of the body's top-level `model` member. Providers limit each
/// model apart, so a wait named for one model sets no other aside. The
/// same in every process and build (a shared mark names it).
/// [`ModelTag::EVERY`] (also the tag of a body that names no model) holds
/// the target for every request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) struct ModelTag(u64);

impl ModelTag {
    /// A wait that holds the target for every model: one named to a request
    /// that names none, or to one whose model the target's rewrite changed.
    pub(super) const EVERY: ModelTag = ModelTag(0);

    /// The tag of the model `body` names.
    pub(super) fn of(body: &[u8]) -> ModelTag {
        // A string names a model; `null`, a number, or no member at all
        // name none.
        let named = crate::recover::skimmed_model(body).filter(|raw| raw.starts_with(b"\""));
        let Some(model) = named else {
            return ModelTag::EVERY;
        };
        let mut hasher = siphasher::sip::SipHasher13::new();
        std::hash::Hasher::write(&mut hasher, model);
        ModelTag(std::hash::Hasher::finish(&hasher).max(1))
    }
}

/// Models a target keeps a cooldown for at once. Past that, the wait that
/// ends soonest gives way: request bodies cannot make it hold more.
const MAX_COOLING_MODELS: usize = 64;

/// Until when a target is skipped by the requests for each model it was
/// named a wait for, shared by every request, and whether a rate limit
/// (rather than an overload) named that wait.
#[derive(Debug, Default)]
pub(super) struct Cooldown(Mutex<Vec<(ModelTag, Instant, bool)>>);

impl Cooldown {
    /// When the cooldown for `model` (its own, or one for every model)
    /// ends, if it has not yet, and whether a rate limit named it.
    pub(super) fn state(&self, model: ModelTag, now: Instant) -> Option<(Instant, bool)> {
        let cooling = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        cooling
            .iter()
            .filter(|(tag, until, _)| (*tag == model || *tag == ModelTag::EVERY) && *until > now)
            .map(|&(_, until, rate_limited)| (until, rate_limited))
            .max_by_key(|(until, _)| *until)
    }

    /// Extends the cooldown for `model` to at least `until`; `rate_limited`
    /// says what named the wait, and is kept when it sets the end. Whether
    /// it did.
    pub(super) fn extend(
        &self,
        model: ModelTag,
        until: Instant,
        rate_limited: bool,
        now: Instant,
    ) -> bool {
        let mut cooling = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(entry) = cooling.iter_mut().find(|(tag, ..)| *tag == model) {
            if entry.1 >= until {
                return false;
            }
            *entry = (model, until, rate_limited);
            return true;
        }
        cooling.retain(|(_, end, _)| *end > now);
        if cooling.len() >= MAX_COOLING_MODELS {
            // The wait that ends soonest gives way, this one included.
            let soonest = (0..cooling.len()).min_by_key(|&i| cooling[i].1);
            match soonest {
                Some(i) if cooling[i].1 < until => {
                    cooling.swap_remove(i);
                }
                _ => return false,
            }
        }
        cooling.push((model, until, rate_limited));
        true
    }
}

/// A rewrite that sets the JSON body's `model` field to `model`: for a
/// target that serves the same request under another model name (an Azure
/// deployment, a gateway alias).
///
/// It rewrites the body's top-level `model` in place: every other member
/// keeps its bytes, so provider prompt caches stay warm. A body that names
/// no model (or is no JSON object at all: a `GET`, an upload) has none to
/// rewrite and is sent as it is. A body that opens as a JSON object but
/// does not parse as one fails the rewrite: sent on, it would reach the
/// target under the other target's model name. The failure's error says so
/// in its message; its type is not public (the failover reports it as
/// [`FailoverStop::Rewrite`](super::FailoverStop::Rewrite)).
pub fn set_model(
    model: impl Into<String>,
) -> impl Fn(&mut Parts, &mut Bytes) -> Result<(), BoxError> + Send + Sync + 'static {
    use crate::recover::RewriteError;
    let edit = crate::recover::BodyEdit::Model(model.into());
    move |_parts, body| match crate::recover::rewrite_body(body, &edit) {
        Ok((rewritten, _)) => {
            *body = rewritten;
            Ok(())
        }
        Err(RewriteError::NotJsonObject) if opens_an_object(body) => {
            Err(RewriteError::NotJsonObject.into())
        }
        Err(_) => Ok(()),
    }
}

/// Whether `body` starts (after whitespace) as a JSON object would.
fn opens_an_object(body: &[u8]) -> bool {
    body.iter()
        .find(|b| !b.is_ascii_whitespace())
        .is_some_and(|b| *b == b'{')
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_model_s_tag_is_its_own_wherever_it_is_named() {
        let opus = ModelTag::of(br#"{"model":"claude-opus-4-5","max_tokens":8}"#);
        assert_ne!(opus, ModelTag::default());
        assert_eq!(
            opus,
            ModelTag::of(br#"{"max_tokens":64, "model": "claude-opus-4-5"}"#)
        );
        assert_ne!(opus, ModelTag::of(br#"{"model":"claude-haiku-4-5"}"#));
        assert_eq!(ModelTag::of(b"not json"), ModelTag::EVERY);
        assert_eq!(ModelTag::of(br#"{"messages":[]}"#), ModelTag::EVERY);
        assert_eq!(ModelTag::of(br#"{"model":null}"#), ModelTag::EVERY);
        assert_eq!(ModelTag::of(br#"{"model":42}"#), ModelTag::EVERY);
    }

    #[test]
    fn a_cooldown_for_every_model_holds_each_until_the_later_end() {
        let cooldown = Cooldown::default();
        let now = Instant::now();
        let at = |secs| now + Duration::from_secs(secs);
        assert!(cooldown.extend(ModelTag(7), at(5), true, now));
        assert!(cooldown.extend(ModelTag::EVERY, at(3), false, now));
        assert_eq!(cooldown.state(ModelTag(7), now), Some((at(5), true)));
        assert_eq!(cooldown.state(ModelTag(8), now), Some((at(3), false)));
        assert_eq!(cooldown.state(ModelTag::EVERY, now), Some((at(3), false)));
        assert_eq!(cooldown.state(ModelTag(8), at(3)), None);
    }

    #[test]
    fn a_cooldown_holds_each_model_apart_and_no_more_models_than_its_bound() {
        let cooldown = Cooldown::default();
        let now = Instant::now();
        let at = |secs| now + Duration::from_secs(secs);
        let bound = u64::try_from(MAX_COOLING_MODELS).unwrap_or(u64::MAX);
        for tag in 1..=bound {
            assert!(cooldown.extend(ModelTag(tag), at(10 + tag), true, now));
        }
        assert!(
            !cooldown.extend(ModelTag(1), at(5), false, now),
            "not sooner"
        );
        assert_eq!(cooldown.state(ModelTag(1), now), Some((at(11), true)));
        assert_eq!(cooldown.state(ModelTag::default(), now), None);
        // One more model: the wait that ends soonest gives way, and a new
        // one that would end sooner than any is not kept.
        assert!(!cooldown.extend(ModelTag(bound + 1), at(1), false, now));
        assert_eq!(cooldown.state(ModelTag(bound + 1), now), None);
        assert_eq!(cooldown.state(ModelTag(1), now), Some((at(11), true)));
        assert!(cooldown.extend(ModelTag(bound + 1), at(100), false, now));
        assert_eq!(cooldown.state(ModelTag(1), now), None);
        assert_eq!(cooldown.state(ModelTag(2), now), Some((at(12), true)));
        let last = cooldown.state(ModelTag(bound + 1), now);
        assert_eq!(last, Some((at(100), false)));
        assert_eq!(cooldown.0.lock().unwrap().len(), MAX_COOLING_MODELS);
        // Ended waits make room before any running one does.
        let later = at(13);
        assert!(cooldown.extend(ModelTag(bound + 2), at(20), true, later));
        assert_eq!(cooldown.state(ModelTag(4), later), Some((at(14), true)));
        assert_eq!(cooldown.0.lock().unwrap().len(), MAX_COOLING_MODELS - 1);
    }
}
