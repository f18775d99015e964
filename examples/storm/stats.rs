//! From raw observations to one run's numbers: results per request id,
//! upstream sends from the server's own log, latency percentiles, and the
//! load around the outage window.

use crate::config::Config;
use crate::policies::Policy;
use crate::scenario::Scenario;
use crate::upstream::request_id;
use llm_retry_mock::RecordedRequest;
use std::collections::BTreeMap;
use std::time::Duration;
use tokio::time::Instant;

/// One logical request's end.
pub(crate) struct Done {
    pub(crate) id: u64,
    pub(crate) ok: bool,
    pub(crate) why: String,
    pub(crate) latency: Duration,
    /// When it ended, from the upstream's start.
    pub(crate) ended: Duration,
    /// The model its body named, where the scenario names one.
    pub(crate) model: Option<&'static str>,
    /// Whether it was sent before the run's cut-off (always, without one).
    pub(crate) began: bool,
    /// Whether it ended before the run's cut-off (always, without one).
    pub(crate) in_time: bool,
}

impl Done {
    /// Its latency; [`CUT_OFF`] when it did not end before the cut-off.
    fn latency_or_cut(&self) -> Duration {
        if self.in_time {
            self.latency
        } else {
            CUT_OFF
        }
    }
}

/// The latency of a request that did not end before its run's cut-off:
/// longer than any, and shown as such.
pub(crate) const CUT_OFF: Duration = Duration::MAX;

/// What one run observed, before counting.
pub(crate) struct Measured {
    /// When the upstream started.
    pub(crate) t0: Instant,
    /// Until the last logical request ended.
    pub(crate) duration: Duration,
    /// Request ids handed out (densely, from 0).
    pub(crate) handed_out: usize,
    pub(crate) done: Vec<Done>,
    /// The upstream's log of every send.
    pub(crate) records: Vec<RecordedRequest>,
    /// Request ids the upstream answered with a success more than once.
    pub(crate) duplicated_upstream: usize,
    /// Refused sends that went before the first 429 came back.
    pub(crate) unwarned_refusals: usize,
}

/// Everything one (policy, scenario) run measured.
pub(crate) struct Run {
    pub(crate) policy: Policy,
    pub(crate) logical: usize,
    /// Logical requests sent before the run's cut-off (all, without one).
    pub(crate) began: usize,
    /// Logical requests that did not end before the run's cut-off.
    pub(crate) cut: usize,
    pub(crate) succeeded: usize,
    pub(crate) results: usize,
    pub(crate) lost: usize,
    pub(crate) duplicated_results: usize,
    pub(crate) duplicated_upstream: usize,
    pub(crate) unknown_sends: usize,
    pub(crate) sends: usize,
    pub(crate) duration: Duration,
    pub(crate) p50: Duration,
    pub(crate) p99: Duration,
    pub(crate) outcomes: BTreeMap<String, usize>,
    /// Outage scenario only.
    pub(crate) outage: Option<OutageLoad>,
    /// Per model, where the scenario's bodies name one.
    pub(crate) by_model: Vec<ModelTally>,
    /// Refused sends that went before the first 429 came back to the
    /// client: no layer above the connection pool can have been warned.
    pub(crate) unwarned_refusals: usize,
}

/// One model's requests within a run.
pub(crate) struct ModelTally {
    pub(crate) model: &'static str,
    pub(crate) logical: usize,
    pub(crate) served: usize,
    /// Upstream sends of its requests.
    pub(crate) sends: usize,
    /// When its last request ended, from the upstream's start.
    pub(crate) completion: Duration,
    /// When its first served request ended, from the upstream's start.
    pub(crate) first_served: Option<Duration>,
    pub(crate) p50: Duration,
}

impl ModelTally {
    pub(crate) fn amplification(&self) -> f64 {
        self.sends as f64 / self.logical.max(1) as f64
    }
}

/// Load around the outage window.
pub(crate) struct OutageLoad {
    /// New logical requests per second before the window.
    pub(crate) offered_before: f64,
    /// Upstream sends per second within the window.
    pub(crate) sends_during: f64,
    /// New logical requests (first sends) within the window.
    pub(crate) first_sends_during: usize,
    /// Every send within the window.
    pub(crate) all_sends_during: usize,
}

impl OutageLoad {
    /// Sends per second during the window ÷ new requests per second before it.
    pub(crate) fn ratio(&self) -> f64 {
        self.sends_during / self.offered_before
    }

    pub(crate) fn retries_per_new_request(&self) -> Option<f64> {
        (self.first_sends_during > 0).then(|| {
            (self.all_sends_during - self.first_sends_during) as f64
                / self.first_sends_during as f64
        })
    }
}

impl Run {
    pub(crate) fn goodput(&self, capacity: u32) -> f64 {
        self.succeeded as f64 / self.duration.as_secs_f64().max(1e-9) / f64::from(capacity)
    }

    pub(crate) fn amplification(&self) -> f64 {
        self.sends as f64 / self.logical.max(1) as f64
    }

    /// Sends per request sent before the run's cut-off.
    pub(crate) fn sends_per_began(&self) -> f64 {
        self.sends as f64 / self.began.max(1) as f64
    }

    pub(crate) fn success_rate(&self) -> f64 {
        self.succeeded as f64 / self.logical.max(1) as f64
    }

    /// Every logical request ended exactly once, every send was ours, and
    /// no request id was served twice.
    pub(crate) fn clean(&self) -> bool {
        self.lost + self.duplicated_results + self.duplicated_upstream + self.unknown_sends == 0
            && self.results == self.logical
    }
}

/// Counts one run.
pub(crate) fn tally(config: &Config, policy: Policy, scenario: Scenario, m: Measured) -> Run {
    // Ids are handed out densely from 0, one per started logical request;
    // the rate-limit workload must have started all of its requests.
    let logical = match scenario.total(config) {
        Some(total) => m.handed_out.max(total),
        None => m.handed_out,
    };
    let mut results_per_id = vec![0u32; logical];
    for done in &m.done {
        if let Some(slot) = results_per_id.get_mut(done.id as usize) {
            *slot += 1;
        }
    }
    let lost = results_per_id.iter().filter(|n| **n == 0).count();
    let duplicated_results = results_per_id.iter().filter(|n| **n > 1).count();

    let mut latencies: Vec<Duration> = m.done.iter().map(Done::latency_or_cut).collect();
    latencies.sort();
    let mut outcomes = BTreeMap::new();
    for done in &m.done {
        *outcomes.entry(done.why.clone()).or_insert(0) += 1;
    }

    // Upstream sends, from the server's own log.
    let mut seen = vec![false; logical];
    let mut unknown_sends = 0;
    let window = config.outage_window();
    let (mut all_during, mut first_during, mut first_before) = (0usize, 0usize, 0usize);
    for record in &m.records {
        let Some(id) = request_id(&record.headers).filter(|id| (*id as usize) < logical) else {
            unknown_sends += 1;
            continue;
        };
        let first = !std::mem::replace(&mut seen[id as usize], true);
        let at = record.received_at.saturating_duration_since(m.t0);
        if window.contains(&at) {
            all_during += 1;
            first_during += usize::from(first);
        } else if at < window.start && first {
            first_before += 1;
        }
    }
    let outage = (scenario == Scenario::Outage).then(|| OutageLoad {
        offered_before: first_before as f64 / window.start.as_secs_f64(),
        sends_during: all_during as f64 / (window.end - window.start).as_secs_f64(),
        first_sends_during: first_during,
        all_sends_during: all_during,
    });
    let by_model = tally_models(&m.done, &m.records);
    Run {
        policy,
        logical,
        began: logical - m.done.iter().filter(|d| !d.began).count().min(logical),
        cut: m.done.iter().filter(|d| !d.in_time).count(),
        succeeded: m.done.iter().filter(|d| d.ok).count(),
        results: m.done.len(),
        lost,
        duplicated_results,
        duplicated_upstream: m.duplicated_upstream,
        unknown_sends,
        sends: m.records.len(),
        duration: m.duration,
        p50: percentile(&latencies, 50.0),
        p99: percentile(&latencies, 99.0),
        outcomes,
        outage,
        by_model,
        unwarned_refusals: m.unwarned_refusals,
    }
}

/// Per model named in the bodies: its requests, their ends and their sends.
fn tally_models(done: &[Done], records: &[RecordedRequest]) -> Vec<ModelTally> {
    let model_of: BTreeMap<u64, &'static str> = done
        .iter()
        .filter_map(|d| d.model.map(|model| (d.id, model)))
        .collect();
    let mut models: Vec<&'static str> = model_of.values().copied().collect();
    models.sort_unstable();
    models.dedup();
    models
        .into_iter()
        .map(|model| {
            let mine: Vec<&Done> = done.iter().filter(|d| d.model == Some(model)).collect();
            let mut latencies: Vec<Duration> = mine.iter().map(|d| d.latency_or_cut()).collect();
            latencies.sort();
            let sends = records
                .iter()
                .filter(|r| request_id(&r.headers).and_then(|id| model_of.get(&id)) == Some(&model))
                .count();
            ModelTally {
                model,
                logical: mine.len(),
                served: mine.iter().filter(|d| d.ok).count(),
                sends,
                completion: mine.iter().map(|d| d.ended).max().unwrap_or_default(),
                first_served: mine.iter().filter(|d| d.ok).map(|d| d.ended).min(),
                p50: percentile(&latencies, 50.0),
            }
        })
        .collect()
}

/// The `p`th percentile of `sorted`, nearest rank.
/// Of a row's runs (at least one), the one whose completion is the
/// median (the later of the two middle ones for an even count).
pub(crate) fn median_run(mut runs: Vec<Run>) -> Run {
    runs.sort_by_key(|run| run.duration);
    let middle = runs.len() / 2;
    runs.swap_remove(middle)
}

pub(crate) fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}
