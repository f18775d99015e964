//! The soak's composition with shared state: three gateway replicas share
//! their retry budgets and failover marks through one real Redis, which is
//! killed, restarted and hung (`DEBUG SLEEP`) while the crowd runs.

use super::redis_support::RedisServer;
use super::{stand_in_report, Counted, Stop, MAX_RETRIES};
use llm_retry::BoxError;
use llm_retry_mock::MockServer;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tower::Service;

/// Gateways in front of the one upstream, each taking every third request.
const REPLICAS: usize = 3;

/// Whether `bytes` name Redis, in any case: no client may read of it.
pub(crate) fn mentions_redis(bytes: &[u8]) -> bool {
    bytes
        .windows(5)
        .any(|window| window.eq_ignore_ascii_case(b"redis"))
}

/// The replicas, serving on loopback, and how many requests they have
/// answered (or failed to) so far.
pub(crate) struct SharedGateways {
    gateways: Vec<llm_retry_gateway::Gateway>,
    addrs: Vec<SocketAddr>,
    stops: Vec<Stop>,
    /// Requests ended so far (answered, or failed before an answer).
    ended: Arc<watch::Sender<usize>>,
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
            ended: Arc::new(watch::Sender::new(0)),
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
        let ended = Arc::clone(&self.ended);
        tower::service_fn(move |mut request: http::Request<Counted>| {
            let client = client.clone();
            let ended = Arc::clone(&ended);
            let id: usize = request.headers()["x-request-id"]
                .to_str()
                .unwrap()
                .parse()
                .unwrap();
            let addr = addrs[id % REPLICAS];
            *request.uri_mut() = format!("http://{addr}/v1/messages").parse().unwrap();
            async move {
                let answer = client.request(request).await;
                ended.send_modify(|n| *n += 1);
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

    /// Whether every store of every replica reached Redis now, checked
    /// with the paused clock held (below).
    async fn sync_all(&self) -> bool {
        held_clock(async {
            let mut answered = true;
            for gateway in &self.gateways {
                answered &= gateway.sync_shared().await;
            }
            answered
        })
        .await
    }

    /// Syncs until every store reached Redis, `tries` times at most, 10 ms
    /// (paused) apart; how many it took, or `None`.
    async fn shared_within(&self, tries: usize) -> Option<usize> {
        for attempt in 1..=tries {
            if self.sync_all().await {
                return Some(attempt);
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        None
    }

    /// Requests ended so far.
    fn now(&self) -> usize {
        *self.ended.borrow()
    }

    /// Waits until `n` requests have ended (the crowd cancels fewer than a
    /// tenth before their answer, so `n` up to 0.8 of the crowd is
    /// reached). Woken by each request's end, not by the clock: requests
    /// answered without a wait end before the paused clock moves at all.
    async fn ended(&self, n: usize) -> usize {
        let mut ended = self.ended.subscribe();
        let reached = ended.wait_for(|ended| *ended >= n);
        let ended = match tokio::time::timeout(Duration::from_secs(600), reached).await {
            Ok(Ok(ended)) => *ended,
            _ => panic!("{n} requests never ended"),
        };
        ended
    }
}

/// Runs `check` while holding tokio's paused clock still, for up to half
/// a second of real time: the runtime never waits idle (it yields), so the
/// clock does not jump ahead while Redis answers, and the crowd gets no
/// further than its ready work meanwhile. Past that, the clock runs again
/// (a check waiting on a timer, a reconnection's backoff say, then ends).
async fn held_clock<F: std::future::Future>(check: F) -> F::Output {
    let started = std::time::Instant::now();
    let hold = async {
        while started.elapsed() < Duration::from_millis(500) {
            tokio::task::yield_now().await;
        }
        std::future::pending::<()>().await;
    };
    tokio::select! {
        done = check => done,
        () = hold => unreachable!("the hold never ends"),
    }
}

/// What the faults did, printed with the totals.
#[derive(Debug, Default)]
pub(crate) struct FaultLog {
    /// Syncs of every store it took to share again after each restart.
    pub(crate) syncs_to_resume: Vec<usize>,
    /// Requests that ended while Redis was dead, while it slept, and while
    /// it was dead again during the crowd's tail.
    pub(crate) ended_while_dead: usize,
    pub(crate) ended_while_hung: usize,
    pub(crate) ended_while_dead_in_the_tail: usize,
}

/// While the crowd of `total` runs, Redis is killed, hung and killed again.
///
/// Requests answered without a wait end in a first burst, before the
/// paused clock moves; the others (backoffs, named waits, slow bodies)
/// end in a tail as it runs. So the faults come in steps of an eighth of
/// the crowd's requests ended (up to four fifths of the crowd, which its
/// cancellations leave reachable), and of paused seconds for the tail:
/// killed for a step, then restarted; hung (`DEBUG SLEEP`) for a step and
/// a second, then killed in its sleep and restarted; killed for a second.
/// Each fault is checked real (a dead Redis fails a sync; a hung one is
/// still asleep at its end) and sharing is checked to resume after each.
pub(crate) async fn faults(
    redis: &mut RedisServer,
    replicas: &SharedGateways,
    total: usize,
) -> FaultLog {
    let step = (total / 8).max(1);
    let cap = total * 4 / 5;
    let a_step_after = |from: usize| (from + step).min(cap);
    let mut log = FaultLog::default();
    replicas.ended(step.min(cap)).await;
    // On the paused clock a call can, rarely, outlast its timeout while
    // Redis answers: a few tries.
    assert!(
        replicas.shared_within(5).await.is_some(),
        "the replicas never shared"
    );

    redis.kill();
    assert!(!replicas.sync_all().await, "a killed Redis answered");
    let killed_at = replicas.now();
    log.ended_while_dead = replicas.ended(a_step_after(killed_at)).await - killed_at;
    redis.restart();
    log.syncs_to_resume.push(
        replicas
            .shared_within(50)
            .await
            .expect("sharing resumed after a restart"),
    );

    replicas.ended(a_step_after(replicas.now())).await;
    let _sleeper = redis.send_without_waiting("DEBUG SLEEP 60");
    redis.wait_until_stalled(Duration::from_millis(200));
    let hung_at = replicas.now();
    replicas.ended(a_step_after(hung_at)).await;
    // The tail's retries and the sync tasks' own calls meet it too.
    tokio::time::sleep(Duration::from_secs(1)).await;
    log.ended_while_hung = replicas.now() - hung_at;
    assert!(
        redis.stalled(),
        "Redis woke before the requests it was to hang ended"
    );
    redis.restart();
    log.syncs_to_resume.push(
        replicas
            .shared_within(50)
            .await
            .expect("sharing resumed after a hang"),
    );

    redis.kill();
    let killed_at = replicas.now();
    tokio::time::sleep(Duration::from_secs(1)).await;
    log.ended_while_dead_in_the_tail = replicas.now() - killed_at;
    assert!(!replicas.sync_all().await, "a killed Redis answered");
    redis.restart();
    log.syncs_to_resume.push(
        replicas
            .shared_within(50)
            .await
            .expect("sharing resumed after the last restart"),
    );
    // Requests ended in each fault. A small crowd (`SOAK_REQUESTS` under
    // 800) may end in a few bursts that pass a step at once.
    if total >= 200 {
        assert!(
            log.ended_while_dead > 0 && log.ended_while_hung > 0,
            "no request ended during a fault: {log:?}"
        );
    }
    log
}
