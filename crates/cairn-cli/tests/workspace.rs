//! `cairn checkout --files`, `cairn diff` and `cairn gc` on a session the
//! agent worked in, on a directory store and on a SQLite store.

// Test helpers panic on a failed step; that is how a test fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::Path;

use serde_json::{Value, json};
use support::cairn_in;

fn run(store: &str, cwd: &Path, args: &[&str]) -> (bool, String, String) {
    let out = cairn_in(store, cwd).args(args).output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn ok(store: &str, cwd: &Path, args: &[&str]) -> String {
    let (success, out, err) = run(store, cwd, args);
    assert!(success, "`cairn {}` failed:\n{out}\n{err}", args.join(" "));
    out
}

fn leaf(store: &str, cwd: &Path) -> String {
    let shown: Value =
        serde_json::from_str(&ok(store, cwd, &["show", "--last", "--json"])).unwrap();
    shown["session"]["leaf"].as_str().unwrap().to_owned()
}

#[test]
fn checkout_files_rewinds_and_forwards_the_files_diff_shows_them_gc_keeps_them() {
    let dir = tempfile::tempdir().unwrap();
    for store in [
        dir.path().join("home").display().to_string(),
        format!("sqlite:{}", dir.path().join("cairn.db").display()),
    ] {
        let work = dir.path().join(format!("work-{}", store.len()));
        std::fs::create_dir_all(&work).unwrap();
        let script = dir.path().join("script.json");
        std::fs::write(
            &script,
            json!({"turns": [
                {"match": "one", "replies": [{"text": "writing", "tool_calls": [{"name": "write_file", "arguments": {"path": "notes.txt", "content": "one\n"}}]}, {"text": "done"}]},
                {"match": "two", "replies": [{"text": "shell", "tool_calls": [{"name": "bash", "arguments": {"command": "printf 'two\\n' > notes.txt && printf '%02000d' 0 > extra.txt"}}]}, {"text": "done"}]}]})
            .to_string(),
        )
        .unwrap();
        let script = script.to_str().unwrap();
        ok(
            &store,
            &work,
            &["agent", "--yes", "--script", script, "-p", "one"],
        );
        let first = leaf(&store, &work);
        ok(
            &store,
            &work,
            &[
                "agent",
                "--continue",
                "--yes",
                "--script",
                script,
                "-p",
                "two",
            ],
        );
        let second = leaf(&store, &work);
        assert_eq!(
            std::fs::read_to_string(work.join("notes.txt")).unwrap(),
            "two\n"
        );

        let diff = ok(&store, &work, &["diff", "--last", &first, &second]);
        assert!(
            diff.contains("M notes.txt") && diff.contains("+ extra.txt"),
            "{diff}"
        );
        let json: Value = serde_json::from_str(&ok(
            &store,
            &work,
            &["diff", "--last", "root", &second, "--json"],
        ))
        .unwrap();
        assert_eq!(json.as_array().unwrap().len(), 2, "{json}");

        // A change by hand is a conflict: nothing moves.
        std::fs::write(work.join("extra.txt"), "mine").unwrap();
        let (success, _, err) = run(&store, &work, &["rewind", "--last", &first, "--files"]);
        assert!(
            !success && err.contains("extra.txt") && err.contains("--force"),
            "{err}"
        );
        assert_eq!(leaf(&store, &work), second);
        std::fs::write(work.join("extra.txt"), "0".repeat(2000)).unwrap();

        let out = ok(&store, &work, &["rewind", "--last", &first, "--files"]);
        assert!(
            out.contains("restored: notes.txt") && out.contains("deleted: extra.txt"),
            "{out}"
        );
        assert_eq!(
            std::fs::read_to_string(work.join("notes.txt")).unwrap(),
            "one\n"
        );
        assert!(!work.join("extra.txt").exists());

        // gc removes only the copy of the hand-made file the refused restore
        // kept (no record names it) and keeps every blob the records
        // reference (extra.txt's; notes.txt, small, is kept inline in the
        // records): forward still works.
        let gc: Value =
            serde_json::from_str(&ok(&store, &work, &["gc", "--grace-secs", "0", "--json"]))
                .unwrap();
        assert_eq!(
            (gc["removed"].as_u64(), gc["referenced"].as_u64()),
            (Some(1), Some(1)),
            "{gc}"
        );
        ok(&store, &work, &["checkout", "--last", &second, "--files"]);
        assert_eq!(
            std::fs::read_to_string(work.join("notes.txt")).unwrap(),
            "two\n"
        );
        assert_eq!(
            std::fs::read_to_string(work.join("extra.txt")).unwrap(),
            "0".repeat(2000)
        );
    }
}
