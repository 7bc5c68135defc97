//! `--html FILE`: the report as one self-contained HTML page (no scripts, no network) with
//! hand-written inline SVG line charts: throughput and p99 over time per workload (one line per
//! run, from the per-second timeline) and, for a `--concurrency` sweep, throughput and p99
//! against connections (log scale).

use std::fmt::Write;

use crate::{matrix::table, report::Report, schedule::Schedule};

const COLORS: [&str; 8] = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"];
const WIDTH: f64 = 720.0;
const HEIGHT: f64 = 300.0;
/// Left margin of the plot area: y ticks and label.
const LEFT: f64 = 64.0;
/// Right margin: the legend.
const RIGHT: f64 = 190.0;
/// Top margin: the title.
const TOP: f64 = 28.0;
/// Bottom margin: x ticks and label.
const BOTTOM: f64 = 46.0;

/// One line of a chart: its legend and its `(x, y)` points.
#[derive(Debug, Clone)]
pub struct Series {
    /// The legend.
    pub name: String,
    /// The points, in drawing order.
    pub points: Vec<(f64, f64)>,
}

/// A line chart's titles and x scale.
#[derive(Debug, Clone, Copy)]
pub struct Chart<'a> {
    /// Above the plot.
    pub title: &'a str,
    /// Under the x axis.
    pub x_label: &'a str,
    /// Beside the y axis.
    pub y_label: &'a str,
    /// A log2 x axis (connections), ticks at the points' x values.
    pub log_x: bool,
}

/// `s` safe inside HTML text and attributes.
fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// A tick label: 3 significant digits at most, `k`/`M` for thousands and millions.
fn short(v: f64) -> String {
    let (v, unit) = match v.abs() {
        a if a >= 1e6 => (v / 1e6, "M"),
        a if a >= 1e3 => (v / 1e3, "k"),
        _ => (v, ""),
    };
    let digits = if v.abs() >= 100.0 || v == v.trunc() {
        0
    } else if v.abs() >= 10.0 {
        1
    } else {
        2
    };
    format!("{v:.digits$}{unit}")
}

impl Chart<'_> {
    /// The chart as an `<svg>` element: axes, ticks, labels, one polyline per series, a legend.
    pub fn svg(&self, series: &[Series]) -> String {
        let fx = |x: f64| if self.log_x { x.max(1e-9).log2() } else { x };
        let points = || series.iter().flat_map(|s| s.points.iter().copied());
        let (x0, x1) = points().fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), (x, _)| (a.min(fx(x)), b.max(fx(x))));
        // No points: 0..1; one x value: that value..+1.
        let (x0, x1) = match (x0.is_finite(), x1 > x0) {
            (false, _) => (0.0, 1.0),
            (true, false) => (x0, x0 + 1.0),
            (true, true) => (x0, x1),
        };
        let y1 = points().map(|(_, y)| y).fold(0.0, f64::max) * 1.05;
        let y1 = if y1 > 0.0 { y1 } else { 1.0 };
        let (pw, ph) = (WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM);
        let px = |x: f64| LEFT + (fx(x) - x0) / (x1 - x0) * pw;
        let py = |y: f64| TOP + ph - y / y1 * ph;
        let mut s = format!(
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{WIDTH}\" height=\"{HEIGHT}\" viewBox=\"0 0 {WIDTH} {HEIGHT}\">\n\
             <text x=\"{LEFT}\" y=\"18\" class=\"title\">{}</text>\n",
            esc(self.title)
        );
        let bottom = TOP + ph;
        let _ = writeln!(s, "<path d=\"M{LEFT} {TOP}V{bottom}H{}\" class=\"axis\"/>", LEFT + pw);
        for i in 0..=4 {
            let y = y1 * f64::from(i) / 4.0;
            let _ = writeln!(
                s,
                "<path d=\"M{LEFT} {0:.1}h{pw}\" class=\"grid\"/><text x=\"{1}\" y=\"{0:.1}\" class=\"ytick\">{2}</text>",
                py(y),
                LEFT - 4.0,
                short(y)
            );
        }
        let mut xs: Vec<f64> = if self.log_x {
            points().map(|(x, _)| x).collect()
        } else {
            (0..=5).map(|i| x0 + (x1 - x0) * f64::from(i) / 5.0).collect()
        };
        xs.sort_by(f64::total_cmp);
        xs.dedup();
        for x in xs {
            let _ = writeln!(s, "<text x=\"{:.1}\" y=\"{}\" class=\"xtick\">{}</text>", px(x), bottom + 16.0, short(x));
        }
        let _ = writeln!(
            s,
            "<text x=\"{:.1}\" y=\"{}\" class=\"xlabel\">{}</text>\n\
             <text transform=\"translate(14 {:.1}) rotate(-90)\" class=\"xlabel\">{}</text>",
            LEFT + pw / 2.0,
            HEIGHT - 6.0,
            esc(self.x_label),
            TOP + ph / 2.0,
            esc(self.y_label)
        );
        for (i, line) in series.iter().enumerate() {
            let color = COLORS[i % COLORS.len()];
            let pts: Vec<String> = line.points.iter().map(|&(x, y)| format!("{:.1},{:.1}", px(x), py(y))).collect();
            let ly = TOP + 14.0 * i as f64;
            let _ = writeln!(
                s,
                "<polyline points=\"{}\" stroke=\"{color}\" class=\"line\"/>\n\
                 <rect x=\"{}\" y=\"{}\" width=\"10\" height=\"10\" fill=\"{color}\"/><text x=\"{}\" y=\"{}\" class=\"legend\">{}</text>",
                pts.join(" "),
                LEFT + pw + 10.0,
                ly,
                LEFT + pw + 24.0,
                ly + 9.0,
                esc(&line.name)
            );
        }
        s.push_str("</svg>\n");
        s
    }
}

const STYLE: &str = "body{font:14px sans-serif;margin:2em}table{border-collapse:collapse}\
td,th{border:1px solid #ccc;padding:2px 8px;text-align:right}td:first-child,th:first-child{text-align:left}\
svg text{font:11px sans-serif}.title{font-weight:bold;font-size:13px}.ytick{text-anchor:end;dominant-baseline:middle}\
.xtick,.xlabel{text-anchor:middle}.axis{stroke:#333;fill:none}.grid{stroke:#eee}.line{fill:none;stroke-width:1.5}";

/// The whole page: the matrix table (if any), one line per run, and the charts.
pub fn render(report: &Report) -> String {
    let g = &report.generator;
    let mut out = format!(
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>shardlite bench</title><style>{STYLE}</style></head>\n\
         <body><h1>shardlite bench</h1>\n<p>shardlite {}, generator {} threads, {} cores</p>\n",
        esc(&g.version),
        g.threads,
        g.cores
    );
    if let Some(m) = &report.matrix {
        let _ = writeln!(out, "<h2>Matrix</h2>\n<pre>{}</pre>", esc(&table::render_text(report, m)));
    }
    out.push_str(
        "<h2>Runs</h2>\n<table><tr><th>run</th><th>queries/s</th><th>p50 ms</th><th>p99 ms</th><th>errors</th></tr>\n",
    );
    for r in &report.runs {
        let l = &r.latency_ms;
        let _ = writeln!(
            out,
            "<tr><td>{}</td><td>{:.0}</td><td>{:.2}</td><td>{:.2}</td><td>{}</td></tr>",
            esc(&r.name),
            r.queries_per_sec,
            l.p50,
            l.p99,
            r.error_total
        );
    }
    out.push_str("</table>\n<h2>Over time</h2>\n");
    let mut workloads = Vec::new();
    for r in &report.runs {
        if !workloads.contains(&r.options.workload) {
            workloads.push(r.options.workload);
        }
    }
    for w in workloads {
        let runs: Vec<_> = report.runs.iter().filter(|r| r.options.workload == w).collect();
        let over_time = |f: fn(&crate::report::SecondReport) -> f64| -> Vec<Series> {
            runs.iter()
                .map(|r| Series {
                    name: r.name.clone(),
                    points: r.timeline.iter().map(|s| ((s.second + 1) as f64, f(s))).collect(),
                })
                .collect()
        };
        let title = format!("{w}: queries/s");
        let chart = Chart { title: &title, x_label: "second", y_label: "queries/s", log_x: false };
        out.push_str(&chart.svg(&over_time(|s| s.ok as f64)));
        let title = format!("{w}: p99 latency");
        let chart = Chart { title: &title, x_label: "second", y_label: "p99 ms", log_x: false };
        out.push_str(&chart.svg(&over_time(|s| s.latency_ms.p99)));
    }
    let sweep = sweep(report);
    if sweep.iter().any(|(_, points)| points.len() > 1) {
        out.push_str("<h2>Against concurrency</h2>\n");
        let series = |f: fn(&(f64, f64)) -> f64| -> Vec<Series> {
            sweep
                .iter()
                .map(|(name, pts)| Series { name: name.clone(), points: pts.iter().map(|p| (p.0, f(&p.1))).collect() })
                .collect()
        };
        let chart =
            Chart { title: "queries/s against connections", x_label: "connections", y_label: "queries/s", log_x: true };
        out.push_str(&chart.svg(&series(|p| p.0)));
        let chart = Chart { title: "p99 against connections", x_label: "connections", y_label: "p99 ms", log_x: true };
        out.push_str(&chart.svg(&series(|p| p.1)));
    }
    out.push_str("</body></html>\n");
    out
}

/// One run of a sweep: `(connections, (queries/s, p99 ms))`.
type SweepPoint = (f64, (f64, f64));

/// Runs grouped by name without the ` c=N` suffix.
fn sweep(report: &Report) -> Vec<(String, Vec<SweepPoint>)> {
    let mut groups: Vec<(String, Vec<SweepPoint>)> = Vec::new();
    for r in &report.runs {
        let base = r.name.split(" c=").next().unwrap_or(&r.name).to_owned();
        let c = match r.options.schedule {
            Schedule::Closed { connections } | Schedule::Open { connections, .. } => connections as f64,
        };
        let point = (c, (r.queries_per_sec, r.latency_ms.p99));
        match groups.iter_mut().find(|(name, _)| *name == base) {
            Some((_, points)) => points.push(point),
            None => groups.push((base, vec![point])),
        }
    }
    groups
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chart_has_axes_ticks_lines_and_legends() {
        let series = [
            Series { name: "select <c=1>".into(), points: vec![(1.0, 100.0), (2.0, 1500.0), (4.0, 3000.0)] },
            Series { name: "insert".into(), points: vec![(1.0, 50.0), (2.0, 60.0)] },
        ];
        let svg = Chart { title: "q/s", x_label: "connections", y_label: "queries/s", log_x: true }.svg(&series);
        assert!(svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\"") && svg.ends_with("</svg>\n"));
        assert_eq!(svg.matches("<polyline").count(), 2);
        assert!(svg.contains("select &lt;c=1&gt;") && svg.contains(">insert</text>"));
        // Log x: ticks at the points' x values only; y ticks up to 1.05 × the largest value.
        for tick in [">1</text>", ">2</text>", ">4</text>", ">3.15k</text>"] {
            assert!(svg.contains(tick), "{tick} not in {svg}");
        }
        assert!(!svg.contains(">3</text>"));
        // The first point of the first line sits on the left edge, the highest on the top.
        assert!(svg.contains(&format!("points=\"{LEFT:.1},")));
        let (ph, top) = (HEIGHT - TOP - BOTTOM, TOP);
        assert!(svg.contains(&format!("{:.1}", top + ph - 3000.0 / (3000.0 * 1.05) * ph)));
    }

    #[test]
    fn an_empty_chart_still_renders() {
        let svg = Chart { title: "t", x_label: "x", y_label: "y", log_x: false }.svg(&[]);
        assert!(svg.contains("class=\"axis\"") && !svg.contains("NaN") && !svg.contains("inf"));
    }

    #[test]
    fn tick_labels_are_short() {
        assert_eq!(
            [short(0.0), short(1.5), short(12.34), short(250.0), short(3150.0), short(2e6)],
            ["0", "1.50", "12.3", "250", "3.15k", "2M"]
        );
    }
}
