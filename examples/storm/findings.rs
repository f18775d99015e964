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
    budget_stops_where(run, |_| true)
}

/// Requests that ended because the retry budget refused a resend, among
/// the endings whose description passes `keep`.
pub(crate) fn budget_stops_where(run: &Run, keep: impl Fn(&str) -> bool) -> usize {
    run.outcomes
        .iter()
        .filter(|(why, _)| why.contains("budget exhausted") && keep(why))
        .map(|(_, n)| n)
        .sum()
}

/// The default budget's window.
pub(crate) const BUDGET_WINDOW_SECS: f64 = 10.0;

/// What the default budget grants before anything has left its window:
/// its floor over the whole window, plus its ratio of `first_sends`.
fn budget_at_start(first_sends: usize) -> f64 {
    BUDGET_FLOOR_PER_SEC * BUDGET_WINDOW_SECS + BUDGET_RATIO * first_sends as f64
}

pub(crate) fn findings(config: &Config, rate: &[Run], outage: &[Run]) -> String {
    let mut t = String::new();
    let _ = writeln!(t, "\n## What the numbers say\n");
    herd(&mut t, config, rate);
    budget(&mut t, rate);
    learned_gate(&mut t, config, rate);
    first_burst(&mut t, config, rate);
    pacing(&mut t, config, rate);
    crate::findings_outage::outage(&mut t, config, outage);
    integrity(&mut t, rate, outage);
    t
}

fn herd(t: &mut String, config: &Config, rate: &[Run]) {
    let (Some(nr), Some(sr), Some(zr)) = (
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
    let same = find(rate, Policy::Middleware(Stack::RetryOnly))
        .map(|ro| format!(" **{}** reads it the same way.", ro.policy.label()))
        .unwrap_or_default();
    let _ = writeln!(
        t,
        "- **Honouring an exact wait, per request, is a thundering herd.** Every 429 names \
         the time to the next token, at most {:.0} ms. A client that honours it for the one \
         request it answered sleeps exactly that (the middleware adds ≤ 10 %, a fraction of \
         a millisecond, below the timers' resolution), and so does every other \
         request throttled at the same moment: they all come back together for one token, \
         and the rest get 429 again, round after round. The SDKs' policy reads the hint \
         this way and retries twice, with no budget: {:.2} sends per request, {} \
         served.{same}",
        1000.0 / f64::from(config.capacity),
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

/// `RetryLayer` alone: the herd, and what the budget does to it.
fn budget(t: &mut String, rate: &[Run]) {
    let Some(ro) = find(rate, Policy::Middleware(Stack::RetryOnly)) else {
        return;
    };
    let retries = ro.sends.saturating_sub(ro.logical);
    let verdict = if ro.amplification() <= TARGET_AMPLIFICATION {
        "within the 1.2 target".to_owned()
    } else if ro.duration.as_secs_f64() <= BUDGET_WINDOW_SECS {
        let bound = 1.0
            + BUDGET_RATIO
            + BUDGET_FLOOR_PER_SEC * BUDGET_WINDOW_SECS / ro.logical.max(1) as f64;
        format!(
            "above the 1.2 target: on a run shorter than the budget's 10 s window, the \
             floor's 10/s × 10 s = 100 retries come on top of the 20 %, up to 1 + 0.2 + \
             100 ÷ {} = {bound:.2} sends per request",
            ro.logical
        )
    } else {
        "above the 1.2 target".to_owned()
    };
    let _ = writeln!(
        t,
        "- **A budget caps the herd; it does not serve it.** **{}** has the default policy's \
         10 retries and its shared budget, and nothing between its retries and the \
         upstream. The budget lets retries add 20 % of the first sends of the last 10 s \
         plus 10 a second, which at the start is a reserve of 10/s × 10 s = 100 retries; \
         the herd spends them on rounds that each win about a token's worth. Once the \
         budget refuses, a 429 ends its request at once and its closed-loop client starts \
         the next, whose first send lets the budget grant only 0.2 more retries: {retries} \
         retries for {} requests in all; {} of the requests ended with \"budget \
         exhausted\" and {} were served, in a run of {:.1} s. Sends per request: {:.2}, {verdict}.",
        ro.policy.label(),
        ro.logical,
        budget_stops(ro),
        pct(ro.success_rate()),
        ro.duration.as_secs_f64(),
        ro.amplification(),
    );
}

/// The defaults' learned gate: how it finds the rate, and how close to C.
fn learned_gate(t: &mut String, config: &Config, rate: &[Run]) {
    let Some(ad) = find(rate, Policy::Middleware(Stack::Defaults)) else {
        return;
    };
    let c = f64::from(config.capacity);
    let retries = ad.sends.saturating_sub(ad.logical);
    let goodput = ad.goodput(config.capacity);
    let verdict = if goodput < TARGET_GOODPUT {
        "under the 95 % target"
    } else {
        "within the 95 % target"
    };
    let amplification = if ad.amplification() <= TARGET_AMPLIFICATION {
        "within the 1.2 target"
    } else {
        "above the 1.2 target"
    };
    let known = find(rate, Policy::Middleware(Stack::KnownQuota))
        .map(|kq| {
            format!(
                " (the gate told the quota: {}, {:.1} s)",
                pct(kq.goodput(config.capacity)),
                kq.duration.as_secs_f64()
            )
        })
        .unwrap_or_default();
    let margin = if goodput < TARGET_GOODPUT {
        " Goodput falls short of C while the learned rate is under C: after a cut the \
         quick regain stops at 95 % of the rate that drew the 429, and climbing the last \
         5 % at 1 % a second takes about 5 s; meanwhile the bucket has tokens to spare."
    } else {
        ""
    };
    let _ = writeln!(
        t,
        "- **A gate that learns the rate turns the herd into a queue.** **{}** has the same \
         retries and budget over `RateLimitLayer::learned()`. A 429's named wait holds the \
         whole key, not only the request it answered, and the key's sends wait in the gate \
         in arrival order. The key is unpaced until its first 429, which sets its rate: one \
         send per wait the 429 named to the millisecond — a token bucket names the time to \
         its next token, at most {:.0} ms here, so that is C = {c:.0}/s or more; the rest of \
         that burst's 429s refine it — else the successes per second so far. In case the \
         estimate is low, the rate then grows 25 % a second until the next 429; from there \
         each congestion event (the first 429 of a burst) multiplies it by 0.8, a quick \
         regain takes it back to 95 % of the rate that drew the 429, and a probe adds 1 % \
         of that a second. Waiting sends follow the rate as it changes. The result: {:.2} \
         sends per request ({retries} retries for {} requests), {amplification}; {} served; \
         goodput {}, {verdict}, in a run of {:.1} s{known}.{margin}",
        ad.policy.label(),
        1000.0 / c,
        ad.amplification(),
        ad.logical,
        pct(ad.success_rate()),
        pct(goodput),
        ad.duration.as_secs_f64(),
    );
}

/// The defaults' first burst: unpaced, and retried through the gate.
fn first_burst(t: &mut String, config: &Config, rate: &[Run]) {
    let Some(ad) = find(rate, Policy::Middleware(Stack::Defaults)) else {
        return;
    };
    let throttled = config.clients.saturating_sub(config.burst as usize);
    let stops = budget_stops(ad);
    let failures = ad.logical.saturating_sub(ad.succeeded);
    let ending = if failures == 0 {
        "none of the requests failed".to_owned()
    } else if stops == 0 {
        format!("{failures} requests failed, none for the budget")
    } else {
        format!("{stops} of the {failures} failures were the budget refusing a retry")
    };
    let _ = writeln!(
        t,
        "- **What learning costs is the first burst.** Before its first 429 nothing paces \
         the key, so the {} clients' first sends reach the upstream together, and a bucket \
         holding {} tokens answers about {throttled} of them with 429 — sends nothing could \
         have saved. Their retries wait in the gate, which sends no faster than the key was \
         found to admit, so under `ClientLayer` a 429's retry is not charged to the retry \
         budget (with **RetryLayer alone** the same burst spends the budget's reserve of about \
         {:.0} retries at once); {ending}.",
        config.clients,
        config.burst,
        budget_at_start(config.clients),
    );
}

/// The known quota: pacing with nothing to learn, and its latency.
fn pacing(t: &mut String, config: &Config, rate: &[Run]) {
    let Some(kq) = find(rate, Policy::Middleware(Stack::KnownQuota)) else {
        return;
    };
    let c = f64::from(config.capacity);
    let _ = writeln!(
        t,
        "- **Told the quota, the gate has nothing to learn: the upper bound.** **{}** paces \
         every send to C from the first one: {:.2} sends per request, {} served, goodput {} \
         in a run of {:.1} s.",
        kq.policy.label(),
        kq.amplification(),
        pct(kq.success_rate()),
        pct(kq.goodput(config.capacity)),
        kq.duration.as_secs_f64(),
    );
    let learned = match find(rate, Policy::Middleware(Stack::Defaults)) {
        Some(ad) => {
            let dips = if ad.p99 > kq.p99 + kq.p99 / 10 {
                ": after each decrease its rate sits below C until it has climbed back, \
                 and the queue grows meanwhile"
            } else {
                ""
            };
            format!(
                " With the learned gate they are {} and {}{dips}.",
                ms(ad.p50),
                ms(ad.p99)
            )
        }
        None => String::new(),
    };
    let _ = writeln!(
        t,
        "- **The price of pacing is latency, in arrival order.** {} clients sharing C = \
         {:.0}/s wait their turn in the gate, about clients ÷ C = {:.1} s per request: p50 \
         {} and p99 {} with the known quota. The wait the 429s imposed before now happens in \
         the client's queue, before the upstream sees the request.{learned}",
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
