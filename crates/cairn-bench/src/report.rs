//! Figures, their targets, and the report: a table for people and JSON for
//! tools. Every figure is a value measured together with its baseline in the
//! same run; the ratio is always `value / baseline`.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::{Context as _, Result};
use serde::Serialize;

use crate::machine::Machine;

/// What a figure's numbers count.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Unit {
    /// Records per second (higher is better).
    RecordsPerSec,
    /// Milliseconds.
    Millis,
    /// Microseconds.
    Micros,
    /// Bytes.
    Bytes,
}

impl Unit {
    /// `v` in this unit, for people.
    pub fn format(self, v: f64) -> String {
        match self {
            Unit::RecordsPerSec => format!("{} rec/s", thousands(v.round() as u64)),
            Unit::Millis if v < 10.0 => format!("{v:.2} ms"),
            Unit::Millis => format!("{} ms", thousands(v.round() as u64)),
            Unit::Micros => format!("{v:.2} µs"),
            Unit::Bytes if v >= 1024.0 * 1024.0 => format!("{:.1} MiB", v / 1024.0 / 1024.0),
            Unit::Bytes => format!("{} B", thousands(v.round() as u64)),
        }
    }
}

/// `n` with thousands separators.
pub fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::with_capacity(s.len() + s.len() / 3);
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A target for a ratio.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(tag = "op", content = "ratio", rename_all = "snake_case")]
pub enum Target {
    /// The ratio must be at least this.
    AtLeast(f64),
    /// The ratio must be at most this.
    AtMost(f64),
}

impl Target {
    fn met(self, ratio: f64) -> bool {
        match self {
            Target::AtLeast(t) => ratio >= t,
            Target::AtMost(t) => ratio <= t,
        }
    }

    fn show(self) -> String {
        match self {
            Target::AtLeast(t) => format!(">= {t}x"),
            Target::AtMost(t) => format!("<= {t}x"),
        }
    }
}

/// A measured figure and its baseline.
#[derive(Debug, Clone, Serialize)]
pub struct Figure {
    /// Stable key, for tools comparing runs.
    pub key: &'static str,
    /// What was measured, for people.
    pub name: String,
    /// Unit of `value` and `baseline`.
    pub unit: Unit,
    /// cairn's number.
    pub value: f64,
    /// What the baseline is.
    pub baseline_name: String,
    /// The baseline's number, measured in the same run.
    pub baseline: f64,
    /// `value / baseline`.
    pub ratio: f64,
    /// The target for the ratio (`None`: informational).
    pub target: Option<Target>,
    /// An absolute limit on `value` in its unit, if any (met when below).
    pub below: Option<f64>,
    /// Whether every target is met (`None`: informational).
    pub pass: Option<bool>,
    /// Set when the sizes were scaled down from the (quick mode).
    pub scaled: Option<String>,
    /// Anything a reader needs to interpret the numbers.
    pub notes: Vec<String>,
}

impl Figure {
    /// A figure compared with `baseline`; the pass verdict is computed from `target`.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        key: &'static str,
        name: impl Into<String>,
        unit: Unit,
        value: f64,
        baseline_name: impl Into<String>,
        baseline: f64,
        target: Option<Target>,
    ) -> Figure {
        let ratio = if baseline > 0.0 {
            value / baseline
        } else {
            f64::NAN
        };
        Figure {
            key,
            name: name.into(),
            unit,
            value,
            baseline_name: baseline_name.into(),
            baseline,
            ratio,
            target,
            below: None,
            pass: target.map(|t| t.met(ratio)),
            scaled: None,
            notes: Vec::new(),
        }
    }

    /// Adds an absolute limit: `value` must also be below `limit`.
    pub fn below(mut self, limit: f64) -> Figure {
        self.below = Some(limit);
        if let Some(p) = self.pass.as_mut() {
            *p &= self.value < limit;
        }
        self
    }

    /// Marks the figure as measured at scaled-down sizes.
    pub fn scaled(mut self, how: Option<String>) -> Figure {
        self.scaled = how;
        self
    }

    /// Adds a note.
    pub fn note(mut self, note: impl Into<String>) -> Figure {
        self.notes.push(note.into());
        self
    }

    fn target_text(&self) -> String {
        let mut t = self
            .target
            .map_or_else(|| "(info)".to_owned(), Target::show);
        if let Some(l) = self.below {
            t.push_str(&format!(", < {}", self.unit.format(l)));
        }
        t
    }

    fn verdict(&self) -> &'static str {
        match self.pass {
            Some(true) => "pass",
            Some(false) => "MISS",
            None => "-",
        }
    }
}

/// A whole run.
#[derive(Debug, Serialize)]
pub struct Report {
    /// `quick` or `full`.
    pub mode: &'static str,
    /// Whether sizes were scaled down from the issue's.
    pub scaled: bool,
    /// Where the numbers came from.
    pub machine: Machine,
    /// Wall-clock seconds the run took.
    pub seconds: f64,
    /// The figures, in order.
    pub figures: Vec<Figure>,
    /// Figures that failed with an error.
    pub errors: Vec<String>,
}

impl Report {
    /// The table and notes, for a terminal.
    pub fn table(&self) -> String {
        let mut out = String::new();
        let head = if self.scaled {
            "cairn-bench --quick: SCALED-DOWN sizes (see the `scaled` notes); the full run uses the issue's sizes"
        } else {
            "cairn-bench (full sizes)"
        };
        let _ = writeln!(out, "{head}");
        let _ = writeln!(out, "machine: {}", self.machine.summary());
        let _ = writeln!(out);
        let rows: Vec<[String; 7]> = self
            .figures
            .iter()
            .enumerate()
            .map(|(i, f)| {
                [
                    format!("{}", i + 1),
                    format!("{}{}", f.name, if f.scaled.is_some() { " *" } else { "" }),
                    f.unit.format(f.value),
                    f.unit.format(f.baseline),
                    format!("{:.2}x", f.ratio),
                    f.target_text(),
                    f.verdict().to_owned(),
                ]
            })
            .collect();
        let header = [
            "#", "figure", "cairn", "baseline", "ratio", "target", "result",
        ]
        .map(str::to_owned);
        let mut widths = [0usize; 7];
        for r in std::iter::once(&header).chain(rows.iter()) {
            for (w, c) in widths.iter_mut().zip(r.iter()) {
                *w = (*w).max(c.chars().count());
            }
        }
        for r in std::iter::once(&header).chain(rows.iter()) {
            let mut line = String::new();
            for (i, (c, w)) in r.iter().zip(widths).enumerate() {
                let pad = w - c.chars().count();
                // Numbers right-aligned, text left-aligned.
                if (2..=4).contains(&i) {
                    line.push_str(&" ".repeat(pad));
                    line.push_str(c);
                } else {
                    line.push_str(c);
                    line.push_str(&" ".repeat(pad));
                }
                line.push_str("  ");
            }
            let _ = writeln!(out, "{}", line.trim_end());
        }
        let _ = writeln!(out);
        for (i, f) in self.figures.iter().enumerate() {
            let _ = writeln!(out, "{:>2}. baseline: {}", i + 1, f.baseline_name);
            if let Some(s) = &f.scaled {
                let _ = writeln!(out, "    * scaled: {s}");
            }
            for n in &f.notes {
                let _ = writeln!(out, "    {n}");
            }
        }
        let (pass, miss) = self.figures.iter().fold((0, 0), |(p, m), f| match f.pass {
            Some(true) => (p + 1, m),
            Some(false) => (p, m + 1),
            None => (p, m),
        });
        let _ = writeln!(out);
        let _ = writeln!(
            out,
            "{pass} met, {miss} missed, {} informational, {} errors; {:.1} s",
            self.figures.len() - pass - miss,
            self.errors.len(),
            self.seconds
        );
        for e in &self.errors {
            let _ = writeln!(out, "error: {e}");
        }
        out
    }

    /// Writes the report as JSON to `path` (creating its directory).
    ///
    /// # Errors
    ///
    /// I/O errors.
    pub fn write_json(&self, path: &Path) -> Result<()> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
        let json = serde_json::to_vec_pretty(self)?;
        std::fs::write(path, json).with_context(|| format!("writing {}", path.display()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ratio_and_verdict_follow_the_target() {
        let f = Figure::new(
            "k",
            "n",
            Unit::Millis,
            30.0,
            "b",
            10.0,
            Some(Target::AtMost(3.0)),
        );
        assert_eq!(f.ratio, 3.0);
        assert_eq!(f.pass, Some(true));
        let f = f.below(20.0);
        assert_eq!(f.pass, Some(false));
        let g = Figure::new(
            "k",
            "n",
            Unit::RecordsPerSec,
            80.0,
            "b",
            100.0,
            Some(Target::AtLeast(0.85)),
        );
        assert_eq!(g.pass, Some(false));
        let i = Figure::new("k", "n", Unit::Bytes, 1.0, "b", 1.0, None);
        assert_eq!(i.pass, None);
    }

    #[test]
    fn thousands_are_separated() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1_000), "1,000");
        assert_eq!(thousands(1_234_567), "1,234,567");
    }
}
