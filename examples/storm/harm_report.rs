//! "Shapes a gate must not make worse": one table per scenario of
//! [`crate::harm`], every row against the scenario's baseline row, and the
//! targets of the recommended stack, marked in its row and summed up.

use crate::findings::find;
use crate::harm::{Harm, Target, CUTOFF, FREE_MODEL, HELD_FOR, HELD_MODEL};
use crate::policies::Policy;
use crate::stacks::Stack;
use crate::stats::{ModelTally, Run, CUT_OFF};
use crate::tables::{integrity, ms, outcomes_list, pct};
use std::fmt::Write as _;
use std::time::Duration;

/// Share served, at least.
const TARGET_SERVED: f64 = 0.99;
/// Completion and p50, as a multiple of the baseline's.
const TARGET_TIME: f64 = 1.2;
/// Sends per request, as a multiple of the baseline's.
const TARGET_SENDS: f64 = 1.1;

const DEFAULTS: Policy = Policy::Middleware(Stack::Defaults);

/// A scenario of [`Harm`] and its policies' runs.
pub(crate) type HarmRuns = (Harm, Vec<Run>);

/// One target of the recommended stack: what it says, and whether it is met.
struct Check {
    text: String,
    ok: bool,
}

fn mark(text: String, ok: bool) -> String {
    if ok {
        format!("{text} ✓")
    } else {
        format!("**{text} ✗**")
    }
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

/// A latency in seconds, unless it is a request's that the cut-off ended.
fn ended(d: Duration) -> Option<f64> {
    (d != CUT_OFF).then_some(d.as_secs_f64())
}

/// `x` as a multiple of `base`.
fn ratio(x: f64, base: f64) -> f64 {
    x / base.max(1e-9)
}

fn model<'a>(run: &'a Run, name: &str) -> Option<&'a ModelTally> {
    run.by_model.iter().find(|m| m.model == name)
}

/// Whether the held model honoured its wait: every request served, none
/// before the wait was over.
fn honoured(held: &ModelTally) -> (bool, bool) {
    (
        held.served == held.logical,
        held.first_served.is_none_or(|at| at >= HELD_FOR),
    )
}

/// The recommended stack's targets in `harm`, against `base`.
fn checks(harm: Harm, defaults: &Run, base: &Run) -> Vec<Check> {
    let time = ratio(secs(defaults.duration), secs(base.duration));
    let time_check = Check {
        text: format!("completion {time:.2}× (≤ {TARGET_TIME}×)"),
        ok: time <= TARGET_TIME,
    };
    match harm.target() {
        Target::ServedTimeSends => {
            let sends = ratio(defaults.sends_per_began(), base.sends_per_began());
            vec![
                Check {
                    text: format!("served {}", pct(defaults.success_rate())),
                    ok: defaults.success_rate() >= TARGET_SERVED,
                },
                time_check,
                Check {
                    text: format!(
                        "sends per started request {sends:.2}× (≤ {TARGET_SENDS}×){}",
                        if defaults.cut > 0 {
                            format!(
                                ", counted until the cut-off, by which {} of {} requests \
                                 had not ended ({} not started)",
                                defaults.cut,
                                defaults.logical,
                                defaults.logical - defaults.began
                            )
                        } else {
                            String::new()
                        }
                    ),
                    ok: sends <= TARGET_SENDS,
                },
            ]
        }
        Target::Time => vec![time_check],
        Target::TimeP50 => {
            let p50 = match (ended(defaults.p50), ended(base.p50)) {
                (Some(d), Some(b)) => Check {
                    text: format!("p50 {:.2}× (≤ {TARGET_TIME}×)", ratio(d, b)),
                    ok: ratio(d, b) <= TARGET_TIME,
                },
                _ => Check {
                    text: "p50 not measured: cut off".to_owned(),
                    ok: false,
                },
            };
            vec![time_check, p50]
        }
        Target::FreeModelHeldModel => {
            let free = match (model(defaults, FREE_MODEL), model(base, FREE_MODEL)) {
                (Some(d), Some(b)) => {
                    let r = ratio(secs(d.completion), secs(b.completion));
                    Check {
                        text: format!("{FREE_MODEL} completion {r:.2}× (≤ {TARGET_TIME}×)"),
                        ok: r <= TARGET_TIME,
                    }
                }
                _ => Check {
                    text: format!("{FREE_MODEL} not measured"),
                    ok: false,
                },
            };
            let held = match model(defaults, HELD_MODEL) {
                Some(h) => {
                    let (served, waited) = honoured(h);
                    Check {
                        text: format!(
                            "{HELD_MODEL} honours the wait ({}/{} served, the first at {}, \
                             {:.2} sends per request)",
                            h.served,
                            h.logical,
                            h.first_served.map_or("—".to_owned(), ms),
                            h.amplification()
                        ),
                        ok: served && waited,
                    }
                }
                None => Check {
                    text: format!("{HELD_MODEL} not measured"),
                    ok: false,
                },
            };
            vec![free, held]
        }
    }
}

/// The row of `policy`, marked where `defaults` has a target.
fn show(defaults: bool, text: String, ok: bool) -> String {
    if defaults {
        mark(text, ok)
    } else {
        text
    }
}

/// `x` and its multiple of `base`, if there is a baseline.
fn with_ratio(text: String, x: f64, base: Option<f64>) -> String {
    match base {
        Some(base) => format!("{text} ({:.2}×)", ratio(x, base)),
        None => text,
    }
}

/// The table of scenarios 10, 11 and 13.
fn table(harm: Harm, runs: &[Run], base: Option<&Run>) -> String {
    let target = harm.target();
    let mut t = String::new();
    let _ = writeln!(
        t,
        "| policy | served | sends per started request (÷ baseline) | completion (÷ baseline) | p50 (÷ baseline) | p99 | lost / duplicated |"
    );
    let _ = writeln!(t, "|---|--:|--:|--:|--:|--:|--:|");
    for run in runs {
        let defaults = run.policy == DEFAULTS && base.is_some();
        let sends = run.sends_per_began();
        let time = secs(run.duration);
        let p50 = ended(run.p50).unwrap_or(f64::INFINITY);
        let over = |x: f64, b: Option<f64>, limit: f64| b.is_none_or(|b| ratio(x, b) <= limit);
        let served_cell = format!(
            "{} ({}/{})",
            pct(run.success_rate()),
            run.succeeded,
            run.logical
        );
        let sends_cell = with_ratio(format!("{sends:.2}"), sends, base.map(Run::sends_per_began));
        let time_cell = with_ratio(format!("{time:.2} s"), time, base.map(|b| secs(b.duration)));
        let base_p50 = base.and_then(|b| ended(b.p50));
        let p50_cell = match ended(run.p50) {
            Some(p50) => with_ratio(ms(run.p50), p50, base_p50),
            None => ms(run.p50),
        };
        let (served_cell, sends_cell, time_cell, p50_cell) = match target {
            Target::ServedTimeSends => (
                show(defaults, served_cell, run.success_rate() >= TARGET_SERVED),
                show(
                    defaults,
                    sends_cell,
                    over(sends, base.map(Run::sends_per_began), TARGET_SENDS),
                ),
                show(
                    defaults,
                    time_cell,
                    over(time, base.map(|b| secs(b.duration)), TARGET_TIME),
                ),
                p50_cell,
            ),
            Target::Time => (
                served_cell,
                sends_cell,
                show(
                    defaults,
                    time_cell,
                    over(time, base.map(|b| secs(b.duration)), TARGET_TIME),
                ),
                p50_cell,
            ),
            Target::TimeP50 | Target::FreeModelHeldModel => (
                served_cell,
                sends_cell,
                show(
                    defaults,
                    time_cell,
                    over(time, base.map(|b| secs(b.duration)), TARGET_TIME),
                ),
                show(defaults, p50_cell, over(p50, base_p50, TARGET_TIME)),
            ),
        };
        let _ = writeln!(
            t,
            "| {} | {served_cell} | {sends_cell} | {time_cell} | {p50_cell} | {} | {} |",
            run.policy.label(),
            ms(run.p99),
            integrity(run),
        );
    }
    t
}

/// The table of scenario 12: each model's requests apart.
fn per_model_table(runs: &[Run], base: Option<&Run>) -> String {
    let base_free = base.and_then(|b| model(b, FREE_MODEL));
    let base_held = base.and_then(|b| model(b, HELD_MODEL));
    let mut t = String::new();
    let _ = writeln!(
        t,
        "| policy | served | sends per started request | `{FREE_MODEL}` served | `{FREE_MODEL}` completion (÷ baseline) | `{FREE_MODEL}` p50 | `{HELD_MODEL}` served | `{HELD_MODEL}` first served | `{HELD_MODEL}` sends per request (÷ baseline) | lost / duplicated |"
    );
    let _ = writeln!(t, "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|");
    for run in runs {
        let defaults = run.policy == DEFAULTS && base.is_some();
        let (free_served, free_time, free_p50) = match model(run, FREE_MODEL) {
            Some(free) => {
                let time = secs(free.completion);
                let base_time = base_free.map(|b| secs(b.completion));
                (
                    format!("{}/{}", free.served, free.logical),
                    show(
                        defaults,
                        with_ratio(format!("{time:.2} s"), time, base_time),
                        base_time.is_none_or(|b| ratio(time, b) <= TARGET_TIME),
                    ),
                    ms(free.p50),
                )
            }
            None => ("—".to_owned(), "—".to_owned(), "—".to_owned()),
        };
        let (held_served, held_first, held_sends) = match model(run, HELD_MODEL) {
            Some(held) => {
                let (served, waited) = honoured(held);
                (
                    show(
                        defaults,
                        format!("{}/{}", held.served, held.logical),
                        served,
                    ),
                    show(
                        defaults,
                        held.first_served.map_or_else(|| "—".to_owned(), ms),
                        waited,
                    ),
                    with_ratio(
                        format!("{:.2}", held.amplification()),
                        held.amplification(),
                        base_held.map(ModelTally::amplification),
                    ),
                )
            }
            None => ("—".to_owned(), "—".to_owned(), "—".to_owned()),
        };
        let _ = writeln!(
            t,
            "| {} | {} ({}/{}) | {:.2} | {free_served} | {free_time} | {free_p50} | {held_served} | {held_first} | {held_sends} | {} |",
            run.policy.label(),
            pct(run.success_rate()),
            run.succeeded,
            run.logical,
            run.sends_per_began(),
            integrity(run),
        );
    }
    t
}

/// What `harm` asks of the recommended stack, in words.
fn targets_text(harm: Harm) -> String {
    let base = harm.baseline().label();
    match harm.target() {
        Target::ServedTimeSends => format!(
            "≥ {:.0} % served; completion ≤ {TARGET_TIME}× and sends per request ≤ \
             {TARGET_SENDS}× **{base}**'s",
            TARGET_SERVED * 100.0
        ),
        Target::Time => format!("completion ≤ {TARGET_TIME}× **{base}**'s"),
        Target::TimeP50 => format!("completion and p50 ≤ {TARGET_TIME}× **{base}**'s"),
        Target::FreeModelHeldModel => format!(
            "the `{FREE_MODEL}` requests' completion ≤ {TARGET_TIME}× **{base}**'s; every \
             `{HELD_MODEL}` request served and none before {} s (its sends per request are \
             reported, not a target)",
            HELD_FOR.as_secs()
        ),
    }
}

/// The section of docs/storm.md.
pub(crate) fn section(harms: &[HarmRuns]) -> String {
    let mut md = String::new();
    if harms.is_empty() {
        return md;
    }
    let _ = writeln!(md, "\n## Shapes a gate must not make worse\n");
    let _ = writeln!(
        md,
        "A gate may make a request wait longer, or send later, than the retry layer alone \
         would only on evidence that the key (and model) is out of capacity. In the \
         upstreams below there is none: 429s that come whatever the rate, a stated quota \
         with nearly all of it left, one model's wait on a key whose other model is free, \
         529s that come whatever the concurrency. Each scenario is measured against the \
         row that has no gate: **RetryLayer alone** (the same retries and budget), or, \
         where nothing is refused, **no retries** (a bare client); every row shows its \
         ratio to that baseline, and the targets are marked in the **llm-retry defaults** \
         row (`ClientLayer::default()`). Every row runs against a fresh upstream, in the \
         same run. A run is stopped {} s after its upstream started: requests still running \
         then are dropped and count as not served, the completion shows the cut-off, their \
         latency counts as longer than any (\"cut off\" when a percentile falls on one), and \
         sends per request are counted over the requests sent before it. \
         **llm-retry + known quota** is told the stated quota in 11 (per minute, rounded \
         up to whole requests a second, with the stated remaining as its burst) and, \
         elsewhere, 100 000 requests a second: nothing to pace.\n",
        CUTOFF.as_secs()
    );
    let mut summary = Vec::new();
    for (harm, runs) in harms {
        let base = find(runs, harm.baseline());
        let _ = writeln!(md, "### {}. {}\n", harm.number(), harm.label());
        let _ = writeln!(md, "{}\n", harm.describe());
        let _ = writeln!(
            md,
            "Baseline: **{}**. Targets: {}.\n",
            harm.baseline().label(),
            targets_text(*harm)
        );
        md.push_str(&match harm {
            Harm::PerModel => per_model_table(runs, base),
            _ => table(*harm, runs, base),
        });
        let _ = writeln!(md, "\nOutcomes:\n\n{}", outcomes_list(runs));
        if let (Some(defaults), Some(base)) = (find(runs, DEFAULTS), base) {
            summary.push((*harm, checks(*harm, defaults, base)));
        }
    }
    let _ = writeln!(md, "### Summary of shapes a gate must not make worse\n");
    let (mut met, mut all) = (0, 0);
    let mut missed = Vec::new();
    for (harm, checks) in &summary {
        let cells: Vec<String> = checks.iter().map(|c| mark(c.text.clone(), c.ok)).collect();
        let _ = writeln!(
            md,
            "- {}. {}: {}",
            harm.number(),
            harm.label(),
            cells.join("; ")
        );
        all += checks.len();
        met += checks.iter().filter(|c| c.ok).count();
        if checks.iter().any(|c| !c.ok) {
            missed.push(harm.number());
        }
    }
    let _ = writeln!(
        md,
        "\n**llm-retry defaults** meets {met} of {all} targets here{}.",
        if missed.is_empty() {
            String::new()
        } else {
            format!("; it misses at least one in {}", missed.join(", "))
        }
    );
    md
}

/// A short account for the terminal, after each scenario.
pub(crate) fn brief(harm: Harm, runs: &[Run]) -> String {
    let base = find(runs, harm.baseline());
    let mut t = String::new();
    for run in runs {
        let vs = |x: Option<f64>, b: Option<f64>| match (x, b) {
            (Some(x), Some(b)) => format!(" ({:.2}×)", ratio(x, b)),
            _ => String::new(),
        };
        let _ = write!(
            t,
            "    {:<34} served {:>6}  sends {:.2}{}  time {:>5.2} s{}  p50 {}{}  p99 {}  {}",
            run.policy.label(),
            pct(run.success_rate()),
            run.sends_per_began(),
            vs(Some(run.sends_per_began()), base.map(Run::sends_per_began)),
            secs(run.duration),
            vs(Some(secs(run.duration)), base.map(|b| secs(b.duration))),
            ms(run.p50),
            vs(ended(run.p50), base.and_then(|b| ended(b.p50))),
            ms(run.p99),
            integrity(run),
        );
        for m in &run.by_model {
            let _ = write!(
                t,
                "\n      {}: {}/{} served, last at {:.2} s, first served at {}, {:.2} sends each",
                m.model,
                m.served,
                m.logical,
                secs(m.completion),
                m.first_served.map_or_else(|| "—".to_owned(), ms),
                m.amplification()
            );
        }
        let failed: Vec<String> = run
            .outcomes
            .iter()
            .filter(|(why, _)| why.as_str() != "200")
            .map(|(why, n)| format!("{n} × {why}"))
            .collect();
        if !failed.is_empty() {
            let _ = write!(t, "\n      {}", failed.join(", "));
        }
        let _ = writeln!(t);
    }
    if let (Some(defaults), Some(base)) = (find(runs, DEFAULTS), base) {
        let verdicts: Vec<String> = checks(harm, defaults, base)
            .into_iter()
            .map(|c| format!("{} {}", c.text, if c.ok { "✓" } else { "✗" }))
            .collect();
        let _ = writeln!(t, "  llm-retry defaults: {}", verdicts.join("; "));
    }
    t
}
