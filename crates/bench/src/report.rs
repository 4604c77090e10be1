//! Rows, figures, targets, and their rendering as one text table and as JSON.

use std::fmt::Write as _;

use serde_json::{Value, json};

/// The unit of a figure, which also says which direction is better.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Unit {
    /// Milliseconds (lower is better).
    Ms,
    /// Gigabytes (10^9 bytes) per second (higher is better).
    GBps,
    /// Mebibytes (2^20 bytes) per second (higher is better).
    MiBps,
    /// Operations per second (higher is better).
    OpsPerSec,
    /// Kibibytes (lower is better).
    KiB,
}

impl Unit {
    fn label(self) -> &'static str {
        match self {
            Unit::Ms => "ms",
            Unit::GBps => "GB/s",
            Unit::MiBps => "MiB/s",
            Unit::OpsPerSec => "ops/s",
            Unit::KiB => "KiB",
        }
    }

    fn format(self, value: f64) -> String {
        let digits = match self {
            Unit::Ms if value < 10.0 => 3,
            Unit::Ms => 1,
            Unit::GBps => 2,
            Unit::MiBps => 0,
            Unit::OpsPerSec => 0,
            Unit::KiB => 1,
        };
        format!("{value:.digits$} {}", self.label())
    }
}

/// One measured figure.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Figure {
    pub(crate) value: f64,
    pub(crate) unit: Unit,
}

impl Figure {
    pub(crate) fn ms(value: f64) -> Self {
        Figure { value, unit: Unit::Ms }
    }
    pub(crate) fn gbps(value: f64) -> Self {
        Figure {
            value,
            unit: Unit::GBps,
        }
    }
    pub(crate) fn mibps(value: f64) -> Self {
        Figure {
            value,
            unit: Unit::MiBps,
        }
    }
    pub(crate) fn ops(value: f64) -> Self {
        Figure {
            value,
            unit: Unit::OpsPerSec,
        }
    }
    pub(crate) fn kib(value: f64) -> Self {
        Figure { value, unit: Unit::KiB }
    }
}

impl std::fmt::Display for Figure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.unit.format(self.value))
    }
}

/// What a row should reach. Ratios are always ours ÷ baseline.
#[derive(Clone, Debug)]
pub(crate) enum Target {
    /// Informational row.
    None,
    /// ours ÷ baselines\[i\] ≤ max.
    RatioAtMost(usize, f64),
    /// ours ÷ baselines\[i\] ≥ min.
    RatioAtLeast(usize, f64),
    /// ours ≤ baselines\[i\] + plus (same unit).
    PlusAtMost(usize, f64),
    /// ours ≤ max (same unit).
    AtMost(f64),
    /// Every one of these.
    All(Vec<Target>),
}

impl Target {
    fn describe(&self, row: &Row) -> String {
        let name = |i: &usize| row.baselines.get(*i).map(|b| b.0.as_str()).unwrap_or("?");
        match self {
            Target::None => "—".into(),
            Target::RatioAtMost(i, max) => format!("≤ {max:.2}× {}", name(i)),
            Target::RatioAtLeast(i, min) => format!("≥ {min:.2}× {}", name(i)),
            Target::PlusAtMost(i, plus) => format!("≤ {} + {}", name(i), row.unit().format(*plus)),
            Target::AtMost(max) => format!("≤ {}", row.unit().format(*max)),
            Target::All(all) => all.iter().map(|t| t.describe(row)).collect::<Vec<_>>().join(" and "),
        }
    }

    fn met(&self, ours: f64, row: &Row) -> Option<bool> {
        let base = |i: &usize| row.baselines.get(*i).map(|b| b.1.value);
        match self {
            Target::None => None,
            Target::RatioAtMost(i, max) => base(i).map(|b| ours / b <= *max),
            Target::RatioAtLeast(i, min) => base(i).map(|b| ours / b >= *min),
            Target::PlusAtMost(i, plus) => base(i).map(|b| ours <= b + plus),
            Target::AtMost(max) => Some(ours <= *max),
            Target::All(all) => {
                let each: Option<Vec<bool>> = all.iter().map(|t| t.met(ours, row)).collect();
                each.map(|v| v.iter().all(|m| *m))
            }
        }
    }
}

/// One line of the table.
#[derive(Clone, Debug)]
pub(crate) struct Row {
    /// The group key `--only` selects by (`exec-local`, `sync`, ...).
    pub(crate) group: &'static str,
    /// The row number (1–11; 8 is the warm-pool rows, 9 the peers, 10 the process sessions,
    /// 11 the agent-shaped workloads).
    pub(crate) number: u8,
    /// What is measured.
    pub(crate) name: String,
    /// Our figure, or why there is none (`n/a (driver missing)`).
    pub(crate) ours: Result<Figure, String>,
    /// Baselines measured in the same run: name and figure.
    pub(crate) baselines: Vec<(String, Figure)>,
    /// The target.
    pub(crate) target: Target,
    /// A short remark printed under the table (how it was measured, a caveat).
    pub(crate) note: Option<String>,
    /// The floor: the least the same work can cost on this machine (a bare spawn, `nsenter`,
    /// bare `bwrap`, a command over the open master, `cp -a`, a pipe into a preallocated
    /// buffer), measured in the same run; `Err` says why there is none.
    pub(crate) floor: Option<Result<(String, Figure), String>>,
}

impl Row {
    /// A row with a figure.
    pub(crate) fn new(group: &'static str, number: u8, name: impl Into<String>, ours: Figure) -> Self {
        Row {
            group,
            number,
            name: name.into(),
            ours: Ok(ours),
            baselines: Vec::new(),
            target: Target::None,
            note: None,
            floor: None,
        }
    }

    /// A row that could not be measured.
    pub(crate) fn missing(group: &'static str, number: u8, name: impl Into<String>, why: impl Into<String>) -> Self {
        Row {
            group,
            number,
            name: name.into(),
            ours: Err(why.into()),
            baselines: Vec::new(),
            target: Target::None,
            note: None,
            floor: None,
        }
    }

    pub(crate) fn baseline(mut self, name: impl Into<String>, figure: Figure) -> Self {
        self.baselines.push((name.into(), figure));
        self
    }

    /// The row's floor, measured in the same run (see [`Row::floor`]).
    pub(crate) fn floor(mut self, name: impl Into<String>, figure: Figure) -> Self {
        self.floor = Some(Ok((name.into(), figure)));
        self
    }

    /// The row's floor is its baseline `i` (already measured beside it). A row naming a
    /// baseline it does not have gets no floor, and the table says so.
    pub(crate) fn floor_is(mut self, i: usize) -> Self {
        self.floor = Some(
            self.baselines
                .get(i)
                .cloned()
                .ok_or_else(|| format!("no baseline {i} to be the floor")),
        );
        self
    }

    /// Why the row has no floor (the table prints it in the floor's cell).
    pub(crate) fn no_floor(mut self, why: impl Into<String>) -> Self {
        self.floor = Some(Err(why.into()));
        self
    }

    pub(crate) fn target(mut self, target: Target) -> Self {
        self.target = target;
        self
    }

    pub(crate) fn note(mut self, note: impl Into<String>) -> Self {
        self.note = Some(note.into());
        self
    }

    fn unit(&self) -> Unit {
        match &self.ours {
            Ok(f) => f.unit,
            Err(_) => self.baselines.first().map(|b| b.1.unit).unwrap_or(Unit::Ms),
        }
    }

    /// ours ÷ each baseline.
    fn ratios(&self) -> Vec<Option<f64>> {
        self.baselines
            .iter()
            .map(|(_, b)| match &self.ours {
                Ok(ours) if b.value > 0.0 => Some(ours.value / b.value),
                _ => None,
            })
            .collect()
    }

    /// ours ÷ the floor; `None` without a figure or a floor.
    pub(crate) fn ratio_to_floor(&self) -> Option<f64> {
        match (&self.ours, &self.floor) {
            (Ok(ours), Some(Ok((_, f)))) if f.value > 0.0 => Some(ours.value / f.value),
            _ => None,
        }
    }

    /// ours ÷ the first baseline: the ratio a row's spread over runs is taken of.
    pub(crate) fn first_ratio(&self) -> Option<f64> {
        self.ratios().first().copied().flatten()
    }

    /// Whether the target is met; `None` when there is no target or no figure.
    pub(crate) fn met(&self) -> Option<bool> {
        match &self.ours {
            Ok(ours) => self.target.met(ours.value, self),
            Err(_) => None,
        }
    }

    pub(crate) fn cells(&self) -> [String; 8] {
        let ours = match &self.ours {
            Ok(f) => f.to_string(),
            Err(why) => why.clone(),
        };
        let baselines = self
            .baselines
            .iter()
            .map(|(n, f)| format!("{n} {f}"))
            .collect::<Vec<_>>()
            .join("; ");
        let ratios = self
            .ratios()
            .iter()
            .zip(&self.baselines)
            .map(|(r, (n, _))| match r {
                Some(r) => format!("{r:.2}× {n}"),
                None => format!("— {n}"),
            })
            .collect::<Vec<_>>()
            .join("; ");
        let met = match self.met() {
            Some(true) => "yes",
            Some(false) => "NO",
            None => "—",
        };
        let floor = match &self.floor {
            Some(Ok((n, f))) => format!("{n} {f}"),
            Some(Err(why)) => format!("none: {why}"),
            None => "—".into(),
        };
        let to_floor = match self.ratio_to_floor() {
            Some(r) => format!("{r:.2}×"),
            None => "—".into(),
        };
        [
            format!("{} {}", self.number, self.name),
            ours,
            if baselines.is_empty() { "—".into() } else { baselines },
            if ratios.is_empty() { "—".into() } else { ratios },
            floor,
            to_floor,
            self.target.describe(self),
            met.into(),
        ]
    }

    pub(crate) fn to_json(&self) -> Value {
        let figure = |f: &Figure| json!({"value": f.value, "unit": f.unit.label()});
        json!({
            "group": self.group,
            "number": self.number,
            "name": self.name,
            "ours": match &self.ours { Ok(f) => figure(f), Err(_) => Value::Null },
            "unavailable": match &self.ours { Ok(_) => Value::Null, Err(why) => json!(why) },
            "baselines": self.baselines.iter().map(|(n, f)| {
                let mut b = figure(f);
                b["name"] = json!(n);
                b
            }).collect::<Vec<_>>(),
            "ratios": self.ratios(),
            "floor": match &self.floor {
                Some(Ok((n, f))) => { let mut b = figure(f); b["name"] = json!(n); b }
                Some(Err(why)) => json!({"unavailable": why}),
                None => Value::Null,
            },
            "ratio_to_floor": self.ratio_to_floor(),
            "target": self.target.describe(self),
            "met": self.met(),
            "note": self.note,
        })
    }
}

const HEADERS: [&str; 8] = [
    "row",
    "ours",
    "baseline(s)",
    "ratio(s)",
    "floor",
    "× floor",
    "target",
    "met",
];

/// The rows as a plain-text table (columns padded), with the notes below.
pub(crate) fn text_table(rows: &[Row]) -> String {
    let cells: Vec<[String; 8]> = rows.iter().map(Row::cells).collect();
    let mut widths = HEADERS.map(|h| h.chars().count());
    for row in &cells {
        for (w, c) in widths.iter_mut().zip(row) {
            *w = (*w).max(c.chars().count());
        }
    }
    let mut out = String::new();
    let line = |out: &mut String, row: &[String]| {
        let padded: Vec<String> = row
            .iter()
            .zip(widths)
            .map(|(c, w)| format!("{c}{}", " ".repeat(w - c.chars().count())))
            .collect();
        let _ = writeln!(out, "{}", padded.join(" | ").trim_end());
    };
    line(&mut out, &HEADERS.map(String::from));
    line(&mut out, &widths.map(|w| "-".repeat(w)));
    for row in &cells {
        line(&mut out, row);
    }
    notes(&mut out, rows);
    out
}

/// The rows as a Markdown table, with the notes below.
pub(crate) fn markdown_table(rows: &[Row]) -> String {
    let mut out = format!("| {} |\n|{}\n", HEADERS.join(" | "), "---|".repeat(HEADERS.len()));
    for row in rows {
        let cells = row.cells().map(|c| c.replace('|', "\\|"));
        let _ = writeln!(out, "| {} |", cells.join(" | "));
    }
    out.push('\n');
    notes(&mut out, rows);
    out
}

pub(crate) fn notes(out: &mut String, rows: &[Row]) {
    for row in rows {
        if let Some(note) = &row.note {
            let _ = writeln!(out, "- {} {}: {note}", row.number, row.name);
        }
    }
}

/// The whole report as JSON.
pub(crate) fn json_report(rows: &[Row], header: Value) -> Value {
    let mut report = header;
    report["rows"] = Value::Array(rows.iter().map(Row::to_json).collect());
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(ours: Figure) -> Row {
        Row::new("g", 1, "r", ours)
    }

    #[test]
    fn ratio_targets_use_ours_over_the_named_baseline() {
        let r = row(Figure::ms(1.1))
            .baseline("a", Figure::ms(1.0))
            .baseline("b", Figure::ms(2.0));
        assert!(r.clone().target(Target::RatioAtMost(0, 1.10)).met().unwrap());
        assert!(!r.clone().target(Target::RatioAtMost(0, 1.05)).met().unwrap());
        assert!(r.clone().target(Target::RatioAtMost(1, 0.75)).met().unwrap());
        let both = Target::All(vec![Target::RatioAtMost(0, 1.05), Target::RatioAtMost(1, 0.75)]);
        assert!(!r.clone().target(both).met().unwrap());
        assert_eq!(r.target(Target::None).met(), None);
    }

    #[test]
    fn throughput_additive_and_absolute_targets() {
        let t = row(Figure::gbps(0.8)).baseline("pipe", Figure::gbps(1.0));
        assert!(t.clone().target(Target::RatioAtLeast(0, 0.8)).met().unwrap());
        assert!(!t.target(Target::RatioAtLeast(0, 0.81)).met().unwrap());
        assert_eq!(Figure::mibps(1234.4).to_string(), "1234 MiB/s");
        let s = row(Figure::ms(6.4)).baseline("bwrap", Figure::ms(5.0));
        assert!(s.clone().target(Target::PlusAtMost(0, 1.5)).met().unwrap());
        assert!(!s.target(Target::PlusAtMost(0, 1.3)).met().unwrap());
        assert!(row(Figure::kib(64.0)).target(Target::AtMost(64.0)).met().unwrap());
        assert!(!row(Figure::kib(64.1)).target(Target::AtMost(64.0)).met().unwrap());
        // A target naming a baseline that was not measured cannot be met or missed.
        assert_eq!(row(Figure::ms(1.0)).target(Target::RatioAtMost(3, 1.0)).met(), None);
    }

    #[test]
    fn a_missing_row_has_no_verdict_and_says_why() {
        let r = Row::missing("exec-docker", 2, "docker execute", "n/a (no engine)").target(Target::AtMost(1.0));
        assert_eq!(r.met(), None);
        let cells = r.cells();
        assert_eq!(cells[1], "n/a (no engine)");
        assert_eq!(cells[4], "—");
        assert_eq!(cells[7], "—");
    }

    #[test]
    fn tables_render_every_row_with_ratios() {
        let rows = vec![
            row(Figure::ms(1.5))
                .baseline("bare", Figure::ms(1.0))
                .target(Target::RatioAtMost(0, 1.1))
                .note("a note"),
        ];
        let text = text_table(&rows);
        assert!(text.contains("1.50× bare"), "{text}");
        assert!(text.contains("| NO"), "{text}");
        assert!(text.contains("- 1 r: a note"), "{text}");
        let md = markdown_table(&rows);
        let lines: Vec<&str> = md.lines().collect();
        assert_eq!(lines[1], "|---|---|---|---|---|---|---|---|");
        assert_eq!(lines[2].matches(" | ").count(), 7, "{md}");
        let json = json_report(&rows, json!({"date": "d"}));
        assert_eq!(json["rows"][0]["ratios"][0], json!(1.5));
        assert_eq!(json["rows"][0]["met"], json!(false));
        assert_eq!(json["date"], json!("d"));
    }

    #[test]
    fn a_floor_shows_beside_the_baselines_with_its_ratio() {
        let r = row(Figure::ms(3.0))
            .baseline("bare", Figure::ms(2.0))
            .floor("posix_spawn", Figure::ms(1.5));
        assert_eq!(r.ratio_to_floor(), Some(2.0));
        let cells = r.cells();
        assert_eq!(cells[4], "posix_spawn 1.500 ms");
        assert_eq!(cells[5], "2.00×");
        let same = row(Figure::gbps(1.0)).baseline("pipe", Figure::gbps(2.0)).floor_is(0);
        assert_eq!(same.cells()[4], "pipe 2.00 GB/s");
        assert_eq!(same.ratio_to_floor(), Some(0.5));
        let none = row(Figure::ms(1.0)).floor_is(2);
        assert_eq!(none.cells()[4], "none: no baseline 2 to be the floor");
        assert_eq!(none.ratio_to_floor(), None);
        let why = row(Figure::ms(1.0)).no_floor("the peer runs its own loop");
        assert_eq!(why.cells()[4], "none: the peer runs its own loop");
        let json = json_report(&[r, why], json!({}));
        assert_eq!(json["rows"][0]["floor"]["name"], json!("posix_spawn"));
        assert_eq!(json["rows"][0]["ratio_to_floor"], json!(2.0));
        assert_eq!(
            json["rows"][1]["floor"]["unavailable"],
            json!("the peer runs its own loop")
        );
    }
}
