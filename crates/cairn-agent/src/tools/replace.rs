//! How the file tools change a file safely: the path is confined to the
//! working directory and never goes through a symlink ([`confine`]); the
//! file is replaced whole — a temporary file beside it, synced, renamed
//! over it, the directory synced — so a crash at any step leaves the old
//! content or the new, never a mix ([`replace_file`]; the temporary's name,
//! [`cairn_workspace::write_temporary`], is one no workspace snapshot
//! records, and the temporaries a killed writer left are removed by the
//! next write of the same file); and a file is not
//! overwritten when it changed since the session last read or wrote it
//! ([`last_seen`]).
//!
//! What the session last saw of a file is derived from the branch, not
//! remembered by the process: every `read_file`, `write_file` and
//! `edit_file` result ends with a line `[sha256 HEX PATH]` (the content's
//! SHA-256 and the resolved path), and [`last_seen`] reads the branch's
//! results of those tools for the newest line naming the path. So the check
//! survives a restart, and follows a checkout (another branch saw other
//! contents).

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

use cairn::{Block, EntryBody, Message, Session};
use cairn_blobs::digest as sha256_hex;

/// The tools whose results carry a content line.
const FILE_TOOLS: [&str; 3] = ["read_file", "write_file", "edit_file"];

/// The steps of [`replace_file`], in order: where a test's hook may fail
/// (or a crash may strike).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// The temporary file is created.
    Create,
    /// The new content is written to it.
    Write,
    /// It is synced.
    Sync,
    /// It is renamed over the target.
    Rename,
    /// The directory is synced.
    SyncDir,
}

/// Replaces `path` with `bytes`: a temporary file in the same directory
/// (with the target's permission bits, when it exists) is written, synced
/// and renamed over it, then the directory is synced. `hook` runs before
/// each step; an error from it (or from the step) stops there. Before the
/// rename `path` holds its old content; from the rename on, the new.
///
/// # Errors
///
/// Any I/O error (the temporary file is then removed).
pub fn replace_file(
    path: &Path,
    bytes: &[u8],
    hook: &mut dyn FnMut(Step) -> io::Result<()>,
) -> io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .map_or_else(|| "file".into(), |n| n.to_string_lossy());
    let mode = std::fs::metadata(path).ok().map(|m| m.permissions().mode());
    remove_stale_temporaries(dir, &name);
    let tmp = dir.join(cairn_workspace::write_temporary(&name, std::process::id()));
    let written = (|| {
        hook(Step::Create)?;
        let _ = std::fs::remove_file(&tmp);
        let mut f: File = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o666)
            .open(&tmp)?;
        if let Some(mode) = mode {
            f.set_permissions(std::fs::Permissions::from_mode(mode & 0o7777))?;
        }
        hook(Step::Write)?;
        f.write_all(bytes)?;
        hook(Step::Sync)?;
        f.sync_all()?;
        drop(f);
        hook(Step::Rename)?;
        std::fs::rename(&tmp, path)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
        return written;
    }
    hook(Step::SyncDir)?;
    File::open(dir)?.sync_all()
}

/// Removes the temporary files of the file named `name` in `dir` that
/// writers no longer running left behind (killed before their rename).
/// One whose process still runs, or may, is left alone: its write may
/// still finish. The process id is looked up in this process's PID
/// namespace only: a writer in another one (another container sharing the
/// directory) is not seen, and its temporary may be taken for stale. Best
/// effort: a temporary that cannot be removed stays, and scans leave it
/// out anyway.
fn remove_stale_temporaries(dir: &Path, name: &str) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let me = std::process::id();
    for entry in entries.flatten() {
        let file_name = entry.file_name();
        let Some((target, pid)) =
            cairn_workspace::parse_write_temporary(&file_name.to_string_lossy())
                .map(|(t, p)| (t.to_owned(), p))
        else {
            continue;
        };
        if target == name && pid != me && !process_lives(pid) {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

/// Whether process `pid` may be running: only "no such process" from a
/// null signal says it is not (a process we may not signal is running).
fn process_lives(pid: u32) -> bool {
    let Some(pid) = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
    else {
        // Not a process id (0, or past the kernel's range): no process
        // wrote it; left alone all the same.
        return true;
    };
    !matches!(
        rustix::process::test_kill_process(pid),
        Err(rustix::io::Errno::SRCH)
    )
}

/// `path` resolved lexically (`.` and `..` folded) and checked: inside
/// `workdir`, and no existing component from `workdir` down to it (the file
/// itself included) is a symlink.
///
/// # Errors
///
/// A message for the model saying which rule the path breaks.
pub fn confine(workdir: &Path, path: &Path) -> Result<PathBuf, String> {
    let root = fold(workdir).map_err(|e| format!("cannot resolve the working directory: {e}"))?;
    let folded = fold(path).map_err(|e| format!("cannot resolve the path: {e}"))?;
    let Ok(rel) = folded.strip_prefix(&root) else {
        return Err(format!(
            "{} is outside the working directory {}; the file tools only change files inside it",
            path.display(),
            root.display()
        ));
    };
    if rel.as_os_str().is_empty() {
        return Err(format!(
            "{} is the working directory itself",
            path.display()
        ));
    }
    let mut at = root.clone();
    for c in rel.components() {
        at.push(c);
        match std::fs::symlink_metadata(&at) {
            Ok(m) if m.file_type().is_symlink() => {
                return Err(format!(
                    "{} is a symlink; the file tools never write through one",
                    at.display()
                ));
            }
            Ok(_) => {}
            Err(_) => break,
        }
    }
    Ok(folded)
}

/// `path` made absolute, with `.` and `..` folded lexically: the one form
/// of a path the content lines name.
///
/// # Errors
///
/// When the current directory cannot be read (a relative `path`).
pub fn fold(path: &Path) -> io::Result<PathBuf> {
    let mut folded = PathBuf::new();
    for c in std::path::absolute(path)?.components() {
        match c {
            Component::ParentDir => {
                folded.pop();
            }
            Component::CurDir => {}
            other => folded.push(other),
        }
    }
    Ok(folded)
}

/// The content line a file tool's result ends with (the path as [`fold`]
/// gives it).
pub fn content_line(path: &Path, bytes: &[u8]) -> Block {
    let path = fold(path).unwrap_or_else(|_| path.to_owned());
    Block::Text {
        text: format!("[sha256 {} {}]", sha256_hex(bytes), path.display()),
    }
}

/// The hash of `path`'s content when the session last read or wrote it on
/// its branch (`None`: never).
///
/// # Errors
///
/// When the branch cannot be read.
pub fn last_seen(session: &Session, path: &Path) -> Result<Option<String>, cairn::ReadError> {
    // The context first (cheap, and read newest first); a compaction
    // leaves the earlier branch out of it, so that is read when needed.
    let ctx = session.context();
    let mut messages = Vec::with_capacity(ctx.messages().len());
    for m in ctx.messages() {
        messages.push(m.message()?.clone());
    }
    if let Some(h) = newest(&messages, path) {
        return Ok(Some(h));
    }
    if ctx.compaction().is_none() {
        return Ok(None);
    }
    let branch: Vec<Message> = session
        .branch_entries(session.leaf().as_ref())?
        .into_iter()
        .filter_map(|(e, _)| match e.body {
            EntryBody::Message(m) => Some(m),
            _ => None,
        })
        .collect();
    Ok(newest(&branch, path))
}

/// The newest content line naming `path` in results of the file tools.
fn newest(messages: &[Message], path: &Path) -> Option<String> {
    let want = fold(path).unwrap_or_else(|_| path.to_owned());
    let want = want.display().to_string();
    let mut tools = std::collections::HashMap::new();
    let mut last = None;
    for m in messages {
        for (id, name, _) in m.tool_calls() {
            tools.insert(id.to_owned(), name.to_owned());
        }
        for b in &m.content {
            let Block::ToolResult {
                call_id, content, ..
            } = b
            else {
                continue;
            };
            if !tools
                .get(call_id)
                .is_some_and(|t| FILE_TOOLS.contains(&t.as_str()))
            {
                continue;
            }
            for c in content {
                if let Block::Text { text } = c
                    && let Some((hash, p)) = parse_line(text)
                    && p == want
                {
                    last = Some(hash.to_owned());
                }
            }
        }
    }
    last
}

/// `[sha256 HEX PATH]` → (HEX, PATH).
fn parse_line(text: &str) -> Option<(&str, &str)> {
    let rest = text.strip_prefix("[sha256 ")?.strip_suffix(']')?;
    let (hash, path) = rest.split_once(' ')?;
    (hash.len() == 64 && hash.bytes().all(|b| b.is_ascii_hexdigit())).then_some((hash, path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_at_any_step_leaves_the_old_file_or_the_new() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f.txt");
        let steps = [
            Step::Create,
            Step::Write,
            Step::Sync,
            Step::Rename,
            Step::SyncDir,
        ];
        for (i, fail_at) in steps.iter().enumerate() {
            std::fs::write(&path, "old").unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o640)).unwrap();
            let r = replace_file(&path, b"new content", &mut |s| {
                if s == *fail_at {
                    Err(io::Error::other("injected"))
                } else {
                    Ok(())
                }
            });
            assert!(r.is_err());
            let now = std::fs::read_to_string(&path).unwrap();
            let expected = if i <= 3 { "old" } else { "new content" };
            assert_eq!(now, expected, "failed at {fail_at:?}");
            let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o640, "the mode is kept ({fail_at:?})");
            let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
            assert_eq!(names.len(), 1, "no temporary file is left ({fail_at:?})");
        }
        replace_file(&path, b"whole", &mut |_| Ok(())).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "whole");
    }

    #[test]
    fn a_write_removes_the_stale_temporaries_of_its_file_and_no_live_ones() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f.txt");
        std::fs::write(&path, "old").unwrap();
        // A process that has exited: its pid names no running process.
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead = child.id();
        child.wait().unwrap();
        let stale = dir
            .path()
            .join(cairn_workspace::write_temporary("f.txt", dead));
        // Process 1 always runs.
        let live = dir
            .path()
            .join(cairn_workspace::write_temporary("f.txt", 1));
        let other = dir
            .path()
            .join(cairn_workspace::write_temporary("g.txt", dead));
        for t in [&stale, &live, &other] {
            std::fs::write(t, "torn").unwrap();
        }
        replace_file(&path, b"new", &mut |_| Ok(())).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "new");
        assert!(!stale.exists(), "the dead writer's temporary is removed");
        assert!(live.exists(), "a running process's temporary is left alone");
        assert!(other.exists(), "another file's temporary is left alone");
    }

    #[test]
    fn paths_outside_the_working_directory_or_through_symlinks_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let work = dir.path().join("w");
        std::fs::create_dir_all(work.join("sub")).unwrap();
        std::os::unix::fs::symlink(dir.path(), work.join("out")).unwrap();
        std::os::unix::fs::symlink(work.join("sub/a"), work.join("link")).unwrap();
        assert!(confine(&work, &work.join("sub/a.txt")).is_ok());
        assert!(confine(&work, &work.join("new/dir/a.txt")).is_ok());
        assert_eq!(
            confine(&work, &work.join("sub/../b.txt")).unwrap(),
            work.join("b.txt")
        );
        for bad in ["../x", "/etc/passwd", "out/x", "link", "."] {
            let p = if bad.starts_with('/') {
                PathBuf::from(bad)
            } else {
                work.join(bad)
            };
            assert!(confine(&work, &p).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_content_line_reads_back() {
        let b = content_line(Path::new("/w/a b.txt"), b"x");
        let Block::Text { text } = b else { panic!() };
        let (h, p) = parse_line(&text).unwrap();
        assert_eq!((h, p), (sha256_hex(b"x").as_str(), "/w/a b.txt"));
        assert!(parse_line("[sha256 nothex /p]").is_none());
        // `./` and `..` name the same file as the plain path.
        let Block::Text { text } = content_line(Path::new("/w/./x/../a b.txt"), b"x") else {
            panic!()
        };
        assert_eq!(parse_line(&text).unwrap().1, "/w/a b.txt");
    }
}
