//! "What the numbers say" about the outage: what the budget refuses, how
//! soon the requests come back, and what a gate's pacing bounds.

use crate::config::Config;
use crate::findings::{budget_stops_where, find, BUDGET_WINDOW_SECS};
use crate::policies::Policy;
use crate::stacks::Stack;
use crate::stats::{OutageLoad, Run};
use crate::tables::pct;
use crate::targets::allowed_outage_ratio;
use std::fmt::Write as _;

fn retries(load: &OutageLoad) -> String {
    load.retries_per_new_request()
        .map_or_else(|| "—".to_owned(), |r| format!("{r:.2}"))
}

/// Requests that ended on a 503 the budget would not retry.
fn outage_stops(run: &Run) -> usize {
    budget_stops_where(run, |why| why.starts_with("503"))
}

/// "within" or "over" the budget's load target, with the target.
fn against_target(load: &OutageLoad) -> String {
    let allowed = allowed_outage_ratio(load.offered_before);
    if load.ratio() <= allowed {
        format!("within the budget's {allowed:.2}")
    } else {
        format!("over the budget's {allowed:.2}")
    }
}

pub(crate) fn outage(t: &mut String, config: &Config, outage: &[Run]) {
    let c = f64::from(config.capacity);
    let ideal = config.ideal_duration().as_secs_f64();
    if let Some(ad) = find(outage, Policy::Middleware(Stack::Defaults)) {
        if let Some(al) = &ad.outage {
            budget_bounds(t, ad, al);
            prompt_return(t, config, ad, ideal, outage);
        }
    }
    pacing_bounds(t, c, outage);
    first_sends(t, c, outage);
}

/// The defaults in the outage: the budget bounds the retries.
fn budget_bounds(t: &mut String, ad: &Run, al: &OutageLoad) {
    let _ = writeln!(
        t,
        "- **In the outage the budget bounds the retries.** A 503 names no wait, so \
         **{}** retries it after the computed backoff (500 ms · 2ⁿ⁻¹ + 0–25 %), and only \
         while the budget grants it: {} retries per new request inside the window, and {} \
         requests ended on a 503 the budget would not retry. The upstream saw {:.0} sends/s \
         during the window, {:.2} × the offered rate before it, {}; {} of the requests were \
         served. (Retries per new request inside the window may exceed 0.2: the budget \
         counts the first sends of the last {BUDGET_WINDOW_SECS:.0} s, most of them from \
         before the outage, plus its floor of 10/s; the load target below is the one a \
         budget is held to.)",
        ad.policy.label(),
        retries(al),
        outage_stops(ad),
        al.sends_during,
        al.ratio(),
        against_target(al),
        pct(ad.success_rate()),
    );
}

/// After the outage: the exponent counts computed waits only.
fn prompt_return(t: &mut String, config: &Config, ad: &Run, ideal: f64, outage: &[Run]) {
    let last = ad.duration.as_secs_f64();
    let after = last - ideal;
    let queue = config.clients as f64 / f64::from(config.capacity);
    let prompt = after <= queue + 0.5;
    let (title, carry, why) = if prompt {
        (
            "After the outage the requests come back promptly.",
            ", and no request carries a long backoff out of the window",
            format!(
                ", about the {queue:.1} s its gate's queue of {} clients takes to drain at C",
                config.clients
            ),
        )
    } else {
        (
            "After the outage no backoff carries over from the 429s.",
            "",
            String::new(),
        )
    };
    let others: Vec<String> = [Stack::RetryOnly, Stack::KnownQuota]
        .into_iter()
        .filter_map(|stack| find(outage, Policy::Middleware(stack)))
        .map(|r| {
            format!(
                "**{}**'s at {:.1} s",
                r.policy.label(),
                r.duration.as_secs_f64()
            )
        })
        .collect();
    let others = if others.is_empty() {
        String::new()
    } else {
        format!(" ({})", others.join(", "))
    };
    let _ = writeln!(
        t,
        "- **{title}** The backoff's exponent n counts only the request's computed waits: a \
         server-named wait, such as a 429's, does not raise it, so a request's first \
         backoff on a 503 is 500 ms however many 429s it met before{carry}. The last answer \
         of **{}** came at {last:.1} s, {after:.1} s after the {ideal:.0} s workload \
         ended{why}{others}.",
        ad.policy.label(),
    );
}

/// The gated rows in the outage: pacing bounds first sends and retries.
fn pacing_bounds(t: &mut String, c: f64, outage: &[Run]) {
    let (Some(ad), Some(kq)) = (
        find(outage, Policy::Middleware(Stack::Defaults)),
        find(outage, Policy::Middleware(Stack::KnownQuota)),
    ) else {
        return;
    };
    let (Some(al), Some(kl)) = (&ad.outage, &kq.outage) else {
        return;
    };
    let over = if al.ratio() > allowed_outage_ratio(al.offered_before) {
        format!(
            " The learned gate's bound is its rate, not what it got through before the \
             window: here {:.0} sends/s during the window against {:.0} new requests/s \
             before it, over the target.",
            al.sends_during, al.offered_before
        )
    } else {
        String::new()
    };
    let _ = writeln!(
        t,
        "- **A pacing gate bounds all of the load, first sends included.** With the learned \
         gate and with the known quota the upstream saw {:.0} and {:.0} sends/s during the \
         window ({:.2} and {:.2} × the offered rate before it; C = {c:.0}/s): a gate sends no \
         faster than its rate, first sends and retries alike — C when it is told, else the \
         rate it learned before the window (a 503 is not a 429, so the rate does not fall, \
         and with no successes it does not rise).{over} {} and {} of their requests were \
         served, and {} and {} ended on a 503 the budget would not retry.",
        al.sends_during,
        kl.sends_during,
        al.ratio(),
        kl.ratio(),
        pct(ad.success_rate()),
        pct(kq.success_rate()),
        outage_stops(ad),
        outage_stops(kq),
    );
}

/// `RetryLayer` alone in the outage: a budget limits retries, not first sends.
fn first_sends(t: &mut String, c: f64, outage: &[Run]) {
    let Some(ro) = find(outage, Policy::Middleware(Stack::RetryOnly)) else {
        return;
    };
    let Some(rl) = &ro.outage else { return };
    let _ = writeln!(
        t,
        "- **A budget limits retries, not first sends.** Nothing paces **{}**, so a 429 or \
         503 the budget will not retry ends the request at once and its closed-loop client \
         starts the next: {:.0} new requests/s before the window, {:.0} sends/s during it \
         ({:.1} × C, {} retries per new request), and {} of its {} requests served. Its \
         load ratio, {:.2}, {}.",
        ro.policy.label(),
        rl.offered_before,
        rl.sends_during,
        rl.sends_during / c,
        retries(rl),
        pct(ro.success_rate()),
        ro.logical,
        rl.ratio(),
        if rl.ratio() <= allowed_outage_ratio(rl.offered_before) {
            "is within the target only because the denominator is its own inflated offered \
             rate"
        } else {
            "is over the target"
        },
    );
}
