//! "What the numbers say": the mechanisms behind this run's numbers, with
//! its numbers. Rate limiting here, the outage in [`crate::findings_outage`].

use crate::config::Config;
use crate::models::Model;
use crate::policies::Policy;
use crate::stacks::Stack;
use crate::stats::Run;
use crate::tables::{ms, pct};
use crate::targets::{BUDGET_FLOOR_PER_SEC, BUDGET_RATIO, TARGET_AMPLIFICATION, TARGET_GOODPUT};
use std::fmt::Write as _;

/// The run of `policy` among `runs`.
pub(crate) fn find(runs: &[Run], policy: Policy) -> Option<&Run> {
    runs.iter().find(|r| r.policy == policy)
}

/// Requests that ended because the retry budget refused a resend.
pub(crate) fn budget_stops(run: &Run) -> usize {
    run.outcomes
        .iter()
        .filter(|(why, _)| why.contains("budget exhausted"))
        .map(|(_, n)| n)
        .sum()
}

/// The default budget's window.
const BUDGET_WINDOW_SECS: f64 = 10.0;

pub(crate) fn findings(config: &Config, rate: &[Run], outage: &[Run]) -> String {
    let mut t = String::new();
    let _ = writeln!(t, "\n## What the numbers say\n");
    herd(&mut t, config, rate);
    gate_and_budget(&mut t, config, rate);
    pacing(&mut t, config, rate);
    crate::findings_outage::outage(&mut t, config, outage);
    integrity(&mut t, rate, outage);
    t
}

fn herd(t: &mut String, config: &Config, rate: &[Run]) {
    let (Some(pr), Some(nr), Some(sr), Some(zr)) = (
        find(rate, Policy::Middleware(Stack::Defaults)),
        find(rate, Policy::Model(Model::Naive)),
        find(rate, Policy::Model(Model::Sdk)),
        find(rate, Policy::Model(Model::NoRetry)),
    ) else {
        return;
    };
    let goodputs = rate.iter().map(|r| r.goodput(config.capacity));
    let (low, high) = goodputs.fold((f64::INFINITY, 0.0f64), |(lo, hi), g| {
        (lo.min(g), hi.max(g))
    });
    let _ = writeln!(
        t,
        "- **Goodput does not separate the policies; success rate and sends per request \
         do.** {} clients offer far more than C, so the upstream admits about C per second \
         whatever the clients do ({} to {} here). A policy that gives up sooner only makes \
         its run shorter: no retries \"reaches\" {} with {} of its requests served.",
        config.clients,
        pct(low),
        pct(high),
        pct(zr.goodput(config.capacity)),
        pct(zr.success_rate()),
    );
    let _ = writeln!(
        t,
        "- **Honouring an exact wait, per request, is a thundering herd.** Every 429 names \
         the time to the next token, at most {:.0} ms. Each waiting request sleeps exactly \
         that (its ≤ 10 % spread is a fraction of a millisecond, below the timers' \
         resolution), so all of them come back together for one token, again and again: \
         the llm-retry defaults send {:.2} times per request, spend all 10 retries on {} of \
         the requests and serve {}; the SDKs' policy, with the same reading of the hint but \
         2 retries, sends {:.2} times and serves {}.",
        1000.0 / f64::from(config.capacity),
        pr.amplification(),
        pct(1.0 - pr.success_rate()),
        pct(pr.success_rate()),
        sr.amplification(),
        pct(sr.success_rate()),
    );
    let _ = writeln!(
        t,
        "- **Ignoring the hint does better here, slowly.** The naive backoff sleeps \
         U(0, 1) s × 2ⁿ whatever the server said; that spreads the clients over seconds, \
         the offered load falls to about what the bucket admits, and {} of the requests \
         succeed with {:.2} sends each, at a p99 latency of {}.",
        pct(nr.success_rate()),
        nr.amplification(),
        ms(nr.p99),
    );
}

fn gate_and_budget(t: &mut String, config: &Config, rate: &[Run]) {
    let (Some(pr), Some(gb)) = (
        find(rate, Policy::Middleware(Stack::Defaults)),
        find(rate, Policy::Middleware(Stack::GateBudget)),
    ) else {
        return;
    };
    let retries = gb.sends.saturating_sub(gb.logical);
    let verdict = if gb.amplification() <= TARGET_AMPLIFICATION {
        "within the 1.2 target".to_owned()
    } else if gb.duration.as_secs_f64() <= BUDGET_WINDOW_SECS {
        let bound = 1.0
            + BUDGET_RATIO
            + BUDGET_FLOOR_PER_SEC * BUDGET_WINDOW_SECS / gb.logical.max(1) as f64;
        format!(
            "above the 1.2 target: on a run shorter than the budget's 10 s window, the \
             floor's 10/s × 10 s = 100 retries come on top of the 20 %, up to 1 + 0.2 + \
             100 ÷ {} = {bound:.2} sends per request",
            gb.logical
        )
    } else {
        "above the 1.2 target".to_owned()
    };
    let _ = writeln!(
        t,
        "- **A budget caps the herd; a gate that only learns holds does not break it.** \
         In **{}** the gate has no quota. A 429's named wait (≤ {:.0} ms) holds the key, \
         which moves every queued send to the same instant, and with no rate to pace them \
         the gate releases them together: the bucket admits a token's worth, the rest get \
         429 again. The \
         budget lets retries add 20 % of the window's first sends plus 10/s; here that was \
         {retries} retries for {} requests, after which a 429 ends its request at once \
         ({} of {} ended with \"budget exhausted\"). Sends per request fall from {:.2} \
         (defaults) to {:.2}, {verdict}; {} of the requests are served, in a run of {:.1} s.",
        gb.policy.label(),
        1000.0 / f64::from(config.capacity),
        gb.logical,
        budget_stops(gb),
        gb.logical,
        pr.amplification(),
        gb.amplification(),
        pct(gb.success_rate()),
        gb.duration.as_secs_f64(),
    );
}

fn pacing(t: &mut String, config: &Config, rate: &[Run]) {
    let (Some(ad), Some(kq)) = (
        find(rate, Policy::Middleware(Stack::AdaptiveGateBudget)),
        find(rate, Policy::Middleware(Stack::KnownQuota)),
    ) else {
        return;
    };
    let c = f64::from(config.capacity);
    let slow = if ad.goodput(config.capacity) < TARGET_GOODPUT {
        format!(
            ", under the 95 % target: a decrease (× 0.7) from about C takes 0.3 ÷ 0.02 = 15 s \
             to climb back at 1 % of 2 × C a second, longer than the {:.0} s of work, and the \
             gate averaged {:.0} sends/s against C = {c:.0}, finishing at {:.1} s",
            config.ideal_duration().as_secs_f64(),
            ad.sends as f64 / ad.duration.as_secs_f64().max(1e-9),
            ad.duration.as_secs_f64()
        )
    } else {
        String::new()
    };
    let _ = writeln!(
        t,
        "- **Pacing is what serves the requests.** A gate with a rate sends its queue at that \
         rate instead of all at once. Told the quota, the gate sends at C from the start: \
         {:.2} sends per request, {} served, goodput {}. The adaptive gate starts at 2 × C = \
         {:.0} sends/s, multiplies its rate by 0.7 at each congestion event (the first 429 of \
         a burst), regains 90 % of that rate within seconds and then probes upward slowly: \
         {:.2} sends per request, \
         {} served, goodput {}{slow}.",
        kq.amplification(),
        pct(kq.success_rate()),
        pct(kq.goodput(config.capacity)),
        2.0 * c,
        ad.amplification(),
        pct(ad.success_rate()),
        pct(ad.goodput(config.capacity)),
    );
    let dips = if ad.p99 > kq.p99 + kq.p99 / 10 {
        format!(
            " The adaptive gate's p99 is {}: after each decrease its rate sits below C \
             until it has climbed back, and the queue grows meanwhile.",
            ms(ad.p99)
        )
    } else {
        String::new()
    };
    let _ = writeln!(
        t,
        "- **The price of pacing is latency, in arrival order.** {} clients sharing C = \
         {:.0}/s wait their turn in the gate, about clients ÷ C = {:.1} s per request: p50 \
         {} and p99 {} with the known quota. The wait the 429s imposed before now happens in \
         the client's queue, before the upstream sees the request.{dips}",
        config.clients,
        c,
        config.clients as f64 / c,
        ms(kq.p50),
        ms(kq.p99),
    );
}

fn integrity(t: &mut String, rate: &[Run], outage: &[Run]) {
    let (lost, duplicated): (usize, usize) = rate
        .iter()
        .chain(outage)
        .map(|r| {
            (
                r.lost + r.unknown_sends,
                r.duplicated_results + r.duplicated_upstream,
            )
        })
        .fold((0, 0), |(a, b), (c, d)| (a + c, b + d));
    if lost + duplicated == 0 {
        let _ = writeln!(
            t,
            "- **Nothing was lost or duplicated**: every logical request of every run ended \
             in exactly one result, and the upstream answered no request id with a success \
             twice."
        );
    } else {
        let _ = writeln!(
            t,
            "- **⚠ {lost} requests lost and {duplicated} duplicated** across the runs: see the \
             tables."
        );
    }
}
