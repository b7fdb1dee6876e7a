//! `cairn append`: records as JSON lines on stdin, one acknowledgement line
//! per record on stdout. This is how programs in any language write sessions.
//!
//! An input record is `{"kind": K, "data": D}` plus optional `"id"`,
//! `"parent"` and `"ignorable"`, decoded by the library (`cairn::decode_input`,
//! whose `data` goes through `cairn::decode_data`, the decoder that reads
//! logs), so the CLI accepts exactly what the format defines.

use std::io::{BufRead, Write};

use anyhow::{Context as _, Result, anyhow};
use cairn::{Access, Appended, Durability, InputParent, InputRecord, Session, StoreError};

use super::Status;
use crate::args::{DurabilityArg, SessionArg};
use crate::target::{self, Ctx};

/// Runs `cairn append`.
///
/// # Errors
///
/// Opening the session for writing; the first invalid input line (after
/// every record before it was appended); I/O errors.
pub fn run(ctx: &Ctx, arg: &SessionArg, durability: DurabilityArg) -> Result<Status> {
    let spec = target::spec(arg)?;
    let (_, session) = target::open(ctx, &spec, Access::Write)?;
    session.set_durability(match durability {
        DurabilityArg::Sync => Durability::Sync,
        DurabilityArg::Group => Durability::Group,
        DurabilityArg::Buffered => Durability::Buffered,
    });
    let result = pump(&session);
    // Buffered acknowledgements promise the OS has the records; make them
    // durable before leaving, whether the input ended or failed.
    let synced = if durability == DurabilityArg::Buffered {
        session.sync()
    } else {
        Ok(())
    };
    let appended = result?;
    synced.with_context(|| format!("cannot sync the {appended} records appended"))?;
    Ok(Status::Ok)
}

/// Appends every input line; returns how many records were appended.
fn pump(session: &Session) -> Result<u64> {
    let stdin = std::io::stdin();
    let mut input = stdin.lock();
    let mut stdout = std::io::stdout().lock();
    let mut buf = Vec::new();
    let mut line_no = 0u64;
    let mut appended = 0u64;
    loop {
        buf.clear();
        if input
            .read_until(b'\n', &mut buf)
            .context("cannot read stdin")?
            == 0
        {
            return Ok(appended);
        }
        line_no += 1;
        let text = std::str::from_utf8(&buf).map_err(|e| anyhow!("not UTF-8 ({e})"));
        let result = text.and_then(|t| {
            let t = t.trim();
            if t.is_empty() {
                return Ok(None);
            }
            append(session, t).map(Some)
        });
        let done = result.with_context(|| {
            let kept = match appended {
                0 => "nothing was appended".to_owned(),
                1 => "the record before it stays appended".to_owned(),
                n => format!("the {n} records before it stay appended"),
            };
            format!("stdin line {line_no} ({kept})")
        })?;
        if let Some(done) = done {
            appended += 1;
            let ack = serde_json::to_string(&cairn_view::shapes::Ack::of(&done))?;
            writeln!(stdout, "{ack}")?;
            stdout.flush()?;
        }
    }
}

/// Appends one input line ([`cairn::decode_input`], then
/// [`Session::append_input`], which resolves its parent); a parent that
/// does not resolve is named in the error.
fn append(session: &Session, line: &str) -> Result<Appended> {
    let input = cairn::decode_input(line)?;
    let parent = match &input {
        InputRecord::Entry {
            parent: InputParent::Reference(q),
            ..
        } => Some(q.clone()),
        InputRecord::Entry { .. } | InputRecord::Op(_) => None,
    };
    session.append_input(input).map_err(|e| match (e, parent) {
        (StoreError::Lookup(e), Some(q)) => anyhow::Error::new(e).context(format!("parent {q:?}")),
        (e, _) => e.into(),
    })
}
