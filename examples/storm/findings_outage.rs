//! "What the numbers say" about the outage: how long the defaults stay
//! away, what the budget refuses, and what the gate's pacing bounds.

use crate::config::Config;
use crate::findings::{budget_stops, find};
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

pub(crate) fn outage(t: &mut String, config: &Config, outage: &[Run]) {
    let Some(po) = find(outage, Policy::Middleware(Stack::Defaults)) else {
        return;
    };
    let Some(dl) = &po.outage else { return };
    let ideal = config.ideal_duration().as_secs_f64();
    let _ = writeln!(
        t,
        "- **In the outage the defaults back off, and then stay away.** A 503 names no \
         wait, so the computed backoff applies (500 ms · 2ⁿ⁻¹, n counting every attempt \
         of the request, the 429s before it included): the upstream sees {:.0} sends/s \
         during the window, {:.2} × the offered rate before it, but requests keep \
         sleeping long after the upstream is back — the last one answered at {:.1} s, \
         for a {ideal:.0} s workload.",
        dl.sends_during,
        dl.ratio(),
        po.duration.as_secs_f64(),
    );
    let (Some(gb), Some(ad), Some(kq)) = (
        find(outage, Policy::Middleware(Stack::GateBudget)),
        find(outage, Policy::Middleware(Stack::AdaptiveGateBudget)),
        find(outage, Policy::Middleware(Stack::KnownQuota)),
    ) else {
        return;
    };
    let (Some(gl), Some(al), Some(kl)) = (&gb.outage, &ad.outage, &kq.outage) else {
        return;
    };
    let _ = writeln!(
        t,
        "- **With a budget the retries stop when it is spent, and nobody sleeps for \
         long.** The budgeted rows retry a 503 after the same computed backoff, but only \
         while the budget grants it: {} retries per new request inside the window for \
         **{}**, {} for **{}** and {} for **{}**, against {} for the defaults; {}, {} and {} \
         requests ended with \"budget exhausted\". The last answers came at {:.1} s, {:.1} s \
         and {:.1} s, against {:.1} s for the defaults. (Retries per new request inside the \
         window may exceed 0.2: the budget counts the first sends of the last 10 s, most of \
         them from before the outage, plus its floor of 10/s; the load target below is the \
         one a budget is held to.)",
        retries(gl),
        gb.policy.label(),
        retries(al),
        ad.policy.label(),
        retries(kl),
        kq.policy.label(),
        retries(dl),
        budget_stops(gb),
        budget_stops(ad),
        budget_stops(kq),
        gb.duration.as_secs_f64(),
        ad.duration.as_secs_f64(),
        kq.duration.as_secs_f64(),
        po.duration.as_secs_f64(),
    );
    let c = f64::from(config.capacity);
    let _ = writeln!(
        t,
        "- **A pacing gate bounds all of the load, first sends included.** With the adaptive \
         gate and with the known quota the upstream saw {:.0} and {:.0} sends/s during the \
         window ({:.2} and {:.2} × the offered rate before it; C = {c:.0}/s): the gate sends \
         no faster than its rate (C, or the learned rate of at most 2 × C), first sends and \
         retries alike, and {} and {} of their requests were served.",
        al.sends_during,
        kl.sends_during,
        al.ratio(),
        kl.ratio(),
        pct(ad.success_rate()),
        pct(kq.success_rate()),
    );
    let _ = writeln!(
        t,
        "- **A budget limits retries, not first sends.** The quota-less gate does not pace, \
         so in **{}** a 429 or 503 the budget will not retry ends the request at once and \
         its closed-loop client starts the next: {:.0} new requests/s before the window, \
         {:.0} sends/s during it ({:.1} × C), and {} of its {} requests served. Its load \
         ratio, {:.2}, {}.",
        gb.policy.label(),
        gl.offered_before,
        gl.sends_during,
        gl.sends_during / c,
        pct(gb.success_rate()),
        gb.logical,
        gl.ratio(),
        if gl.ratio() <= allowed_outage_ratio(gl.offered_before) {
            "is within the target only because the denominator is its own inflated offered \
             rate"
        } else {
            "is over the target"
        },
    );
}
