//! `cairn export`: a session as a Markdown transcript, JSON, a
//! self-contained HTML page with the tree drawn as SVG, or a pi session file
//! (`cairn_import::export_pi`).

mod blocks;
mod html;
mod markdown;
mod svg;

use std::io::{BufWriter, Write};
use std::path::Path;

use anyhow::{Context as _, Result};
use cairn::{Access, Session, Store};
use serde::ser::{Error as _, Serialize, SerializeMap, SerializeSeq, Serializer};

use super::Status;
use crate::args::{Format, SessionArg};
use crate::target::{self, Ctx};
use crate::term::{Lines, clean};
use cairn_view::shapes;

/// Runs `cairn export`.
///
/// The export is written as it is rendered (a record, an entry or a tree
/// node at a time), so memory holds the tree's structure and one body, not
/// the whole session. To a file, a failed export removes what it wrote.
///
/// # Errors
///
/// Opening or reading the session, or writing the output.
pub fn run(ctx: &Ctx, arg: &SessionArg, format: Format, output: Option<&Path>) -> Result<Status> {
    let (store, session) = target::open(ctx, &target::spec(arg)?, Access::Read)?;
    match output {
        Some(path) => {
            let file = std::fs::File::create(path)
                .with_context(|| format!("cannot write {}", path.display()))?;
            let mut w = BufWriter::with_capacity(1 << 16, file);
            let written = write(&store, &session, format, &mut w, false)
                .and_then(|()| Ok(w.flush()?))
                .with_context(|| format!("cannot write {}", path.display()));
            if let Err(e) = written {
                drop(w);
                let _ = std::fs::remove_file(path);
                return Err(e);
            }
            let mut err = std::io::stderr().lock();
            let _ = writeln!(err, "wrote {}", path.display());
        }
        None => {
            // Markdown and HTML are text for people: keep control characters
            // from reaching a terminal. JSON escapes them itself.
            let clean = ctx.look.tty && matches!(format, Format::Md | Format::Html);
            let mut out = BufWriter::with_capacity(1 << 16, std::io::stdout().lock());
            write(&store, &session, format, &mut out, clean)?;
            out.flush()?;
        }
    }
    Ok(Status::Ok)
}

/// Writes the export of `session` in `format` to `w`; `clean`: Markdown and
/// HTML have their control characters neutralised (for a terminal).
fn write(
    store: &Store,
    session: &Session,
    format: Format,
    w: &mut dyn Write,
    clean: bool,
) -> Result<()> {
    match format {
        Format::Md => markdown::render(session, &mut Sink { w, clean }),
        Format::Html => html::render(session, &mut Sink { w, clean }),
        Format::Json => {
            serde_json::to_writer_pretty(&mut *w, &JsonExport { store, session })?;
            Ok(w.write_all(b"\n")?)
        }
        Format::Pi => Ok(cairn_import::export_pi(session, w)?),
    }
}

/// Where a Markdown or HTML export goes, a piece at a time: each piece (the
/// head, an entry, a tree node) is rendered into a string, handed to
/// [`Sink::emit`], written and cleared.
pub struct Sink<'a> {
    w: &'a mut dyn Write,
    clean: bool,
}

impl Sink<'_> {
    /// Writes `piece` (cleaned of control characters for a terminal) and
    /// empties it for the next one.
    ///
    /// # Errors
    ///
    /// Write errors.
    pub fn emit(&mut self, piece: &mut String) -> std::io::Result<()> {
        if self.clean {
            self.w.write_all(clean(piece, Lines::Keep).as_bytes())?;
        } else {
            self.w.write_all(piece.as_bytes())?;
        }
        piece.clear();
        Ok(())
    }
}

/// `export --format json`: the session, every entry and operation record as
/// stored (without checksums), and the current context. Serialized as it is
/// written: each record is read, turned into JSON and dropped in turn.
struct JsonExport<'a> {
    store: &'a Store,
    session: &'a Session,
}

impl Serialize for JsonExport<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let session = self.session;
        let header = shapes::record(&session.raw_record(0).map_err(S::Error::custom)?)
            .map_err(|e| S::Error::custom(format!("{e:#}")))?;
        let ctx = session.context();
        let mut m = s.serialize_map(Some(9))?;
        m.serialize_entry("format", "cairn-export")?;
        m.serialize_entry("version", &1)?;
        m.serialize_entry("session", &shapes::session(self.store, session))?;
        m.serialize_entry("header", &header.get("data"))?;
        m.serialize_entry("branch", &session.branch())?;
        m.serialize_entry("labels", &session.labels())?;
        m.serialize_entry("entries", &Records(session, true))?;
        m.serialize_entry("operations", &Records(session, false))?;
        m.serialize_entry("context", &shapes::ContextShape { session, ctx: &ctx })?;
        m.end()
    }
}

/// The stored records after the header, as JSON without their checksums:
/// the entries (`.1`), else the operation records.
struct Records<'a>(&'a Session, bool);

impl Serialize for Records<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let Records(session, entries) = *self;
        let mut seq = s.serialize_seq(None)?;
        for n in 1..session.len() {
            let raw = session.raw_record(n).map_err(S::Error::custom)?;
            let rec = shapes::record(&raw).map_err(|e| S::Error::custom(format!("{e:#}")))?;
            if rec.get("id").is_some() == entries {
                seq.serialize_element(&rec)?;
            }
        }
        seq.end()
    }
}

/// Escapes text for HTML, with control characters made visible first.
pub fn escape_html(text: &str) -> String {
    let cleaned = clean(text, Lines::Keep);
    let mut out = String::with_capacity(cleaned.len());
    for c in cleaned.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::escape_html;

    #[test]
    fn html_escaping_defuses_markup_and_controls() {
        assert_eq!(
            escape_html("<script>alert('x')</script> & \x1b[2J"),
            "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; \\x1b[2J"
        );
    }
}
