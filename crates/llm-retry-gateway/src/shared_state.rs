//! The stores a gateway shares with its other replicas through Redis, when
//! the config has a `[shared]` table: one for each route's failover marks,
//! and for each target one for its retry budget and one for its gate's
//! holds.

use crate::shared_config::{marks_name, target_name, SharedConfig};
use llm_retry::budget::RetryBudget;
use llm_retry::failover::SharedMarks;
use llm_retry::rate_limit::SharedGate;
use llm_retry_redis::{RedisBudgetStore, RedisGate, RedisTargetMarks, SharedOptions, StateName};
use std::sync::Arc;
use std::time::Duration;

/// The Redis client and the options every store of one gateway uses.
#[derive(Debug, Clone)]
pub(crate) struct SharedState {
    client: redis::Client,
    options: SharedOptions,
    /// The namespace of every key.
    namespace: String,
    /// What key fingerprints are keyed by: `key_secret_env`'s value, else
    /// the Redis URL as written (the one secret every replica of a fleet
    /// shares: its password, if any).
    key_secret: Vec<u8>,
}

/// One store a route started, kept to sync it on demand.
#[derive(Debug, Clone)]
pub(crate) enum SharedStore {
    Budget(RedisBudgetStore),
    Marks(RedisTargetMarks),
    Holds(RedisGate),
}

impl SharedStore {
    /// Syncs with Redis now, bounded by the timeout; whether Redis answered.
    pub(crate) async fn sync(&self) -> bool {
        match self {
            SharedStore::Budget(store) => store.sync().await,
            SharedStore::Marks(store) => store.sync().await,
            SharedStore::Holds(store) => store.sync().await,
        }
    }
}

/// How long a replica's reserved retries last: at least the default (1 s),
/// and long enough that the sync after the one that reserved them (which
/// starts within `sync_interval` of that one's answer, itself within
/// `timeout`) has failed, at `timeout` more, before they lapse. Shorter,
/// a Redis that hangs would have the replica refuse the retries it holds,
/// neither spending them nor yet deciding alone, until that sync failed.
fn reservation_ttl(options: &SharedOptions) -> Duration {
    let next_sync_failed = options
        .timeout
        .saturating_mul(2)
        .saturating_add(options.sync_interval);
    options.reservation_ttl.max(next_sync_failed)
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
        let options = options.with_reservation_ttl(reservation_ttl(&options));
        Ok(SharedState {
            client,
            options,
            namespace: config.namespace.clone(),
            key_secret: config.key_secret.expose().to_vec(),
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
        let name = self.in_namespace(target_name(route, target)?)?;
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

    /// The holds of the gate of `route`'s `target`, shared under
    /// `<route>/<target>`.
    pub(crate) fn holds(
        &self,
        route: &str,
        target: &str,
    ) -> Result<(Arc<dyn SharedGate>, SharedStore), String> {
        let name = self.in_namespace(target_name(route, target)?)?;
        let store = RedisGate::start(self.client.clone(), name, self.options, &self.key_secret)
            .map_err(|error| {
                format!(
                    "route[{route}].target[{target}]: shared holds ({:?})",
                    error.kind()
                )
            })?;
        Ok((Arc::new(store.clone()), SharedStore::Holds(store)))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reservation_outlives_the_next_syncs_failure() {
        let options = |timeout_ms, interval_ms| {
            SharedOptions::default()
                .with_timeout(Duration::from_millis(timeout_ms))
                .with_sync_interval(Duration::from_millis(interval_ms))
        };
        // The defaults (5 ms, 100 ms): the default second.
        assert_eq!(reservation_ttl(&options(5, 100)), Duration::from_secs(1));
        assert_eq!(
            reservation_ttl(&options(2_000, 100)),
            Duration::from_millis(4_100)
        );
    }
}
