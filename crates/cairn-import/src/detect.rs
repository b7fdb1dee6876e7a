//! Which format a source file is in, and where the tools keep their
//! sessions.

use std::path::{Path, PathBuf};

use serde_json::Value;

/// A source format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Format {
    /// pi (`@mariozechner/pi-coding-agent`) session files, versions 1–3.
    Pi,
    /// Claude Code transcripts (`~/.claude/projects/*/*.jsonl`).
    ClaudeCode,
    /// Codex rollouts (`~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl`).
    Codex,
}

impl Format {
    /// Every format.
    pub const ALL: [Format; 3] = [Format::Pi, Format::ClaudeCode, Format::Codex];

    /// The format's name (`pi`, `claude-code`, `codex`).
    pub fn name(self) -> &'static str {
        match self {
            Format::Pi => "pi",
            Format::ClaudeCode => "claude-code",
            Format::Codex => "codex",
        }
    }

    /// The format of a name.
    pub fn from_name(name: &str) -> Option<Format> {
        Format::ALL.into_iter().find(|f| f.name() == name)
    }

    /// Where the tool keeps its sessions, under a home directory.
    pub fn default_dir(self, home: &Path) -> PathBuf {
        match self {
            Format::Pi => home.join(".pi/agent/sessions"),
            Format::ClaudeCode => home.join(".claude/projects"),
            Format::Codex => home.join(".codex/sessions"),
        }
    }
}

/// Tells the format from the first records of a file.
///
/// # Errors
///
/// A description of what was found when no format fits.
pub fn detect(bytes: &[u8]) -> Result<Format, String> {
    for raw in bytes.split(|b| *b == b'\n').take(50) {
        let Ok(Value::Object(o)) = serde_json::from_slice::<Value>(raw.trim_ascii()) else {
            continue;
        };
        let ty = o.get("type").and_then(Value::as_str).unwrap_or("");
        if ty == "session" && o.contains_key("id") {
            return Ok(Format::Pi);
        }
        if o.contains_key("payload")
            && matches!(
                ty,
                "session_meta" | "response_item" | "event_msg" | "turn_context" | "compacted"
            )
        {
            return Ok(Format::Codex);
        }
        if o.contains_key("sessionId") || o.contains_key("parentUuid") || o.contains_key("leafUuid")
        {
            return Ok(Format::ClaudeCode);
        }
    }
    Err("no record of its first 50 lines looks like pi, Claude Code or Codex".into())
}

/// The tools' default session directories that exist under `home`, with
/// their formats.
pub fn default_sources(home: &Path) -> Vec<(Format, PathBuf)> {
    Format::ALL
        .into_iter()
        .map(|f| (f, f.default_dir(home)))
        .filter(|(_, d)| d.is_dir())
        .collect()
}

/// The session files under `path` (itself, when it is a file): every
/// `*.jsonl` below a directory, in path order.
///
/// # Errors
///
/// When a directory cannot be read.
pub fn source_files(path: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    if path.is_dir() {
        walk(path, &mut out)?;
        out.sort();
    } else {
        out.push(path.to_owned());
    }
    Ok(out)
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let ty = entry.file_type()?;
        let p = entry.path();
        if ty.is_dir() {
            walk(&p, out)?;
        } else if ty.is_file() && p.extension().is_some_and(|e| e == "jsonl") {
            out.push(p);
        }
    }
    Ok(())
}
