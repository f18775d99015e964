//! One (policy, scenario) run: a fresh upstream, N closed-loop clients,
//! a progress line, and the tally.

use crate::config::Config;
use crate::models::{Model, Outcome};
use crate::policies::Policy;
use crate::scenario::Scenario;
use crate::stacks;
use crate::stats::{tally, Done, Measured, Run};
use crate::upstream::{counted_client, Answers, UpstreamClient, PATH};
use llm_retry::BoxError;
use llm_retry_mock::MockServer;
use rand::rngs::SmallRng;
use rand::SeedableRng;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinSet;
use tokio::time::Instant;

/// What a client sends through: one run's shared stack, or a model over
/// the run's connection pool.
#[derive(Clone)]
enum Runner {
    Stack(stacks::Shared),
    Model(Model, Box<UpstreamClient>),
}

impl Runner {
    /// Sends request `id`, its client's draw-th (see [`DRAW_HEADER`](crate::upstream::DRAW_HEADER)).
    async fn send(
        &self,
        url: &str,
        id: (u64, u64),
        model: Option<&str>,
        rng: &mut SmallRng,
    ) -> Outcome {
        match self {
            Runner::Stack(stack) => stacks::send(stack, url, id, model).await,
            Runner::Model(policy, client) => policy.run(client, url, id, model, rng).await,
        }
    }
}

fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// `send`'s outcome, unless `at` comes first: then the request is
/// dropped (or, when `at` had passed before it began, never sent) and
/// there is none.
async fn cut_off(at: Instant, send: impl std::future::Future<Output = Outcome>) -> Option<Outcome> {
    if Instant::now() >= at {
        return None;
    }
    tokio::time::timeout_at(at, send).await.ok()
}

/// Runs `policy` through `scenario` against a fresh upstream.
pub(crate) async fn run(
    config: &Config,
    policy: Policy,
    scenario: Scenario,
) -> Result<Run, BoxError> {
    let mock = MockServer::start(scenario.script(config)).await?;
    let url = mock.url(PATH);
    let t0 = mock.started_at();
    let answers = Arc::new(Answers::default());
    // Built once per run: every client sends through a clone of it.
    let runner = match policy {
        Policy::Middleware(stack) => Runner::Stack(stack.build(config, &answers)?),
        Policy::Model(model) => Runner::Model(model, Box::new(counted_client(&answers))),
    };
    let next_id = Arc::new(AtomicU64::new(0));
    let finished = Arc::new(AtomicUsize::new(0));
    let deadline = scenario.deadline(config, t0);
    let cutoff = scenario.cutoff();

    let mut tasks = JoinSet::new();
    for c in 0..config.clients {
        let (runner, url) = (runner.clone(), url.clone());
        let (next_id, finished) = (Arc::clone(&next_id), Arc::clone(&finished));
        let per_client = config.requests;
        let seed = splitmix64(config.seed ^ splitmix64(c as u64 + 1));
        let model = scenario.model(c);
        tasks.spawn(async move {
            let mut rng = SmallRng::seed_from_u64(seed);
            let mut done = Vec::new();
            for n in 0.. {
                let more = match deadline {
                    None => n < per_client,
                    Some(deadline) => Instant::now() < deadline,
                };
                if !more {
                    break;
                }
                let id = next_id.fetch_add(1, Ordering::Relaxed);
                let started = Instant::now();
                let began = cutoff.is_none_or(|after| started < t0 + after);
                let draw = ((c as u64) << 32) | n as u64;
                let send = runner.send(&url, (id, draw), model, &mut rng);
                let outcome = match cutoff {
                    None => Some(send.await),
                    Some(after) => cut_off(t0 + after, send).await,
                };
                let in_time = outcome.is_some();
                let outcome = outcome.unwrap_or_else(|| {
                    let secs = cutoff.unwrap_or_default().as_secs();
                    Outcome {
                        ok: false,
                        why: if began {
                            format!("cut off at {secs} s")
                        } else {
                            format!("not started by the cut-off at {secs} s")
                        },
                    }
                });
                done.push(Done {
                    id,
                    ok: outcome.ok,
                    why: outcome.why,
                    latency: started.elapsed(),
                    ended: t0.elapsed(),
                    model,
                    began,
                    in_time,
                });
                finished.fetch_add(1, Ordering::Relaxed);
            }
            done
        });
    }

    let label = format!("{:<34} {}", policy.label(), scenario.label());
    let progress = {
        let finished = Arc::clone(&finished);
        let label = label.clone();
        let total = scenario
            .total(config)
            .map_or_else(|| "?".to_owned(), |n| n.to_string());
        tokio::spawn(async move {
            let mut shown = crate::progress::Progress::new();
            loop {
                shown.update(&format!(
                    "  {label:<46} {:>6}/{total} requests ended, {:>6.1} s",
                    finished.load(Ordering::Relaxed),
                    t0.elapsed().as_secs_f64()
                ));
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        })
    };

    let mut all = Vec::new();
    while let Some(done) = tasks.join_next().await {
        all.extend(done?);
    }
    let duration = t0.elapsed();
    progress.abort();
    let _ = progress.await;
    crate::progress::Progress::new().finish(&format!(
        "  {label:<46} {:>6} requests ended in {:.1} s",
        all.len(),
        duration.as_secs_f64(),
    ));

    let records = mock.requests();
    mock.shutdown().await;
    let handed_out = usize::try_from(next_id.load(Ordering::Relaxed))?;
    let measured = Measured {
        t0,
        duration,
        handed_out,
        done: all,
        records,
        duplicated_upstream: answers.duplicated(),
        unwarned_refusals: answers.unwarned_refusals(),
    };
    Ok(tally(config, policy, scenario, measured))
}
