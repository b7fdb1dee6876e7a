//! Workspace snapshots and restores (issue 20): what the agent adds around a
//! `bash` call in a 10,000-file workspace where the command changes one
//! file, vs the call itself; the bytes stored per changed file vs its zstd
//! size; restoring 1,000 files vs `cp -r` of the same files.

use std::path::Path;
use std::process::Command;

use anyhow::{Context as _, Result, ensure};
use cairn::{EntryBody, Message, Role, Session, Store};
use cairn_blobs::BlobStore;
use cairn_workspace::{Limits, Snapshotter, Touches, Workspace, checkout_files};

use super::Bench;
use crate::measure::{best, median, timed};
use crate::report::{Figure, Target, Unit};

/// Files of the snapshot figure's workspace, in the issue.
const TREE_FILES: usize = 10_000;
/// Timed bash calls (the median is kept).
const CALLS: usize = 15;
/// Files of the restore figure, in the issue.
const RESTORE_FILES: usize = 1_000;
/// Timed restores and copies (the best is kept).
const RESTORE_ROUNDS: usize = 3;

pub fn run(b: &Bench) -> Result<Vec<Figure>> {
    Ok(vec![snapshot(b)?, bytes(b)?, restore(b)?])
}

/// Source-like text of about `len` bytes, different for each `seed`.
fn text(seed: usize, len: usize) -> String {
    let mut s = String::with_capacity(len + 80);
    let mut i = 0;
    while s.len() < len {
        s.push_str(&format!(
            "fn item_{seed}_{i}(x: u64) -> u64 {{ x.wrapping_mul({}) ^ {} }}\n",
            (seed * 31 + i * 7) % 1009,
            (i * 13 + seed) % 977
        ));
        i += 1;
    }
    s
}

fn user(text: &str) -> EntryBody {
    EntryBody::Message(Message::text(Role::User, text))
}

fn assistant(text: &str) -> EntryBody {
    EntryBody::Message(Message::text(Role::Assistant, text))
}

fn session(home: &Path) -> Result<(Store, Session)> {
    let store = Store::open_dir(home);
    let s = store.create(cairn::NewSession::default())?;
    s.append(user("go"))?;
    Ok((store, s))
}

fn bash(work: &Path, command: &str) -> Result<()> {
    let status = Command::new("bash")
        .arg("-c")
        .arg(command)
        .current_dir(work)
        .status()
        .context("running bash")?;
    ensure!(status.success(), "bash failed: {command}");
    Ok(())
}

fn snapshot(b: &Bench) -> Result<Figure> {
    let dir = b.sub("workspace-snapshot")?;
    let (home, work) = (dir.join("home"), dir.join("work"));
    let n = b.sizes.ws_tree_files;
    for i in 0..n {
        let sub = work.join(format!("d{:02}", i % 100));
        if i < 100 {
            std::fs::create_dir_all(&sub)?;
        }
        std::fs::write(sub.join(format!("f{i}.rs")), text(i, 600))?;
    }
    let (_store, s) = session(&home)?;
    let snap = Snapshotter::new(&work, BlobStore::new(home.join("blobs")), Limits::default());
    let mut ws = Workspace::open(&s, snap)?;
    // The first scan reads every file once (untimed: a session's first call).
    ws.before(&s, s.leaf(), "warm", &Touches::Tree)?;
    let mut snap_ms = Vec::new();
    let mut bash_ms = Vec::new();
    let mut before_ms = Vec::new();
    for i in 0..CALLS {
        let command = format!("printf 'changed {i}\\n' >> d07/f{}.rs", 7 + 100 * (i % 50));
        let (t_before, ()) = timed(|| {
            ws.before(&s, s.leaf(), &format!("c{i}"), &Touches::Tree)?;
            Ok(())
        })?;
        let (t_bash, ()) = timed(|| bash(&work, &command))?;
        let at = s.append(assistant("ok"))?.id.context("an entry id")?;
        let (t_after, record) =
            timed(|| Ok(ws.after(&s, at, &format!("c{i}"), &Touches::Tree)?))?;
        ensure!(
            record.files.len() == 1,
            "the after snapshot should list the one changed file"
        );
        snap_ms.push((t_before + t_after) * 1e3);
        before_ms.push(t_before * 1e3);
        bash_ms.push(t_bash * 1e3);
    }
    ensure!(
        ws.full_scans() == 1 || !ws.is_watching(),
        "with the watcher running, only the first snapshot scans everything"
    );
    let how = if ws.is_watching() {
        "the watcher (inotify) running: each snapshot looks only at the paths changed since the last one (before: none; after: the changed file, read, hashed and kept inline in the record: nothing to sync before it); two records appended (Buffered: the T1 and T2 the agent writes anyway make them durable)"
    } else {
        "no watcher here (inotify unavailable): two .gitignore-honouring full scans (an lstat per file; the changed file hashed and kept), two records appended"
    };
    Ok(millis_over_files(
        b,
        ("ws_bash_snapshot", format!(
            "snapshots around one bash call, {} files, one changed",
            crate::report::thousands(n as u64)
        )),
        (n, TREE_FILES),
        (median(snap_ms), median(bash_ms)),
        "the bash call itself (bash -c, appending a line to one file)",
        1.5,
    )
    .note(format!(
        "of which the before snapshot (finds nothing changed): {:.2} ms",
        median(before_ms)
    ))
    .note(format!(
        "{how}; median of {CALLS} calls, page cache warm, the first (full) scan of the session left out"
    )))
}

/// A figure in milliseconds over `n` files (`full` in the issue), against
/// a baseline, with an upper bound on the ratio.
fn millis_over_files(
    b: &Bench,
    (key, name): (&'static str, String),
    (n, full): (usize, usize),
    (value, baseline): (f64, f64),
    baseline_name: &str,
    at_most: f64,
) -> Figure {
    Figure::new(
        key,
        name,
        Unit::Millis,
        value,
        baseline_name,
        baseline,
        Some(Target::AtMost(at_most)),
    )
    .scaled(b.sizes.scaled("files", n as u64, full as u64))
}

fn bytes(b: &Bench) -> Result<Figure> {
    let dir = b.sub("workspace-bytes")?;
    let (home, work) = (dir.join("home"), dir.join("work"));
    std::fs::create_dir_all(&work)?;
    const CHANGED: usize = 20;
    for i in 0..CHANGED {
        std::fs::write(work.join(format!("f{i}.rs")), text(i, 32 << 10))?;
    }
    let (_store, s) = session(&home)?;
    let blobs = BlobStore::new(home.join("blobs"));
    let snap = Snapshotter::new(&work, blobs.clone(), Limits::default());
    let mut ws = Workspace::open(&s, snap)?;
    ws.before(&s, s.leaf(), "c0", &Touches::Tree)?;
    let mut zstd_bytes = 0u64;
    for i in 0..CHANGED {
        let edited = text(i + 1000, 32 << 10);
        zstd_bytes += zstd::bulk::compress(edited.as_bytes(), cairn_blobs::LEVEL)?.len() as u64;
        std::fs::write(work.join(format!("f{i}.rs")), edited)?;
    }
    let blobs_before = dir_bytes(blobs.dir())?;
    let log_before = s.len();
    let at = s.append(assistant("ok"))?.id.context("an entry id")?;
    let record = ws.after(&s, at, "c0", &Touches::Tree)?;
    ensure!(record.files.len() == CHANGED, "every file changed");
    let record_bytes = s.raw_record(s.len() - 1)?.len() as u64;
    ensure!(s.len() == log_before + 2, "one entry and one record");
    let stored = dir_bytes(blobs.dir())? - blobs_before + record_bytes;
    Ok(Figure::new(
        "ws_bytes_per_file",
        "bytes stored per changed file (blob + its share of the record)",
        Unit::Bytes,
        stored as f64 / CHANGED as f64,
        "the file's zstd size (level 3)",
        zstd_bytes as f64 / CHANGED as f64,
        Some(Target::AtMost(1.1)),
    )
    .note(format!(
        "{CHANGED} source-like files of 32 KiB each rewritten; the after record lists them ({record_bytes} bytes in all); unchanged files cost nothing"
    )))
}

fn dir_bytes(dir: &Path) -> Result<u64> {
    let mut n = 0;
    if !dir.exists() {
        return Ok(0);
    }
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        let m = e.metadata()?;
        n += if m.is_dir() {
            dir_bytes(&e.path())?
        } else {
            m.len()
        };
    }
    Ok(n)
}

fn restore(b: &Bench) -> Result<Figure> {
    let dir = b.sub("workspace-restore")?;
    let (home, work) = (dir.join("home"), dir.join("work"));
    let n = b.sizes.ws_restore_files;
    for i in 0..n {
        let sub = work.join(format!("d{:02}", i % 10));
        if i < 10 {
            std::fs::create_dir_all(&sub)?;
        }
        std::fs::write(sub.join(format!("f{i}.rs")), text(i, 4 << 10))?;
    }
    let (store, s) = session(&home)?;
    let blobs = BlobStore::new(home.join("blobs"));
    let snap = Snapshotter::new(&work, blobs.clone(), Limits::default());
    let mut ws = Workspace::open(&s, snap)?;
    let start = s.leaf();
    ws.before(&s, start.clone(), "c0", &Touches::Tree)?;
    for i in 0..n {
        let p = work.join(format!("d{:02}/f{i}.rs", i % 10));
        std::fs::write(p, text(i + 5000, 4 << 10))?;
    }
    let changed = s.append(assistant("changed"))?.id.context("an entry id")?;
    ws.after(&s, changed.clone(), "c0", &Touches::Tree)?;
    let mut restore_ms = Vec::new();
    let mut cp_ms = Vec::new();
    let mut cp_sync_ms = Vec::new();
    let mut cp_over_ms = Vec::new();
    for r in 0..RESTORE_ROUNDS {
        // Back and forth: each restore rewrites every file.
        let to = if r % 2 == 0 {
            start.as_ref()
        } else {
            Some(&changed)
        };
        let (t, report) = timed(|| Ok(checkout_files(&store, &s, &blobs, to, None, false)?))?;
        ensure!(
            report.restored.len() == n,
            "every file restored ({} were)",
            report.restored.len()
        );
        restore_ms.push(t * 1e3);
        let copy = dir.join(format!("copy{r}"));
        let (t, ()) = timed(|| copy_tree(&work, &copy, false))?;
        cp_ms.push(t * 1e3);
        std::fs::remove_dir_all(&copy)?;
        // Informational: the copy made durable (`sync` flushes everything
        // dirty on the machine, as a restore's own syncs do not).
        let (t, ()) = timed(|| copy_tree(&work, &copy, true))?;
        cp_sync_ms.push(t * 1e3);
        // Informational: `cp -r` over that durable copy, which replaces
        // files whose blocks are on disk, as a restore does (the copy
        // into a new directory frees nothing).
        let (t, ()) = timed(|| copy_over(&work, &copy))?;
        cp_over_ms.push(t * 1e3);
        std::fs::remove_dir_all(&copy)?;
    }
    Ok(millis_over_files(
        b,
        ("ws_restore_1000", format!(
            "restore {} files of 4 KiB (checkout --files)",
            crate::report::thousands(n as u64)
        )),
        (n, RESTORE_FILES),
        (best(restore_ms), best(cp_ms)),
        "cp -r of the same files",
        2.0,
    )
    .note(format!(
        "cp -r && sync of the same files (informational: durable, as a restore is): {:.1} ms",
        best(cp_sync_ms)
    ))
    .note(format!(
        "cp -r over a durable copy of the same files (informational: it replaces files whose blocks are on disk, as a restore does, in place and without syncing): {:.1} ms",
        best(cp_over_ms)
    ))
    .note(format!(
        "plan (an lstat of each file, a hash where its stat cannot be trusted); from up to 16 threads at once: every file read from its zstd blob and verified and written to a temporary name; all made durable at once (one syncfs of the file system when it is a local one whose syncfs persists data and little else is dirty, else an fdatasync of each); then each renamed (the file it replaces freed by other threads meanwhile); the directories synced; the restore recorded and synced; cp -r does not sync; best of {RESTORE_ROUNDS}"
    )))
}

/// `cp -r from/. to`: every file of `from` copied over the one of the
/// same path in `to` (opened with `O_TRUNC`: its old blocks freed).
fn copy_over(from: &Path, to: &Path) -> Result<()> {
    let status = Command::new("cp")
        .arg("-r")
        .arg(from.join("."))
        .arg(to)
        .status()?;
    ensure!(status.success(), "cp -r over a copy failed");
    Ok(())
}

/// `cp -r from to`, then `sync` when asked.
fn copy_tree(from: &Path, to: &Path, sync: bool) -> Result<()> {
    let status = Command::new("cp").arg("-r").arg(from).arg(to).status()?;
    ensure!(status.success(), "cp -r failed");
    if sync {
        ensure!(Command::new("sync").status()?.success(), "sync failed");
    }
    Ok(())
}
