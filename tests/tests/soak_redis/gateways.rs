//! Three gateway replicas with `[shared]` on one Redis, in front of the
//! soak's upstream, each taking every third request.

use super::{mentions_redis, Progress, Shared};
use crate::redis_support::RedisServer;
use crate::{stand_in_report, Counted, Stop, MAX_RETRIES};
use llm_retry::BoxError;
use llm_retry_mock::MockServer;
use std::net::SocketAddr;
use tower::Service;

/// Gateways in front of the one upstream.
const REPLICAS: usize = 3;

/// The replicas, serving on loopback, and how many requests they have
/// answered (or failed to) so far.
pub(crate) struct SharedGateways {
    gateways: Vec<llm_retry_gateway::Gateway>,
    addrs: Vec<SocketAddr>,
    stops: Vec<Stop>,
    progress: Progress,
}

/// A route over two targets on the same upstream, each cooling down on a
/// named wait (a mark the replicas share), with sends capped as for the
/// other compositions; budgets and marks shared through `redis_url`.
fn config(upstream: &MockServer, redis_url: &str) -> String {
    let base = upstream.url("");
    let target = |name: &str| {
        format!(
            "[[route.target]]\nname = \"{name}\"\nbase_url = \"{base}\"\n\
             max_retries = {MAX_RETRIES}\nattempt_timeout = \"2s\"\ncooldown = true\n"
        )
    };
    // The soak runs on tokio's paused clock, which jumps to the next timer
    // whenever the runtime waits on sockets only: a Redis call's timeout
    // of a few milliseconds would pass while Redis is still answering.
    // Ten (paused) seconds keep a healthy Redis shared; a killed one fails
    // each call at once, a hung one holds only the sync tasks.
    format!(
        r#"
[shared]
redis_url = "{redis_url}"
timeout = "10s"
sync_interval = "250ms"
replicas = {REPLICAS}

[[route]]
name = "soak"
deadline = "30s"
max_upstream_sends = {sends}
{a}
{b}"#,
        sends = MAX_RETRIES + 1,
        a = target("a"),
        b = target("b"),
    )
}

impl SharedGateways {
    pub(crate) async fn start(upstream: &MockServer, redis: &RedisServer) -> SharedGateways {
        let config =
            llm_retry_gateway::Config::parse(&config(upstream, &redis.url()), |_| None).unwrap();
        let mut replicas = SharedGateways {
            gateways: Vec::new(),
            addrs: Vec::new(),
            stops: Vec::new(),
            progress: Progress::default(),
        };
        for _ in 0..REPLICAS {
            let gateway = llm_retry_gateway::Gateway::new(&config).unwrap();
            let listener = llm_retry_gateway::listen(([127, 0, 0, 1], 0).into()).unwrap();
            replicas.addrs.push(listener.local_addr().unwrap());
            let (stop, signal) = tokio::sync::oneshot::channel();
            let serving = tokio::spawn(gateway.clone().serve(listener, async {
                let _ = signal.await;
            }));
            replicas.gateways.push(gateway);
            replicas.stops.push(Stop { stop, serving });
        }
        replicas
    }

    /// A plain client to the replicas: request `id` goes to replica
    /// `id % 3`. Every answer's headers are checked for Redis.
    pub(crate) fn service(
        &self,
    ) -> impl Service<
        http::Request<Counted>,
        Response = http::Response<hyper::body::Incoming>,
        Error = BoxError,
        Future = impl Send,
    > + Clone
           + Send
           + 'static {
        let client =
            hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
                .build_http::<Counted>();
        let addrs = self.addrs.clone();
        let progress = self.progress.clone();
        tower::service_fn(move |mut request: http::Request<Counted>| {
            let client = client.clone();
            let progress = progress.clone();
            let id: usize = request.headers()["x-request-id"]
                .to_str()
                .unwrap()
                .parse()
                .unwrap();
            let addr = addrs[id % REPLICAS];
            *request.uri_mut() = format!("http://{addr}/v1/messages").parse().unwrap();
            async move {
                let answer = client.request(request).await;
                progress.one_ended();
                let response = answer?;
                for (name, value) in response.headers() {
                    assert!(
                        !mentions_redis(name.as_str().as_bytes())
                            && !mentions_redis(value.as_bytes()),
                        "request {id}'s answer names Redis: {name}: {value:?}"
                    );
                }
                Ok::<_, BoxError>(stand_in_report(response))
            }
        })
    }

    /// Stops every replica and waits for each to finish.
    pub(crate) async fn stop(self) {
        drop(self.gateways);
        for stop in self.stops {
            stop.now().await;
        }
    }
}

impl Shared for SharedGateways {
    async fn sync_all(&self) -> bool {
        super::held_clock(async {
            let mut answered = true;
            for gateway in &self.gateways {
                answered &= gateway.sync_shared().await;
            }
            answered
        })
        .await
    }

    fn progress(&self) -> &Progress {
        &self.progress
    }
}
