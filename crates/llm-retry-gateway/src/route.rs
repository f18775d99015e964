//! A route: which requests it takes, and its failover over its targets.

use crate::config::RouteConfig;
use crate::counts::RequestCounts;
use crate::shared_state::{SharedState, SharedStore};
use crate::upstream::{self, TargetService};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use llm_retry::failover::{Failover, FailoverBuilder, Shutdown, Target};
use llm_retry::ConfigError;
use std::sync::Arc;

/// Marks a request bound to provider state: it never changes targets.
#[derive(Debug, Clone, Copy)]
pub(crate) struct StateBound;

/// A route, built.
#[derive(Debug, Clone)]
pub(crate) struct Route {
    pub(crate) config: RouteConfig,
    pub(crate) failover: Failover<TargetService>,
    pub(crate) counts: Arc<RequestCounts>,
    /// The stores shared with other replicas (none without `[shared]`).
    pub(crate) shared: Vec<SharedStore>,
}

impl Route {
    /// Builds the route's targets and failover; with `shared`, each
    /// target's retry budget and the route's failover marks are shared
    /// with the other replicas.
    pub(crate) fn build(
        config: &RouteConfig,
        connector: &HttpsConnector<HttpConnector>,
        shutdown: &Shutdown,
        max_body: usize,
        shared: Option<&SharedState>,
    ) -> Result<Route, String> {
        let mut stores = Vec::new();
        let marks = match shared {
            Some(shared) => {
                let (marks, store) = shared.marks(&config.name)?;
                stores.push(store);
                Some(marks)
            }
            None => None,
        };
        let mut targets = Vec::with_capacity(config.targets.len());
        for target in &config.targets {
            let service = upstream::service(config, target, connector.clone(), shared)?;
            stores.extend(service.shared);
            let mut built = shape(Target::new(target.name.as_str(), service.service), target)
                .rewrite(upstream::rewrite(target));
            if let Some(marks) = &marks {
                built = built.shared_marks(Arc::clone(marks));
            }
            targets.push(built);
        }
        let failover = settings(config, targets)
            .shutdown(shutdown.clone())
            .max_body(max_body)
            .build()
            .map_err(|error| error.to_string())?;
        Ok(Route {
            config: config.clone(),
            failover,
            counts: Arc::new(RequestCounts::new(&config.name)),
            shared: stores,
        })
    }

    /// Whether this route takes a request for `path` naming `model`. A
    /// prefix matches whole segments: `/v1/messages` takes
    /// `/v1/messages/count_tokens`, not `/v1/messagesX`.
    pub(crate) fn matches(&self, path: &str, model: Option<&str>) -> bool {
        let path_ok = self
            .config
            .path_prefix
            .as_deref()
            .is_none_or(|prefix| prefix_takes(prefix, path));
        let model_ok = self.config.models.is_empty()
            || model.is_some_and(|model| self.config.models.iter().any(|m| m == model));
        path_ok && model_ok
    }
}

/// Whether a route with path prefix `prefix` takes `path`: the prefix
/// matches whole segments.
pub(crate) fn prefix_takes(prefix: &str, path: &str) -> bool {
    path.strip_prefix(prefix)
        .is_some_and(|rest| prefix.ends_with('/') || rest.is_empty() || rest.starts_with('/'))
}

/// Whether route `earlier` takes every request route `later` would: then
/// `later` is never reached, since the first matching route wins.
pub(crate) fn shadows(earlier: &RouteConfig, later: &RouteConfig) -> bool {
    // Every path `later` takes starts with its prefix at a segment end, so
    // `earlier` takes them all when it takes the prefix itself.
    let paths = match (&earlier.path_prefix, &later.path_prefix) {
        (None, _) => true,
        (Some(_), None) => false,
        (Some(earlier), Some(later)) => prefix_takes(earlier, later),
    };
    let models = earlier.models.is_empty()
        || (!later.models.is_empty() && later.models.iter().all(|m| earlier.models.contains(m)));
    paths && models
}

/// The failover's own validation of a route's budgets, without building
/// any client.
pub(crate) fn failover_for(config: &RouteConfig) -> Result<(), ConfigError> {
    let targets = config
        .targets
        .iter()
        .map(|target| shape(Target::new(target.name.as_str(), ()), target))
        .collect();
    settings(config, targets).build().map(|_| ())
}

/// A target's failover settings from its config.
fn shape<S>(mut target: Target<S>, config: &crate::config::TargetConfig) -> Target<S> {
    target = target.max_sends(config.max_retries + 1);
    if let Some(timeout) = config.first_content_timeout {
        target = target.first_content_timeout(timeout);
    }
    if config.cooldown {
        target = target.cooldown();
    }
    if let Some((failures, within)) = config.unhealthy_after {
        target = target.unhealthy_after(failures, within);
    }
    target
}

/// A route's failover settings from its config.
fn settings<S>(config: &RouteConfig, targets: Vec<Target<S>>) -> FailoverBuilder<S> {
    let mut builder = Failover::builder(targets)
        .deadline(config.deadline)
        .state_bound(|parts, _| parts.extensions.get::<StateBound>().is_some());
    if let Some(n) = config.max_target_attempts {
        builder = builder.max_target_attempts(n);
    }
    if let Some(n) = config.max_upstream_sends {
        builder = builder.max_upstream_sends(n);
    }
    if let Some(retry) = config.exhaustion_retry {
        builder = builder.exhaustion_retry(retry);
    }
    builder
}
