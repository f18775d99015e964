//! docs/storm.svg: four bar panels, one bar per policy, hand-written SVG.

use crate::config::Config;
use crate::policies::Policy;
use crate::stats::Run;
use crate::targets::{BUDGET_RATIO, TARGET_AMPLIFICATION, TARGET_GOODPUT};
use std::fmt::Write as _;

struct Panel {
    title: &'static str,
    values: Vec<(Policy, f64)>,
    format: fn(f64) -> String,
    target: Option<(f64, &'static str)>,
}

fn panels(config: &Config, rate: &[Run], outage: &[Run]) -> [Panel; 4] {
    [
        Panel {
            title: "Rate limit: goodput, % of C",
            values: rate
                .iter()
                .map(|r| (r.policy, r.goodput(config.capacity) * 100.0))
                .collect(),
            format: |v| format!("{v:.0} %"),
            target: Some((TARGET_GOODPUT * 100.0, "target ≥ 95 %")),
        },
        Panel {
            title: "Rate limit: success rate",
            values: rate
                .iter()
                .map(|r| (r.policy, r.success_rate() * 100.0))
                .collect(),
            format: |v| format!("{v:.0} %"),
            target: None,
        },
        Panel {
            title: "Rate limit: sends per request",
            values: rate.iter().map(|r| (r.policy, r.amplification())).collect(),
            format: |v| format!("{v:.2}"),
            target: Some((TARGET_AMPLIFICATION, "target ≤ 1.2")),
        },
        Panel {
            title: "Outage: load ÷ offered before",
            values: outage
                .iter()
                .filter_map(|r| Some((r.policy, r.outage.as_ref()?.ratio())))
                .collect(),
            format: |v| format!("{v:.2}"),
            target: Some((1.0 + BUDGET_RATIO, "1.2 ≈ a 20 % retry budget")),
        },
    ]
}

/// Panel geometry: two columns, each panel a header, a plot and a gap.
const COLUMNS: usize = 2;
const PANEL_W: f64 = 500.0;
const HEADER: f64 = 56.0;
const PLOT_H: f64 = 200.0;
const GAP: f64 = 30.0;
const TOP: f64 = 44.0;

/// One panel, its top-left corner at (`left`, `top`).
fn panel(s: &mut String, panel: &Panel, left: f64, top: f64) {
    let x0 = left + 40.0;
    let plot_w = PANEL_W - 60.0;
    let base = top + HEADER + PLOT_H;
    let max = panel
        .values
        .iter()
        .map(|(_, v)| *v)
        .chain(panel.target.map(|(t, _)| t))
        .fold(0.0f64, f64::max)
        .max(1e-9)
        * 1.15;
    let y = |v: f64| base - v / max * PLOT_H;
    let _ = writeln!(
        s,
        r##"<text x="{:.1}" y="{:.1}" text-anchor="middle" font-weight="bold">{}</text>"##,
        x0 + plot_w / 2.0,
        top + 16.0,
        panel.title
    );
    let _ = writeln!(
        s,
        r##"<line x1="{x0:.1}" y1="{base:.1}" x2="{:.1}" y2="{base:.1}" stroke="#333"/>"##,
        x0 + plot_w,
    );
    let slot = plot_w / panel.values.len().max(1) as f64;
    for (j, (policy, value)) in panel.values.iter().enumerate() {
        let bx = x0 + slot * j as f64 + slot * 0.15;
        let bw = slot * 0.7;
        let by = y(*value);
        let _ = writeln!(
            s,
            r##"<rect x="{bx:.1}" y="{by:.1}" width="{bw:.1}" height="{:.1}" fill="{}"/>"##,
            base - by,
            policy.color()
        );
        let _ = writeln!(
            s,
            r##"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"##,
            bx + bw / 2.0,
            by - 4.0,
            (panel.format)(*value)
        );
    }
    if let Some((target, label)) = panel.target {
        let ty = y(target);
        let _ = writeln!(
            s,
            r##"<line x1="{x0:.1}" y1="{ty:.1}" x2="{:.1}" y2="{ty:.1}" stroke="#c53030" stroke-dasharray="5,4"/>"##,
            x0 + plot_w
        );
        let _ = writeln!(
            s,
            r##"<text x="{:.1}" y="{:.1}" text-anchor="middle" fill="#c53030" font-size="11">- - - {label}</text>"##,
            x0 + plot_w / 2.0,
            top + 32.0
        );
    }
}

/// The whole figure.
pub(crate) fn svg(config: &Config, rate: &[Run], outage: &[Run]) -> String {
    let panels = panels(config, rate, outage);
    let rows = panels.len().div_ceil(COLUMNS);
    let legend_rows = Policy::ALL.len().div_ceil(4);
    let width = PANEL_W * COLUMNS as f64 + 20.0;
    let panels_bottom = TOP + rows as f64 * (HEADER + PLOT_H + GAP);
    let height = panels_bottom + legend_rows as f64 * 22.0 + 10.0;
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0}" height="{height:.0}" viewBox="0 0 {width:.0} {height:.0}" font-family="Helvetica, Arial, sans-serif" font-size="12">"#
    );
    let _ = writeln!(s, r##"<rect width="100%" height="100%" fill="#ffffff"/>"##);
    let _ = writeln!(
        s,
        r##"<text x="{:.0}" y="24" text-anchor="middle" font-size="16" font-weight="bold">Storm benchmark: C = {} req/s, {} clients × {} requests</text>"##,
        width / 2.0,
        config.capacity,
        config.clients,
        config.requests
    );
    for (i, p) in panels.iter().enumerate() {
        let left = 10.0 + PANEL_W * (i % COLUMNS) as f64;
        let top = TOP + (HEADER + PLOT_H + GAP) * (i / COLUMNS) as f64;
        panel(&mut s, p, left, top);
    }
    for (i, policy) in Policy::ALL.iter().enumerate() {
        let lx = 20.0 + (i % 4) as f64 * (width - 40.0) / 4.0;
        let ly = panels_bottom + (i / 4) as f64 * 22.0;
        let _ = writeln!(
            s,
            r##"<rect x="{lx:.1}" y="{:.1}" width="12" height="12" fill="{}"/>"##,
            ly - 10.0,
            policy.color()
        );
        let _ = writeln!(
            s,
            r##"<text x="{:.1}" y="{ly:.1}">{}</text>"##,
            lx + 18.0,
            policy.label()
        );
    }
    s.push_str("</svg>\n");
    s
}
