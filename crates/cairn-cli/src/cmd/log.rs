//! `cairn log`: the raw records of a session, from the header on (or from
//! `--from SEQ`), pretty, or with `--json` as the stored JSON lines verbatim.
//! A `--from` past the end prints nothing, so scripts can poll with it.
//! Trace records (`cairn agent --trace`) are one line each, or, with
//! `--trace`, the whole exchange.

use anyhow::Result;
use cairn::Access;
use serde_json::Value;

use super::Status;
use crate::args::SessionArg;
use crate::target::{self, Ctx};
use crate::term::{Lines, Out, Style, clean};
use cairn_agent::trace::Traced;
use cairn_view::shapes;

/// Runs `cairn log`.
///
/// # Errors
///
/// Opening or reading the session, or writing output (a broken pipe ends
/// the command quietly).
pub fn run(ctx: &Ctx, arg: &SessionArg, from: u64, trace: bool, json: bool) -> Result<Status> {
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
        let data = rec.get("data").cloned().unwrap_or(Value::Null);
        let traced = (kind == cairn_agent::trace::KIND)
            .then(|| cairn_agent::trace::Traced::parse(&data))
            .flatten();
        let headline = traced.as_ref().map_or_else(String::new, |t| {
            format!("  {}", clean(&t.headline(), Lines::Flatten))
        });
        out.spans(&[
            (Style::Bold, &format!("#{seq}")),
            (Style::Dim, &format!("  {ts}  ")),
            (Style::Tool, kind),
            (Style::Dim, ignorable),
            (Style::Plain, &place),
            (Style::Plain, &headline),
        ])?;
        if let Some(t) = &traced {
            if trace {
                exchange(&mut out, t)?;
            }
            continue;
        }
        let pretty = serde_json::to_string_pretty(&data)?;
        for line in pretty.lines() {
            out.line(&format!("    {line}"))?;
        }
    }
    out.flush()?;
    Ok(Status::Ok)
}

/// A trace record whole: headers, bodies (as much as the record holds, and
/// where the rest is), the error.
fn exchange(out: &mut Out<'_>, t: &Traced) -> Result<()> {
    if let Some(ms) = t.headers_ms {
        out.line(&format!("    response headers after {ms} ms"))?;
    }
    for (title, headers, body) in [
        ("request", &t.request_headers, &t.request_body),
        ("response", &t.response_headers, &t.response_body),
    ] {
        out.put(Style::Dim, &format!("    {title}:"))?;
        out.nl()?;
        for (name, value) in headers {
            out.line(&format!(
                "      {}: {}",
                clean(name, Lines::Flatten),
                clean(value, Lines::Flatten)
            ))?;
        }
        let pretty = (body.blob.is_none())
            .then(|| serde_json::from_str::<Value>(&body.text).ok())
            .flatten()
            .and_then(|v| serde_json::to_string_pretty(&v).ok());
        let text = clean(pretty.as_deref().unwrap_or(&body.text), Lines::Keep);
        for line in text.lines() {
            out.line(&format!("      | {line}"))?;
        }
        if let Some(blob) = &body.blob {
            out.put(
                Style::Dim,
                &format!(
                    "      … cut at {} of {} bytes; the whole body is {}",
                    body.text.len(),
                    body.bytes,
                    clean(blob, Lines::Flatten)
                ),
            )?;
            out.nl()?;
        }
    }
    if let Some(e) = &t.error {
        out.put(
            Style::Warn,
            &format!("    error: {}", clean(e, Lines::Flatten)),
        )?;
        out.nl()?;
    }
    Ok(())
}
