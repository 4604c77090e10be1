//! Several runs of the same rows in one report (`--runs N`, `--report PATH.md`), and what
//! moved between two reports (`--compare OLD.json`).
//!
//! A row's figures in the report are those of its median run: the run whose ratio to the
//! first baseline is the median over the runs (rows without a baseline: the median of
//! their own figure), so ours, the baselines, the floor and the verdict shown all come from
//! one run, measured interleaved as always. Its spread is the lowest and highest of that
//! ratio over all runs.

use std::fmt::Write as _;

use serde_json::{Value, json};

use crate::report::Row;

/// One row over the runs.
#[derive(Clone, Debug)]
pub(crate) struct Summary {
    /// The row of its median run.
    pub(crate) row: Row,
    /// What the spread is taken of, per run that measured it: the ratio to the first
    /// baseline, or the row's own figure when it has no baseline.
    pub(crate) runs: Vec<f64>,
    /// Whether `runs` holds ratios (`×`) or the row's own figures.
    pub(crate) of_ratio: bool,
    /// The ratio to the floor, per run that measured it.
    pub(crate) floor_runs: Vec<f64>,
}

impl Summary {
    /// The spread cell: `0.95–1.02× (3 runs)`, or `1 run`.
    pub(crate) fn spread(&self) -> String {
        let n = self.runs.len();
        if n < 2 {
            return format!("{n} run{}", if n == 1 { "" } else { "s" });
        }
        let lo = self.runs.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = self.runs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        if self.of_ratio {
            format!("{lo:.2}–{hi:.2}× ({n} runs)")
        } else {
            format!("{lo:.3}–{hi:.3} ({n} runs)")
        }
    }
}

/// The value a row's runs are ordered and spread by.
fn key(row: &Row) -> Option<(f64, bool)> {
    if let Some(r) = row.first_ratio() {
        return Some((r, true));
    }
    row.ours.as_ref().ok().map(|f| (f.value, false))
}

/// Groups the rows of several runs by row number and name (in the order they first
/// appear) and keeps each one's median run.
pub(crate) fn summarise(runs: Vec<Vec<Row>>) -> Vec<Summary> {
    let mut groups: Vec<Vec<Row>> = Vec::new();
    for run in runs {
        for row in run {
            match groups
                .iter_mut()
                .find(|g| g[0].number == row.number && g[0].name == row.name)
            {
                Some(group) => group.push(row),
                None => groups.push(vec![row]),
            }
        }
    }
    groups
        .into_iter()
        .map(|mut rows| {
            let of_ratio = rows.iter().any(|r| r.first_ratio().is_some());
            let keyed = |r: &Row| key(r).filter(|(_, ratio)| *ratio == of_ratio).map(|(v, _)| v);
            let runs: Vec<f64> = rows.iter().filter_map(keyed).collect();
            let floor_runs: Vec<f64> = rows.iter().filter_map(Row::ratio_to_floor).collect();
            // The median run: the lower middle of the measured runs (a run that could not
            // measure the row is only chosen when none could).
            let mut order: Vec<usize> = (0..rows.len()).filter(|&i| keyed(&rows[i]).is_some()).collect();
            order.sort_by(|&a, &b| {
                keyed(&rows[a])
                    .unwrap_or(0.0)
                    .total_cmp(&keyed(&rows[b]).unwrap_or(0.0))
            });
            let pick = if order.is_empty() {
                0
            } else {
                order[(order.len() - 1) / 2]
            };
            Summary {
                row: rows.swap_remove(pick),
                runs,
                of_ratio,
                floor_runs,
            }
        })
        .collect()
}

const HEADERS: [&str; 9] = [
    "row",
    "ours",
    "baseline(s)",
    "ratio(s)",
    "floor",
    "× floor",
    "target",
    "met",
    "spread over the runs",
];

/// The report as Markdown: `intro`, then one line per row (its median run and its spread),
/// then the notes.
pub(crate) fn markdown(intro: &str, summaries: &[Summary]) -> String {
    let mut out = format!(
        "{intro}\n\n| {} |\n|{}\n",
        HEADERS.join(" | "),
        "---|".repeat(HEADERS.len())
    );
    for s in summaries {
        let mut cells: Vec<String> = s.row.cells().into_iter().collect();
        cells.push(s.spread());
        let cells: Vec<String> = cells.iter().map(|c| c.replace('|', "\\|")).collect();
        let _ = writeln!(out, "| {} |", cells.join(" | "));
    }
    out.push('\n');
    let rows: Vec<Row> = summaries.iter().map(|s| s.row.clone()).collect();
    crate::report::notes(&mut out, &rows);
    out
}

/// The report as JSON: `header`, then each row's median run with every run's ratios.
pub(crate) fn json(header: Value, runs: usize, summaries: &[Summary]) -> Value {
    let mut report = header;
    report["runs"] = json!(runs);
    report["rows"] = Value::Array(
        summaries
            .iter()
            .map(|s| {
                let mut row = s.row.to_json();
                row["spread_of"] = json!(if s.of_ratio {
                    "ratio to the first baseline"
                } else {
                    "figure"
                });
                row["runs"] = json!(s.runs);
                row["floor_runs"] = json!(s.floor_runs);
                row
            })
            .collect(),
    );
    report
}

/// A row of a JSON report: number, name, first ratio, ratio to floor, met, lower-is-better.
struct Seen {
    label: String,
    ratio: Option<f64>,
    to_floor: Option<f64>,
    met: Option<bool>,
    lower_is_better: bool,
    spread: Option<(f64, f64)>,
}

fn seen(report: &Value) -> Result<Vec<Seen>, String> {
    let rows = report["rows"]
        .as_array()
        .ok_or("not an envrt-bench report: it has no \"rows\" list")?;
    Ok(rows
        .iter()
        .map(|r| {
            let unit = r["ours"]["unit"]
                .as_str()
                .or_else(|| r["baselines"][0]["unit"].as_str())
                .unwrap_or("ms");
            let runs: Vec<f64> = if r["spread_of"] == json!("ratio to the first baseline") {
                r["runs"]
                    .as_array()
                    .map(|a| a.iter().filter_map(Value::as_f64).collect())
                    .unwrap_or_default()
            } else {
                Vec::new()
            };
            let spread = (runs.len() > 1).then(|| {
                (
                    runs.iter().copied().fold(f64::INFINITY, f64::min),
                    runs.iter().copied().fold(f64::NEG_INFINITY, f64::max),
                )
            });
            Seen {
                label: format!("{} {}", r["number"], r["name"].as_str().unwrap_or("?")),
                ratio: r["ratios"][0].as_f64(),
                to_floor: r["ratio_to_floor"].as_f64(),
                met: r["met"].as_bool(),
                lower_is_better: matches!(unit, "ms" | "KiB"),
                spread,
            }
        })
        .collect())
}

/// What moved between two reports, row by row: the ratio to the first baseline before and
/// now, the ratio to the floor, the verdicts, and whether the change is beyond 10 % and
/// outside the old spread (`better` / `worse`) or not (`same`).
pub(crate) fn compare(old: &Value, new: &Value) -> Result<String, String> {
    let (old, new) = (seen(old)?, seen(new)?);
    let fmt = |r: Option<f64>| r.map(|r| format!("{r:.2}×")).unwrap_or_else(|| "—".into());
    let met = |m: Option<bool>| match m {
        Some(true) => "yes",
        Some(false) => "NO",
        None => "—",
    };
    let mut out = String::from(
        "| row | ratio before | ratio now | × floor before | × floor now | met before → now | moved |\n|---|---|---|---|---|---|---|\n",
    );
    for n in &new {
        let Some(o) = old.iter().find(|o| o.label == n.label) else {
            let _ = writeln!(
                out,
                "| {} | — | {} | — | {} | — → {} | new row |",
                n.label,
                fmt(n.ratio),
                fmt(n.to_floor),
                met(n.met)
            );
            continue;
        };
        let moved = match (o.ratio, n.ratio) {
            (Some(a), Some(b)) if a > 0.0 => {
                let within = o.spread.is_some_and(|(lo, hi)| b >= lo && b <= hi);
                if (b / a - 1.0).abs() <= 0.10 || within {
                    "same".to_owned()
                } else {
                    let better = (b < a) == n.lower_is_better;
                    format!(
                        "{} ({:+.0} %)",
                        if better { "better" } else { "worse" },
                        (b / a - 1.0) * 100.0
                    )
                }
            }
            _ => "—".to_owned(),
        };
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} → {} | {moved} |",
            n.label,
            fmt(o.ratio),
            fmt(n.ratio),
            fmt(o.to_floor),
            fmt(n.to_floor),
            met(o.met),
            met(n.met)
        );
    }
    for o in old.iter().filter(|o| !new.iter().any(|n| n.label == o.label)) {
        let _ = writeln!(
            out,
            "| {} | {} | — | — | — | {} → — | gone |",
            o.label,
            fmt(o.ratio),
            met(o.met)
        );
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::{Figure, Target};

    fn run(ours: f64, base: f64) -> Row {
        Row::new("g", 1, "r", Figure::ms(ours))
            .baseline("bare", Figure::ms(base))
            .floor("floor", Figure::ms(base / 2.0))
            .target(Target::RatioAtMost(0, 1.1))
    }

    #[test]
    fn the_median_run_is_kept_and_the_spread_covers_every_run() {
        let runs = vec![
            vec![run(1.5, 1.0), Row::new("g", 2, "kib", Figure::kib(3.0))],
            vec![run(1.05, 1.0), Row::new("g", 2, "kib", Figure::kib(1.0))],
            vec![run(2.0, 1.0), Row::missing("g", 2, "kib", "n/a (no engine)")],
        ];
        let s = summarise(runs);
        assert_eq!(s.len(), 2);
        assert_eq!(s[0].row.first_ratio(), Some(1.5));
        assert_eq!(s[0].spread(), "1.05–2.00× (3 runs)");
        assert_eq!(s[0].floor_runs, [3.0, 2.1, 4.0]);
        assert_eq!(s[1].row.ours.as_ref().unwrap().value, 1.0);
        assert_eq!(s[1].spread(), "1.000–3.000 (2 runs)");
        let md = markdown("Measured now.", &s);
        let lines: Vec<&str> = md.lines().collect();
        assert_eq!(lines[0], "Measured now.");
        assert_eq!(lines[4].matches(" | ").count(), 8, "{md}");
        assert!(lines[4].ends_with("| 1.05–2.00× (3 runs) |"), "{md}");
        assert!(lines[4].contains("| floor 0.500 ms | 3.00× |"), "{md}");
        let only = summarise(vec![vec![Row::missing("g", 3, "x", "n/a")]]);
        assert_eq!(only[0].spread(), "0 runs");
    }

    #[test]
    fn compare_says_what_moved_and_refuses_what_is_not_a_report() {
        let report = |rows: Vec<Vec<Row>>| json(json!({}), rows.len(), &summarise(rows));
        let old = report(vec![vec![run(1.0, 1.0), Row::new("g", 4, "old", Figure::ms(1.0))]; 3]);
        let new = report(vec![vec![
            run(1.5, 1.0),
            Row::new("g", 5, "fresh", Figure::gbps(1.0)).baseline("pipe", Figure::gbps(1.0)),
        ]]);
        let text = compare(&old, &new).unwrap();
        assert!(
            text.contains("| 1 r | 1.00× | 1.50× | 2.00× | 3.00× | yes → NO | worse (+50 %) |"),
            "{text}"
        );
        assert!(
            text.contains("| 5 fresh | — | 1.00× | — | — | — → — | new row |"),
            "{text}"
        );
        assert!(text.contains("| 4 old | — | — | — | — | — → — | gone |"), "{text}");
        let same = compare(&old, &old).unwrap();
        assert!(
            same.contains("| 1 r | 1.00× | 1.00× | 2.00× | 2.00× | yes → yes | same |"),
            "{same}"
        );
        assert_eq!(
            compare(&json!({"date": "x"}), &new).unwrap_err(),
            "not an envrt-bench report: it has no \"rows\" list"
        );
    }
}
