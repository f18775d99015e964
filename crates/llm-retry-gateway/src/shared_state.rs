//! The stores a gateway shares with its other replicas through Redis, when
//! the config has a `[shared]` table: one for each route's failover marks,
//! one for each target's retry budget.

use crate::shared_config::{budget_name, marks_name, SharedConfig};
use llm_retry::budget::RetryBudget;
use llm_retry::failover::SharedMarks;
use llm_retry_redis::{RedisBudgetStore, RedisTargetMarks, SharedOptions, StateName};
use std::sync::Arc;

/// The Redis client and the options every store of one gateway uses.
#[derive(Debug, Clone)]
pub(crate) struct SharedState {
    client: redis::Client,
    options: SharedOptions,
    /// The namespace of every key.
    namespace: String,
}

/// One store a route started, kept to sync it on demand.
#[derive(Debug, Clone)]
pub(crate) enum SharedStore {
    Budget(RedisBudgetStore),
    Marks(RedisTargetMarks),
}

impl SharedStore {
    /// Syncs with Redis now, bounded by the timeout; whether Redis answered.
    pub(crate) async fn sync(&self) -> bool {
        match self {
            SharedStore::Budget(store) => store.sync().await,
            SharedStore::Marks(store) => store.sync().await,
        }
    }
}

impl SharedState {
    /// The client for `config`'s Redis (no connection is made yet). Errors
    /// never carry the URL.
    pub(crate) fn new(config: &SharedConfig) -> Result<SharedState, String> {
        let client = redis::Client::open(config.redis_url.expose())
            .map_err(|_| format!("shared.redis_url: {} is not usable", config.redis_url))?;
        let options = SharedOptions::default()
            .with_timeout(config.timeout)
            .with_sync_interval(config.sync_interval)
            .with_replicas(config.replicas)
            .with_failure_mode(config.failure_mode);
        Ok(SharedState {
            client,
            options,
            namespace: config.namespace.clone(),
        })
    }

    /// `name` in the configured namespace (checked with the config).
    fn in_namespace(&self, name: StateName) -> Result<StateName, String> {
        name.in_namespace(&self.namespace)
            .map_err(|error| format!("shared.namespace: {error}"))
    }

    /// `budget` with its counts shared under `<route>/<target>`.
    pub(crate) fn budget(
        &self,
        route: &str,
        target: &str,
        budget: RetryBudget,
    ) -> Result<(RetryBudget, SharedStore), String> {
        let name = self.in_namespace(budget_name(route, target)?)?;
        let store = RedisBudgetStore::start(self.client.clone(), name, budget.rule(), self.options)
            .map_err(|error| {
                format!(
                    "route[{route}].target[{target}]: shared budget ({:?})",
                    error.kind()
                )
            })?;
        Ok((
            budget.with_store(Arc::new(store.clone())),
            SharedStore::Budget(store),
        ))
    }

    /// The failover marks of `route`, shared under its name.
    pub(crate) fn marks(&self, route: &str) -> Result<(Arc<dyn SharedMarks>, SharedStore), String> {
        let name = self.in_namespace(marks_name(route)?)?;
        let store =
            RedisTargetMarks::start(self.client.clone(), name, self.options).map_err(|error| {
                format!("route[{route}]: shared failover marks ({:?})", error.kind())
            })?;
        Ok((Arc::new(store.clone()), SharedStore::Marks(store)))
    }
}
