//! The project's targets: the thresholds, which row meets which, and the
//! table and summary that say so.

use crate::config::Config;
use crate::policies::Policy;
use crate::stats::Run;
use crate::tables::pct;
use std::fmt::Write as _;

/// Goodput under the rate limit, as a share of C.
pub(crate) const TARGET_GOODPUT: f64 = 0.95;
/// Upstream sends per logical request under the rate limit.
pub(crate) const TARGET_AMPLIFICATION: f64 = 1.2;
/// The reference retry budget for the outage target: 20 % + 10 retries/s.
pub(crate) const BUDGET_RATIO: f64 = 0.2;
pub(crate) const BUDGET_FLOOR_PER_SEC: f64 = 10.0;
/// Not a target: the success rate below which a met goodput target is
/// called out as the upstream's saturation rather than the client's merit.
const SERVED: f64 = 0.95;

/// The outage target as a ratio to the offered rate:
/// ((1 + ratio) × offered + floor) ÷ offered.
pub(crate) fn allowed_outage_ratio(offered_before: f64) -> f64 {
    1.0 + BUDGET_RATIO + BUDGET_FLOOR_PER_SEC / offered_before.max(1e-9)
}

/// Whether one policy's (rate limit, outage) runs meet each target.
pub(crate) struct Verdicts {
    pub(crate) goodput: bool,
    pub(crate) amplification: bool,
    pub(crate) outage_load: bool,
    pub(crate) integrity: bool,
}

impl Verdicts {
    pub(crate) fn of(config: &Config, rate: &Run, outage: &Run) -> Verdicts {
        Verdicts {
            goodput: rate.goodput(config.capacity) >= TARGET_GOODPUT,
            amplification: rate.amplification() <= TARGET_AMPLIFICATION,
            outage_load: outage
                .outage
                .as_ref()
                .is_some_and(|load| load.ratio() <= allowed_outage_ratio(load.offered_before)),
            integrity: rate.clean() && outage.clean(),
        }
    }

    pub(crate) fn all(&self) -> bool {
        self.goodput && self.amplification && self.outage_load && self.integrity
    }
}

fn mark(text: String, ok: bool) -> String {
    if ok {
        format!("{text} ✓")
    } else {
        format!("**{text} ✗**")
    }
}

/// One row per policy, one column per target.
fn table(config: &Config, rate: &[Run], outage: &[Run]) -> String {
    let mut t = String::new();
    let _ = writeln!(
        t,
        "| policy | goodput ≥ 95 % of C | sends per request ≤ 1.2 | outage load ≤ (1 + 20 %) × offered + 10/s | zero lost / duplicated | all four | success (not a target) |"
    );
    let _ = writeln!(t, "|---|--:|--:|--:|--:|:-:|--:|");
    for (r, o) in rate.iter().zip(outage) {
        let v = Verdicts::of(config, r, o);
        let load = o.outage.as_ref().map_or_else(
            || "—".to_owned(),
            |l| {
                format!(
                    "{:.2} (≤ {:.2})",
                    l.ratio(),
                    allowed_outage_ratio(l.offered_before)
                )
            },
        );
        let lost = r.lost + o.lost;
        let duplicated = r.duplicated_results
            + r.duplicated_upstream
            + o.duplicated_results
            + o.duplicated_upstream;
        let _ = writeln!(
            t,
            "| {} | {} | {} | {} | {} | {} | {} |",
            r.policy.label(),
            mark(pct(r.goodput(config.capacity)), v.goodput),
            mark(format!("{:.2}", r.amplification()), v.amplification),
            mark(load, v.outage_load),
            mark(format!("{lost} / {duplicated}"), v.integrity),
            if v.all() { "**yes**" } else { "no" },
            pct(r.success_rate()),
        );
    }
    t
}

/// `a`, `a and b`, `a, b and c`.
fn join(items: &[String]) -> String {
    match items.split_last() {
        None => "none".to_owned(),
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} and {last}", rest.join(", ")),
    }
}

/// The policies' labels in bold, joined.
fn names(policies: &[Policy]) -> String {
    let bold: Vec<String> = policies
        .iter()
        .map(|p| format!("**{}**", p.label()))
        .collect();
    join(&bold)
}

/// The section: what the targets are, the table, and who meets them.
pub(crate) fn targets(config: &Config, rate: &[Run], outage: &[Run]) -> String {
    let mut t = String::new();
    let _ = writeln!(t, "\n## The project's targets\n");
    let _ = writeln!(
        t,
        "Under the rate limit, goodput ≥ 95 % of C and at most 1.2 sends per request; during \
         the outage, no more load than a 20 % + 10/s retry budget allows, (1 + 20 %) × the \
         offered rate before the window + 10 sends/s; nothing lost or duplicated in either \
         scenario. They are the targets for the project's protective configuration; every \
         row is held to them here for comparison. The success rate is not a target, and is \
         shown beside them because it is what the targets can miss.\n"
    );
    t.push_str(&table(config, rate, outage));
    let pairs: Vec<(&Run, &Run, Verdicts)> = rate
        .iter()
        .zip(outage)
        .map(|(r, o)| (r, o, Verdicts::of(config, r, o)))
        .collect();
    let all: Vec<Policy> = pairs
        .iter()
        .filter(|(_, _, v)| v.all())
        .map(|(r, _, _)| r.policy)
        .collect();
    let served: Vec<Policy> = pairs
        .iter()
        .filter(|(r, _, v)| v.all() && r.success_rate() >= SERVED)
        .map(|(r, _, _)| r.policy)
        .collect();
    let hollow: Vec<String> = pairs
        .iter()
        .filter(|(r, _, v)| v.goodput && r.success_rate() < SERVED)
        .map(|(r, _, _)| format!("**{}** ({})", r.policy.label(), pct(r.success_rate())))
        .collect();
    let summary = match (all.is_empty(), served.is_empty()) {
        (true, _) => "No row meets all four targets.".to_owned(),
        (false, true) => format!(
            "All four targets are met by {}, and by no row that also served at least {} of \
             its requests under the rate limit.",
            names(&all),
            pct(SERVED)
        ),
        (false, false) => format!(
            "All four targets are met by {}; of those, {} also served at least {} of the \
             requests under the rate limit.",
            names(&all),
            names(&served),
            pct(SERVED)
        ),
    };
    let _ = writeln!(t, "\n{summary}");
    if !hollow.is_empty() {
        let _ = writeln!(
            t,
            "\nThe goodput target is met while serving fewer than {} of the requests by {}: \
             the upstream stayed saturated, so successes per second stayed near C however \
             many requests gave up.",
            pct(SERVED),
            join(&hollow)
        );
    }
    let empty: Vec<(Policy, f64)> = pairs
        .iter()
        .filter(|(r, _, v)| v.all() && r.success_rate() < SERVED)
        .map(|(r, _, _)| (r.policy, r.success_rate()))
        .collect();
    if let Some((_, worst)) = empty
        .iter()
        .min_by(|a, b| a.1.partial_cmp(&b.1).unwrap_or(std::cmp::Ordering::Equal))
    {
        let policies: Vec<Policy> = empty.iter().map(|(p, _)| *p).collect();
        let _ = writeln!(
            t,
            "\n{} {} all four targets while serving as little as {} of the requests: \
             giving up early costs the upstream little, and the targets bound what a client \
             costs the upstream, not what it delivers. Read them with the success column.",
            names(&policies),
            if policies.len() == 1 { "meets" } else { "meet" },
            pct(*worst)
        );
    }
    t
}
