//! Two `RetryLayer` stacks (two processes of one service, say) whose retry
//! budgets share one name on one Redis, in front of the soak's upstream,
//! each taking every other request.

use super::{held_clock, Progress, Shared};
use crate::redis_support::RedisServer;
use crate::{policy_builder, Counted};
use bytes::Bytes;
use llm_retry::budget::RetryBudget;
use llm_retry::stream_guard::StreamGuardLayer;
use llm_retry::{BoxError, RetryLayer};
use llm_retry_redis::{RedisBudgetStore, SharedOptions, StateName};
use std::sync::Arc;
use std::time::Duration;
use tower::{Service, ServiceBuilder, ServiceExt};

/// Stacks sharing the budget.
const REPLICAS: usize = 2;

pub(crate) struct SharedLayers {
    stores: Vec<RedisBudgetStore>,
    budgets: Vec<RetryBudget>,
    progress: Progress,
}

impl SharedLayers {
    /// The default budget, shared under `soak`. As for the gateways, each
    /// call is bounded by ten paused seconds (see `gateways::config`), and
    /// a reservation outlives the next sync's failure.
    pub(crate) fn start(redis: &RedisServer) -> SharedLayers {
        let timeout = Duration::from_secs(10);
        let interval = Duration::from_millis(250);
        let options = SharedOptions::default()
            .with_timeout(timeout)
            .with_sync_interval(interval)
            .with_reservation_ttl(timeout * 2 + interval)
            .with_replicas(REPLICAS as u32);
        let mut layers = SharedLayers {
            stores: Vec::new(),
            budgets: Vec::new(),
            progress: Progress::default(),
        };
        for _ in 0..REPLICAS {
            let budget = RetryBudget::default();
            let store = RedisBudgetStore::start(
                redis.client(),
                StateName::new("soak").unwrap(),
                budget.rule(),
                options,
            )
            .unwrap();
            layers
                .budgets
                .push(budget.with_store(Arc::new(store.clone())));
            layers.stores.push(store);
        }
        layers
    }

    /// Request `id` goes through stack `id % 2`: `RetryLayer` over
    /// `StreamGuardLayer`, as in the unshared composition, with its share
    /// of the budget.
    pub(crate) fn service(
        &self,
    ) -> impl Service<
        http::Request<Counted>,
        Response = http::Response<
            impl http_body::Body<Data = Bytes, Error = impl Into<BoxError>> + Send + 'static,
        >,
        Error = BoxError,
        Future = impl Send,
    > + Clone
           + Send
           + 'static {
        let stacks: Vec<_> = self
            .budgets
            .iter()
            .map(|budget| {
                let policy = policy_builder().budget(budget.clone()).build().unwrap();
                ServiceBuilder::new()
                    .layer(RetryLayer::new(policy))
                    .layer(StreamGuardLayer::new())
                    .service(crate::support::client::<Counted>())
            })
            .collect();
        let progress = self.progress.clone();
        tower::service_fn(move |request: http::Request<Counted>| {
            let id: usize = request.headers()["x-request-id"]
                .to_str()
                .unwrap()
                .parse()
                .unwrap();
            let stack = stacks[id % REPLICAS].clone();
            let progress = progress.clone();
            async move {
                let answer = stack.oneshot(request).await;
                progress.one_ended();
                answer
            }
        })
    }
}

impl Shared for SharedLayers {
    async fn sync_all(&self) -> bool {
        held_clock(async {
            let mut answered = true;
            for store in &self.stores {
                answered &= store.sync().await;
            }
            answered
        })
        .await
    }

    fn progress(&self) -> &Progress {
        &self.progress
    }
}
