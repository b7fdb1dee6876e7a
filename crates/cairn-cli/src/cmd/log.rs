//! `cairn log`: the raw records of a session, from the header on (or from
//! `--from SEQ`), pretty, or with `--json` as the stored JSON lines verbatim.
//! A `--from` past the end prints nothing, so scripts can poll with it.

use anyhow::Result;
use cairn::Access;
use serde_json::Value;

use super::Status;
use crate::args::SessionArg;
use crate::shapes;
use crate::target::{self, Ctx};
use crate::term::Style;

/// Runs `cairn log`.
///
/// # Errors
///
/// Opening or reading the session, or writing output (a broken pipe ends
/// the command quietly).
pub fn run(ctx: &Ctx, arg: &SessionArg, from: u64, json: bool) -> Result<Status> {
    let (_, session) = target::open(ctx, &target::spec(arg)?, Access::Read)?;
    let mut out = ctx.out();
    for seq in from..session.len() {
        let raw = session.raw_record(seq)?;
        if json {
            out.json_line(&String::from_utf8_lossy(&raw))?;
            continue;
        }
        let rec = shapes::record(&raw)?;
        let kind = rec.get("kind").and_then(Value::as_str).unwrap_or("?");
        let ts = rec.get("ts").and_then(Value::as_str).unwrap_or("?");
        let place = match (rec.get("id").and_then(Value::as_str), rec.get("parent")) {
            (Some(id), Some(Value::String(p))) => format!("  {id} ← {p}"),
            (Some(id), _) => format!("  {id} (root)"),
            _ => String::new(),
        };
        let ignorable = if rec.get("ignorable").and_then(Value::as_bool) == Some(true) {
            " (ignorable)"
        } else {
            ""
        };
        out.spans(&[
            (Style::Bold, &format!("#{seq}")),
            (Style::Dim, &format!("  {ts}  ")),
            (Style::Tool, kind),
            (Style::Dim, ignorable),
            (Style::Plain, &place),
        ])?;
        let data = rec.get("data").cloned().unwrap_or(Value::Null);
        let pretty = serde_json::to_string_pretty(&data)?;
        for line in pretty.lines() {
            out.line(&format!("    {line}"))?;
        }
    }
    out.flush()?;
    Ok(Status::Ok)
}
