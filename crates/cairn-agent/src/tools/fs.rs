//! File tools: `read_file`, `list_dir`, `grep` (read-only) and
//! `write_file`, `edit_file` (side effects). Paths are relative to the
//! working directory unless absolute.
//!
//! `write_file` and `edit_file` change only files inside the working
//! directory, never through a symlink, and replace a file whole (a synced
//! temporary file renamed over it: a crash leaves the old content or the
//! new). They refuse to overwrite a file that changed since this session
//! last read or wrote it — unless it is new, or the call says
//! `overwrite: true` — so an edit the person made meanwhile is never lost
//! silently: the results of `read_file`, `write_file` and `edit_file` end
//! with the content's hash, and the check reads it back from the branch
//! ([`super::replace`]).

use std::path::Path;

use cairn::{Block, EffectClass, ToolOutput};
use regex::RegexBuilder;
use serde_json::{Value, json};

use cairn_workspace::Touches;

use super::replace::{confine, content_line, last_seen, replace_file};
use super::{Tool, ToolCall, ToolEnv, capped_text};
use cairn_blobs::digest as sha256_hex;

const MAX_READ_BYTES: u64 = 8 << 20;

/// A text file's content.
fn read_text(path: &Path) -> Result<String, String> {
    read_file(path).map(|(t, _)| t)
}

/// A text file's content, as text and as the bytes read.
fn read_file(path: &Path) -> Result<(String, Vec<u8>), String> {
    let meta =
        std::fs::metadata(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    if meta.is_dir() {
        return Err(format!("{} is a directory (use list_dir)", path.display()));
    }
    if meta.len() > MAX_READ_BYTES {
        return Err(format!(
            "{} is {} bytes, more than this tool reads ({MAX_READ_BYTES})",
            path.display(),
            meta.len()
        ));
    }
    let bytes = std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    if bytes.iter().take(8192).any(|b| *b == 0) {
        return Err(format!("{} looks like a binary file", path.display()));
    }
    Ok((String::from_utf8_lossy(&bytes).into_owned(), bytes))
}

/// The message of a write refused because `path` changed since the
/// session last saw it.
fn changed(path: &Path) -> ToolOutput {
    ToolOutput::error(format!(
        "{} changed since you last read it; read it again before writing (or pass overwrite: true to replace it anyway)",
        path.display()
    ))
}

/// Whether `path`, holding `bytes` now, may be replaced: it is what the
/// session last read or wrote (or the session never saw it), or the call
/// says `overwrite: true`. `Err` is the result to give.
fn fresh(path: &Path, bytes: &[u8], call: &ToolCall<'_>) -> Result<(), ToolOutput> {
    if call.bool("overwrite") == Some(true) {
        return Ok(());
    }
    match last_seen(call.session, path) {
        Ok(Some(seen)) if seen != sha256_hex(bytes) => Err(changed(path)),
        Ok(_) => Ok(()),
        Err(e) => Err(ToolOutput::error(format!(
            "Not written: what this session last saw of {} could not be read back ({})",
            path.display(),
            cairn::with_causes(&e)
        ))),
    }
}

/// Replaces `path` with `bytes` (see [`replace_file`]); the result names
/// the new content's hash.
fn write_whole(path: &Path, bytes: &[u8], done: String) -> ToolOutput {
    match replace_file(path, bytes, &mut |_| Ok(())) {
        Ok(()) => ToolOutput {
            content: vec![Block::Text { text: done }, content_line(path, bytes)],
            is_error: false,
            code: None,
        },
        Err(e) => ToolOutput::error(format!("cannot write {}: {e}", path.display())),
    }
}

/// The `overwrite` argument's schema.
fn overwrite_schema() -> Value {
    json!({"type": "boolean", "description": "Replace the file even if it changed since you last read or wrote it (default false: such a write is refused)."})
}

/// A successful output, capped as [`capped_text`].
fn capped(env: &ToolEnv, text: &str) -> ToolOutput {
    ToolOutput {
        content: capped_text(env, text),
        is_error: false,
        code: None,
    }
}

/// A tool on the one file or directory its `path` argument names,
/// summarised by that path: `read_file` and `list_dir` read it;
/// `write_file` and `edit_file` change it, a side effect that touches that
/// file (so the agent snapshots it before and after). [`Tool`] follows
/// from this.
pub trait PathTool: Send + Sync {
    /// Its name.
    const NAME: &'static str;
    /// What it does, for the model.
    const DESCRIPTION: &'static str;
    /// How it affects the world.
    const EFFECT: EffectClass;
    /// The path when a call names none (the schema may require one).
    const DEFAULT_PATH: &'static str;
    /// The JSON schema of its arguments (a `path` among them).
    fn parameters(&self) -> Value;
    /// Runs it on `path` (resolved in the working directory).
    fn run_on(&self, path: &Path, call: &ToolCall<'_>) -> ToolOutput;
}

impl<T: PathTool> Tool for T {
    fn name(&self) -> &str {
        T::NAME
    }
    fn description(&self) -> &str {
        T::DESCRIPTION
    }
    fn parameters(&self) -> Value {
        PathTool::parameters(self)
    }
    fn effect(&self) -> EffectClass {
        T::EFFECT
    }
    fn touches(&self, args: &Value, env: &ToolEnv) -> Option<Touches> {
        if T::EFFECT != EffectClass::SideEffect {
            return None;
        }
        let path = args.get("path").and_then(Value::as_str)?;
        Some(Touches::Files(vec![
            env.resolve(path).to_string_lossy().into_owned(),
        ]))
    }
    fn summary(&self, args: &Value) -> String {
        let path = args.get("path").and_then(Value::as_str).unwrap_or(".");
        format!("{}: {}", T::NAME, cairn_view::term::clean_line(path))
    }
    fn run(&self, call: &ToolCall<'_>) -> ToolOutput {
        let path = call
            .env
            .resolve(call.str("path").unwrap_or(T::DEFAULT_PATH));
        self.run_on(&path, call)
    }
}

/// `read_file`: a text file's lines, numbered.
#[derive(Debug, Clone, Copy)]
pub struct ReadFile;

impl PathTool for ReadFile {
    const NAME: &'static str = "read_file";
    const DESCRIPTION: &'static str =
        "Read a text file. Returns its lines numbered from 1. Use offset/limit for long files.";
    const EFFECT: EffectClass = EffectClass::ReadOnly;
    const DEFAULT_PATH: &'static str = "";
    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "minLength": 1, "description": "File path, relative to the working directory or absolute."},
                "offset": {"type": "integer", "minimum": 1, "description": "First line to read (1-based)."},
                "limit": {"type": "integer", "minimum": 1, "maximum": 10000, "description": "Lines to read (default 2000)."}
            },
            "required": ["path"],
            "additionalProperties": false
        })
    }
    fn run_on(&self, path: &Path, call: &ToolCall<'_>) -> ToolOutput {
        let (text, bytes) = match read_file(path) {
            Ok(t) => t,
            Err(e) => return ToolOutput::error(e),
        };
        let offset = call.int("offset").unwrap_or(1).max(1) as usize;
        let limit = call.int("limit").unwrap_or(2000).max(1) as usize;
        let total = text.lines().count();
        let mut out = String::new();
        for (i, line) in text.lines().enumerate().skip(offset - 1).take(limit) {
            out.push_str(&format!("{:>6}\t{line}\n", i + 1));
        }
        if total == 0 {
            out.push_str("(empty file)\n");
        } else if offset.saturating_sub(1).saturating_add(limit) < total {
            out.push_str(&format!(
                "… ({} more lines; read on with offset {})\n",
                total - (offset - 1 + limit),
                offset.saturating_add(limit)
            ));
        }
        let mut output = capped(call.env, &out);
        output.content.push(content_line(path, &bytes));
        output
    }
}

/// `list_dir`: a directory's entries, sorted, directories marked `/`.
#[derive(Debug, Clone, Copy)]
pub struct ListDir;

impl PathTool for ListDir {
    const NAME: &'static str = "list_dir";
    const DESCRIPTION: &'static str = "List a directory's entries (directories end with /).";
    const EFFECT: EffectClass = EffectClass::ReadOnly;
    const DEFAULT_PATH: &'static str = ".";
    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {"path": {"type": "string", "description": "Directory (default: the working directory)."}},
            "additionalProperties": false
        })
    }
    fn run_on(&self, path: &Path, call: &ToolCall<'_>) -> ToolOutput {
        let entries = match std::fs::read_dir(path) {
            Ok(e) => e,
            Err(e) => return ToolOutput::error(format!("cannot list {}: {e}", path.display())),
        };
        let mut names: Vec<String> = entries
            .filter_map(Result::ok)
            .map(|e| {
                let dir = e.file_type().is_ok_and(|t| t.is_dir());
                format!(
                    "{}{}",
                    e.file_name().to_string_lossy(),
                    if dir { "/" } else { "" }
                )
            })
            .collect();
        names.sort();
        let total = names.len();
        names.truncate(1000);
        let mut out = names.join("\n");
        if total > 1000 {
            out.push_str(&format!("\n… ({} more)", total - 1000));
        }
        if total == 0 {
            out = "(empty directory)".into();
        }
        capped(call.env, &out)
    }
}

/// `grep`: lines matching a regular expression, in files under a path.
#[derive(Debug, Clone, Copy)]
pub struct Grep;

const SKIP_DIRS: [&str; 4] = ["target", "node_modules", "__pycache__", "dist"];

impl Tool for Grep {
    fn name(&self) -> &str {
        "grep"
    }
    fn description(&self) -> &str {
        "Search files for a regular expression (Rust regex syntax). Returns path:line: text. Skips hidden directories, target/ and node_modules/."
    }
    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "pattern": {"type": "string", "minLength": 1},
                "path": {"type": "string", "description": "File or directory (default: the working directory)."},
                "case_insensitive": {"type": "boolean"},
                "max_results": {"type": "integer", "minimum": 1, "maximum": 1000}
            },
            "required": ["pattern"],
            "additionalProperties": false
        })
    }
    fn effect(&self) -> EffectClass {
        EffectClass::ReadOnly
    }
    fn summary(&self, args: &Value) -> String {
        let pattern = args.get("pattern").and_then(Value::as_str).unwrap_or("");
        format!("grep: {}", cairn_view::term::clean_line(pattern))
    }
    fn run(&self, call: &ToolCall<'_>) -> ToolOutput {
        let re = match RegexBuilder::new(call.str("pattern").unwrap_or_default())
            .case_insensitive(call.bool("case_insensitive").unwrap_or(false))
            .size_limit(1 << 20)
            .build()
        {
            Ok(r) => r,
            Err(e) => return ToolOutput::error(format!("invalid pattern: {e}")),
        };
        let max = call.int("max_results").unwrap_or(200).max(1) as usize;
        let root = call.env.resolve(call.str("path").unwrap_or("."));
        let mut hits = Vec::new();
        let mut stack = vec![root.clone()];
        let mut files = 0usize;
        while let Some(p) = stack.pop() {
            if hits.len() >= max || call.interrupt.is_set() {
                break;
            }
            let Ok(meta) = std::fs::symlink_metadata(&p) else {
                continue;
            };
            if meta.is_dir() {
                let name = p
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default();
                if p != root && (name.starts_with('.') || SKIP_DIRS.contains(&name.as_str())) {
                    continue;
                }
                if let Ok(rd) = std::fs::read_dir(&p) {
                    let mut children: Vec<_> =
                        rd.filter_map(Result::ok).map(|e| e.path()).collect();
                    children.sort();
                    stack.extend(children.into_iter().rev());
                }
            } else if meta.is_file() && meta.len() <= MAX_READ_BYTES {
                files += 1;
                let Ok(text) = read_text(&p) else { continue };
                let shown = p
                    .strip_prefix(&call.env.workdir)
                    .unwrap_or(&p)
                    .display()
                    .to_string();
                for (i, line) in text.lines().enumerate() {
                    if re.is_match(line) {
                        hits.push(format!(
                            "{shown}:{}: {}",
                            i + 1,
                            crate::provider::sse::cut(line)
                        ));
                        if hits.len() >= max {
                            break;
                        }
                    }
                }
            }
        }
        let out = if hits.is_empty() {
            format!("no matches ({files} files searched)")
        } else {
            let more = if hits.len() >= max {
                format!("\n(stopped at {max} matches)")
            } else {
                String::new()
            };
            format!("{}{more}", hits.join("\n"))
        };
        capped(call.env, &out)
    }
}

/// `write_file`: writes (creates or replaces) a file.
#[derive(Debug, Clone, Copy)]
pub struct WriteFile;

impl PathTool for WriteFile {
    const NAME: &'static str = "write_file";
    const DESCRIPTION: &'static str = "Create or overwrite a text file with the given content (parent directories are created). An existing file that changed since you last read or wrote it is not overwritten unless overwrite is true.";
    const EFFECT: EffectClass = EffectClass::SideEffect;
    const DEFAULT_PATH: &'static str = "";
    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "minLength": 1},
                "content": {"type": "string"},
                "overwrite": overwrite_schema()
            },
            "required": ["path", "content"],
            "additionalProperties": false
        })
    }
    fn run_on(&self, path: &Path, call: &ToolCall<'_>) -> ToolOutput {
        let content = call.str("content").unwrap_or_default();
        let path = match confine(&call.env.workdir, path) {
            Ok(p) => p,
            Err(why) => return ToolOutput::error(format!("Not written: {why}.")),
        };
        match std::fs::read(&path) {
            Ok(old) => {
                if let Err(refused) = fresh(&path, &old, call) {
                    return refused;
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return ToolOutput::error(format!("cannot read {}: {e}", path.display())),
        }
        if let Some(parent) = path.parent()
            && let Err(e) = std::fs::create_dir_all(parent)
        {
            return ToolOutput::error(format!("cannot create {}: {e}", parent.display()));
        }
        let done = format!("wrote {} bytes to {}", content.len(), path.display());
        write_whole(&path, content.as_bytes(), done)
    }
}

/// `edit_file`: replaces an exact string in a file.
#[derive(Debug, Clone, Copy)]
pub struct EditFile;

impl PathTool for EditFile {
    const NAME: &'static str = "edit_file";
    const DESCRIPTION: &'static str = "Replace old_string with new_string in a file. old_string must occur exactly once unless replace_all is true. A file that changed since you last read or wrote it is not edited unless overwrite is true.";
    const EFFECT: EffectClass = EffectClass::SideEffect;
    const DEFAULT_PATH: &'static str = "";
    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "minLength": 1},
                "old_string": {"type": "string", "minLength": 1},
                "new_string": {"type": "string"},
                "replace_all": {"type": "boolean"},
                "overwrite": overwrite_schema()
            },
            "required": ["path", "old_string", "new_string"],
            "additionalProperties": false
        })
    }
    fn run_on(&self, path: &Path, call: &ToolCall<'_>) -> ToolOutput {
        let path = match confine(&call.env.workdir, path) {
            Ok(p) => p,
            Err(why) => return ToolOutput::error(format!("Not edited: {why}.")),
        };
        let path = path.as_path();
        let (text, bytes) = match read_file(path) {
            Ok(t) => t,
            Err(e) => return ToolOutput::error(e),
        };
        if let Err(refused) = fresh(path, &bytes, call) {
            return refused;
        }
        let old = call.str("old_string").unwrap_or_default();
        let new = call.str("new_string").unwrap_or_default();
        let count = text.matches(old).count();
        let all = call.bool("replace_all").unwrap_or(false);
        if count == 0 {
            return ToolOutput::error(format!("old_string does not occur in {}", path.display()));
        }
        if count > 1 && !all {
            return ToolOutput::error(format!(
                "old_string occurs {count} times in {}: include more context to make it unique, or set replace_all",
                path.display()
            ));
        }
        let edited = if all {
            text.replace(old, new)
        } else {
            text.replacen(old, new, 1)
        };
        let done = format!(
            "replaced {} occurrence(s) in {}",
            if all { count } else { 1 },
            path.display()
        );
        write_whole(path, edited.as_bytes(), done)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::interrupt::Interrupt;
    use cairn::{MemoryBackend, NewSession, Store};
    use std::sync::Arc;

    fn run(tool: &dyn Tool, env: &ToolEnv, args: Value) -> ToolOutput {
        let store = Store::with_backend(Arc::new(MemoryBackend::new()));
        let session = store.create(NewSession::default()).unwrap();
        let interrupt = Interrupt::new();
        let call = ToolCall {
            call_id: "c",
            arguments: &args,
            key: "k",
            session: &session,
            env,
            interrupt: &interrupt,
        };
        tool.run(&call)
    }

    fn text(o: &ToolOutput) -> String {
        crate::provider::result_text(&o.content)
    }

    #[test]
    fn file_tools_read_search_and_edit() {
        let dir = tempfile::tempdir().unwrap();
        let env = ToolEnv::new(dir.path(), dir.path().join("blobs"));
        std::fs::write(dir.path().join("a.txt"), "one\ntwo\nthree\ntwo\n").unwrap();
        let o = run(
            &ReadFile,
            &env,
            json!({"path": "a.txt", "offset": 2, "limit": 2}),
        );
        let content = format!(
            "[sha256 {} {}]",
            sha256_hex(b"one\ntwo\nthree\ntwo\n"),
            dir.path().join("a.txt").display()
        );
        assert_eq!(
            text(&o),
            format!(
                "     2\ttwo\n     3\tthree\n… (1 more lines; read on with offset 4)\n\n{content}"
            )
        );
        let o = run(
            &ReadFile,
            &env,
            json!({"path": "a.txt", "offset": i64::MAX}),
        );
        assert!(!o.is_error);
        assert!(run(&ReadFile, &env, json!({"path": "missing"})).is_error);
        let o = run(&Grep, &env, json!({"pattern": "^t.o$"}));
        assert_eq!(text(&o), "a.txt:2: two\na.txt:4: two");
        let o = run(
            &EditFile,
            &env,
            json!({"path": "a.txt", "old_string": "two", "new_string": "2"}),
        );
        assert!(o.is_error && text(&o).contains("occurs 2 times"));
        let o = run(
            &EditFile,
            &env,
            json!({"path": "a.txt", "old_string": "two", "new_string": "2", "replace_all": true}),
        );
        assert!(!o.is_error, "{}", text(&o));
        run(
            &WriteFile,
            &env,
            json!({"path": "sub/b.txt", "content": "b"}),
        );
        assert_eq!(
            std::fs::read_to_string(dir.path().join("a.txt")).unwrap(),
            "one\n2\nthree\n2\n"
        );
        let o = run(&ListDir, &env, json!({}));
        assert_eq!(text(&o), "a.txt\nsub/");
    }
}
