//! `cairn append`: records as JSON lines on stdin, one acknowledgement line
//! per record on stdout. This is how programs in any language write sessions.
//!
//! An input record is `{"kind": K, "data": D}` plus optional `"id"`,
//! `"parent"` and `"ignorable"`. The data is decoded by the library's record
//! decoder (`cairn::decode_data`, the one that reads logs), so the CLI
//! accepts exactly what the format defines.

use std::io::{BufRead, Write};

use anyhow::{Context as _, Result, anyhow, bail};
use cairn::{
    Access, DecodeError, Durability, EntryBody, EntryId, EntryKind, NewEntry, OpKind, OpRecord,
    Parent, Payload, RecordKind, Session,
};
use serde::Deserialize;
use serde::de::Deserializer;
use serde_json::json;
use serde_json::value::RawValue;

use super::Status;
use crate::args::{DurabilityArg, SessionArg};
use crate::target::{self, Ctx};

/// One input line.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Input {
    kind: String,
    /// Kept as written: decoded once, by the library, so that nothing in
    /// it (an integer beyond 64 bits, a repeated member) changes on the way.
    data: Box<RawValue>,
    #[serde(default)]
    id: Option<String>,
    /// Absent: the leaf; `null`: a new root; a string: an entry reference.
    #[serde(default, deserialize_with = "present")]
    parent: Option<Option<String>>,
    #[serde(default)]
    ignorable: bool,
}

fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Option<String>>, D::Error> {
    Option::<String>::deserialize(d).map(Some)
}

/// What an input line decodes to.
enum Decoded {
    Entry(NewEntry),
    Op(OpRecord),
}

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
            let decoded = decode(session, t)?;
            let done = match decoded {
                Decoded::Entry(e) => session.append_entry(e)?,
                Decoded::Op(op) => session.append_op(op)?,
            };
            Ok(Some(done))
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
            let ack = json!({"seq": done.seq, "id": done.id});
            writeln!(stdout, "{ack}")?;
            stdout.flush()?;
        }
    }
}

/// Decodes one input line into an entry or an operation record.
fn decode(session: &Session, line: &str) -> Result<Decoded> {
    let input: Input = serde_json::from_str(line).context("not a valid input record")?;
    let kind = input.kind.as_str();
    let has_place = input.id.is_some() || input.parent.is_some();
    const NO_HEADER: &str = "a header is record 0, written by `cairn new`; it cannot be appended";
    if RecordKind::from_name(kind) == Some(RecordKind::Header) {
        bail!(NO_HEADER);
    }
    let body = match cairn::decode_data(kind, input.ignorable, input.data.get().as_bytes()) {
        Ok(Payload::Header(_)) => bail!(NO_HEADER),
        Ok(Payload::Entry(body)) => body,
        Ok(Payload::Op(_)) if has_place => {
            bail!("{kind:?} is an operation record: it takes no \"id\" or \"parent\"")
        }
        Ok(Payload::Op(op)) => return Ok(Decoded::Op(op)),
        // A kind of the host's own: an entry if it says where it goes in the tree.
        Ok(Payload::Unknown(u)) if has_place => EntryBody::Ignored(u),
        Ok(Payload::Unknown(u)) => return Ok(Decoded::Op(OpRecord::Ignored(u))),
        Err(DecodeError::UnknownKind(_)) => bail!(
            "unknown record kind {kind:?}: entry kinds are {}; operation kinds are {}; \
             a kind of your own needs \"ignorable\": true",
            EntryKind::ALL.map(EntryKind::name).join(", "),
            OpKind::ALL.map(OpKind::name).join(", ")
        ),
        Err(e) => return Err(e.into()),
    };
    let id = input.id.as_deref().map(EntryId::parse).transpose()?;
    let parent = match input.parent {
        None => Parent::Leaf,
        Some(None) => Parent::Root,
        Some(Some(q)) => Parent::Entry(
            session
                .resolve(&q)
                .with_context(|| format!("parent {q:?}"))?,
        ),
    };
    Ok(Decoded::Entry(NewEntry { id, parent, body }))
}
