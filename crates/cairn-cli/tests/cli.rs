//! Integration tests of every command through the built binary, including
//! the error paths: unknown session, ambiguous prefix, session in use,
//! damaged file, invalid stdin record, newer format version, broken pipe.

// Test helpers panic on a failed step; that is how a test fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::io::{BufRead, BufReader};
use std::process::Stdio;

use cairn::frame;
use cairn::{Access, SessionId};
use predicates::prelude::*;
use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use support::{Home, OTHER, STORY, msg, stderr, stdout, storyboard};

/// `cairn` with no store given (each call names its own `--store`).
fn bin() -> assert_cmd::Command {
    let mut c = assert_cmd::Command::new(env!("CARGO_BIN_EXE_cairn"));
    c.env_remove("CAIRN_HOME").env("COLUMNS", "80");
    c
}

/// `cairn copy --from HOME --to DB`, which must succeed.
fn copy_to(home: &Home, db: &str) -> assert_cmd::assert::Assert {
    bin()
        .args(["copy", "--from"])
        .arg(home.path())
        .args(["--to", db])
        .assert()
        .success()
}

fn json_of(out: &std::process::Output) -> Value {
    assert!(out.status.success(), "{}", stderr(out));
    serde_json::from_slice(&out.stdout).unwrap()
}

// --- help -------------------------------------------------------------------

#[test]
fn every_help_page_has_an_example() {
    let home = Home::new();
    home.prints(&["--help"], "Examples:");
    for sub in [
        "new", "append", "ls", "show", "context", "tree", "log", "checkout", "rewind", "fork",
        "label", "rm", "fsck", "export", "demo",
    ] {
        home.cairn()
            .args([sub, "--help"])
            .assert()
            .success()
            .stdout(predicate::str::contains("Example").and(predicate::str::contains("cairn ")));
    }
}

#[test]
fn usage_errors_exit_2() {
    let home = Home::new();
    home.cairn().arg("frobnicate").assert().code(2);
    home.refuses(&["show"], "no session given");
    home.cairn().args(["show", "x", "--last"]).assert().code(2);
}

// --- new, append ----------------------------------------------------------

#[test]
fn new_prints_an_id_that_opens() {
    let home = Home::new();
    let out = home
        .cairn()
        .args(["new", "--title", "t", "--state", r#"{"n":1}"#])
        .output()
        .unwrap();
    assert!(out.status.success());
    let id = stdout(&out).trim().to_owned();
    let s = home
        .store()
        .open(&SessionId::parse(&id).unwrap(), Access::Read)
        .unwrap();
    assert_eq!(s.title().as_deref(), Some("t"));
    assert_eq!(s.context().app_state(), &json!({"n": 1}));
}

#[test]
fn new_rejects_invalid_state_json() {
    let home = Home::new();
    home.refuses(&["new", "--state", "{nope"], "--state");
}

#[test]
fn append_acknowledges_each_record_with_seq_and_id() {
    let home = Home::new();
    let id = home.new_session("a");
    let out = home.append(
        &id,
        &[
            msg("user", "q1", "hello"),
            json!({"kind": "app_state", "data": {"patch": {"mood": "curious"}}}),
            json!({"kind": "op_started", "data": {"op": "o1", "input": "q1"}}),
            json!({"kind": "message", "parent": "q1", "id": "r1",
                   "data": {"role": "assistant", "content": [{"type": "text", "text": "hi"}]}}),
            json!({"kind": "message", "parent": null, "id": "root2",
                   "data": {"role": "user", "content": [{"type": "text", "text": "again"}]}}),
            json!({"kind": "x.note", "ignorable": true, "id": "n1", "data": {"any": 1}}),
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let acks: Vec<Value> = stdout(&out)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(acks.len(), 6);
    assert_eq!(acks[0], json!({"seq": 1, "id": "q1"}));
    assert_eq!(acks[1]["seq"], 2);
    assert!(acks[1]["id"].is_string());
    assert_eq!(acks[2], json!({"seq": 3, "id": null}));
    let s = home
        .store()
        .open(&SessionId::parse(&id).unwrap(), Access::Read)
        .unwrap();
    let nodes = s.nodes();
    assert_eq!(
        nodes
            .iter()
            .find(|n| n.id.as_str() == "r1")
            .unwrap()
            .parent
            .as_ref()
            .unwrap()
            .as_str(),
        "q1"
    );
    assert!(
        nodes
            .iter()
            .find(|n| n.id.as_str() == "root2")
            .unwrap()
            .parent
            .is_none()
    );
    assert_eq!(s.op_records(), vec![(3, "op_started".to_owned())]);
    assert_eq!(s.leaf().unwrap().as_str(), "n1");
}

#[test]
fn invalid_stdin_record_names_the_line_and_keeps_the_records_before_it() {
    let home = Home::new();
    let id = home.new_session("a");
    let input = format!(
        "{}\n\n{}\n{{\"kind\":\"message\",\"data\":{{\"role\":\"nobody\"}}}}\n{}\n",
        msg("user", "m1", "one"),
        msg("assistant", "m2", "two"),
        msg("user", "m3", "never"),
    );
    let out = home
        .cairn()
        .args(["append", &id])
        .write_stdin(input)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        stdout(&out).lines().count(),
        2,
        "the two records before it were acknowledged"
    );
    let err = stderr(&out);
    assert!(err.contains("stdin line 4"), "{err}");
    assert!(
        err.contains("the 2 records before it stay appended"),
        "{err}"
    );
    let s = home
        .store()
        .open(&SessionId::parse(&id).unwrap(), Access::Write)
        .unwrap();
    let ids: Vec<String> = s.nodes().iter().map(|n| n.id.to_string()).collect();
    assert_eq!(ids, ["m1", "m2"]);
}

/// Regression (issue 22): the input was parsed into a JSON value first, so
/// an integer beyond 64 bits was silently rounded to a double and a repeated
/// member silently dropped; the data is now decoded as written, by the
/// JSON rule of FORMAT.md section 1.
#[test]
fn regression_append_rounded_an_integer_beyond_64_bits_instead_of_refusing_it() {
    let home = Home::new();
    let id = home.new_session("a");
    let append_raw = |raw: &str| {
        home.cairn()
            .args(["append", &id])
            .write_stdin(format!("{raw}\n"))
            .output()
            .unwrap()
    };
    let open = || {
        home.store()
            .open(&SessionId::parse(&id).unwrap(), Access::Read)
            .unwrap()
    };
    for (raw, says) in [
        (
            r#"{"kind":"settings","data":{"values":{"n":12345678901234567890123}}}"#,
            "12345678901234567890123 is an integer beyond the 64-bit range",
        ),
        (
            r#"{"kind":"app_state","data":{"set":{"a":1,"a":2}}}"#,
            "appears twice",
        ),
    ] {
        let out = append_raw(raw);
        assert_eq!(out.status.code(), Some(2), "{raw}");
        assert!(stderr(&out).contains(says), "{says}: {}", stderr(&out));
    }
    assert_eq!(open().len(), 1, "nothing was appended");
    // What fits in 64 bits is kept exactly.
    let out = append_raw(r#"{"kind":"settings","data":{"values":{"n":18446744073709551615}}}"#);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(open().context().settings()["n"], json!(u64::MAX));
}

#[test]
fn append_rejects_what_cairn_assigns_and_unknown_kinds() {
    let home = Home::new();
    let id = home.new_session("a");
    for (line, says) in [
        (
            json!({"kind": "message", "seq": 9, "data": {}}),
            "unknown field `seq`",
        ),
        (json!({"kind": "x.mine", "data": {}}), "ignorable"),
        (json!({"kind": "header", "data": {}}), "cannot be appended"),
        (
            json!({"kind": "op_started", "id": "x", "data": {"op": "o", "input": null}}),
            "operation record",
        ),
        (
            json!({"kind": "message", "parent": "ghost", "data": {"role": "user", "content": []}}),
            "ghost",
        ),
        (
            json!({"kind": "message", "id": "bad id!", "data": {"role": "user", "content": []}}),
            "invalid entry id",
        ),
    ] {
        let out = home.append(&id, &[line]);
        assert_eq!(out.status.code(), Some(2));
        assert!(stderr(&out).contains(says), "{says}: {}", stderr(&out));
        assert!(
            stderr(&out).contains("stdin line 1 (nothing was appended)"),
            "{}",
            stderr(&out)
        );
    }
    home.cairn()
        .args(["append", &id])
        .write_stdin(b"\xff\xfe\n".to_vec())
        .assert()
        .code(2)
        .stderr(predicate::str::contains("not UTF-8"));
}

#[test]
fn append_to_a_session_in_use_fails_with_a_hint_and_reads_still_work() {
    let home = Home::new();
    let id = home.new_session("busy");
    let held = home
        .store()
        .open(&SessionId::parse(&id).unwrap(), Access::Write)
        .unwrap();
    let out = home.append(&id, &[msg("user", "m1", "hi")]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(
        err.contains(&format!("in use by process {}", std::process::id())),
        "{err}"
    );
    assert!(err.contains("hint: read commands"), "{err}");
    for cmd in ["show", "tree", "log", "context"] {
        home.cairn().args([cmd, &id]).assert().success();
    }
    home.refuses(&["checkout", &id, "root"], "in use");
    home.refuses(&["rm", &id, "--yes"], "in use");
    drop(held);
    home.append(&id, &[msg("user", "m1", "hi")])
        .status
        .success()
        .then_some(())
        .unwrap();
}

#[test]
fn buffered_and_group_durability_acknowledge_too() {
    let home = Home::new();
    let id = home.new_session("d");
    for (mode, eid) in [("buffered", "b1"), ("group", "g1"), ("sync", "s1")] {
        let input = format!("{}\n", msg("user", eid, mode));
        let out = home
            .cairn()
            .args(["append", &id, "--durability", mode])
            .write_stdin(input)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", stderr(&out));
        assert!(stdout(&out).contains(eid));
    }
}

// --- session names ------------------------------------------------------------

#[test]
fn sessions_are_found_by_id_prefix_path_and_last() {
    let home = Home::new();
    storyboard(&home);
    for name in [STORY, &STORY[..6], home.file(STORY).to_str().unwrap()] {
        home.prints(&["context", name], "context at t5");
    }
    home.prints(&["context", "--last"], "context at t5");
    home.prints(&["checkout", "--last", "panel-1"], "moved the leaf to st1");
}

#[test]
fn unknown_session_is_an_error_naming_the_store() {
    let home = Home::new();
    storyboard(&home);
    home.cairn().args(["show", "7zzz"]).assert().code(2).stderr(
        predicate::str::contains("no session matches \"7zzz\"")
            .and(predicate::str::contains("cairn ls")),
    );
    home.cairn()
        .args(["show", "/nowhere/01jd0000000000000000000abc.jsonl"])
        .assert()
        .code(2);
    let empty = Home::new();
    empty.refuses(&["show", "--last"], "no sessions yet");
}

#[test]
fn ambiguous_prefix_lists_the_candidates() {
    let home = Home::new();
    storyboard(&home);
    home.cairn().args(["show", "01j"]).assert().code(2).stderr(
        predicate::str::contains("ambiguous")
            .and(predicate::str::contains(STORY))
            .and(predicate::str::contains(OTHER)),
    );
}

#[test]
fn ambiguous_or_unknown_entry_is_an_error() {
    let home = Home::new();
    let id = home.new_session("e");
    home.append(&id, &[msg("user", "abc1", "x"), msg("user", "abc2", "y")]);
    home.refuses(&["checkout", &id, "abc"], "ambiguous");
    home.refuses(&["fork", &id, "zzz"], "no entry");
}

// --- damage and versions ----------------------------------------------------

fn damage_middle_line(path: &std::path::Path) {
    let mut bytes = std::fs::read(path).unwrap();
    let starts: Vec<usize> = std::iter::once(0)
        .chain(
            bytes
                .iter()
                .enumerate()
                .filter(|(_, b)| **b == b'\n')
                .map(|(i, _)| i + 1),
        )
        .collect();
    let at = starts[2] + 20; // inside line 3
    bytes[at] ^= 0x01;
    std::fs::write(path, bytes).unwrap();
}

#[test]
fn damaged_file_is_refused_with_the_line_and_a_fix_and_fsck_exits_1() {
    let home = Home::new();
    storyboard(&home);
    damage_middle_line(&home.file(STORY));
    home.cairn().args(["show", STORY]).assert().code(2).stderr(
        predicate::str::contains("damaged at line 3").and(predicate::str::contains("fsck")),
    );
    let out = home.cairn().args(["fsck", STORY]).output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("BAD") && stdout(&out).contains("line 3"),
        "{}",
        stdout(&out)
    );
    home.cairn().args(["fsck", "--all"]).assert().code(1);
    home.cairn()
        .args(["fsck", OTHER])
        .assert()
        .success()
        .stdout(predicate::str::starts_with("ok"));
    // `ls` still lists the damaged session rather than failing.
    home.prints(&["ls"], "fsck");
}

#[test]
fn fsck_salvage_writes_a_repaired_copy_and_leaves_the_original() {
    let home = Home::new();
    storyboard(&home);
    damage_middle_line(&home.file(STORY));
    let before = std::fs::read(home.file(STORY)).unwrap();
    let rescue = tempfile::tempdir().unwrap();
    let out = home
        .cairn()
        .args(["fsck", STORY, "--salvage"])
        .arg(rescue.path())
        .arg("--json")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["clean"], false);
    let written = report["salvage"]["written"].as_str().unwrap();
    assert_eq!(std::fs::read(home.file(STORY)).unwrap(), before);
    home.cairn().args(["fsck", written]).assert().success();
    home.cairn().args(["show", written]).assert().success();
}

#[test]
fn fsck_reports_a_torn_tail_and_readers_ignore_it() {
    let home = Home::new();
    storyboard(&home);
    let mut bytes = std::fs::read(home.file(OTHER)).unwrap();
    bytes.extend_from_slice(b"{\"seq\":2,\"ts\":");
    std::fs::write(home.file(OTHER), bytes).unwrap();
    home.cairn()
        .args(["fsck", OTHER])
        .assert()
        .code(1)
        .stdout(predicate::str::contains("torn tail"));
    home.cairn()
        .args(["show", OTHER])
        .assert()
        .success()
        .stdout(predicate::str::contains(
            "an incomplete last record (14 bytes) was ignored",
        ));
    // A writer cuts it, says so, and then fsck is clean.
    home.cairn()
        .args(["label", OTHER, "q1", "first"])
        .assert()
        .success()
        .stderr(predicate::str::contains("cut an incomplete last record"));
    home.cairn().args(["fsck", OTHER]).assert().success();
}

/// `fsck` (`--all` and by id) failed on a SQLite store with "cannot read
/// sqlite:DB#ID": it read the session's location as a file path.
#[test]
fn regression_fsck_failed_on_a_sqlite_store() {
    let home = Home::new();
    storyboard(&home);
    let db = format!("sqlite:{}", home.path().join("store.db").display());
    copy_to(&home, &db);
    bin()
        .args(["--store", &db, "--color", "never", "fsck", "--all"])
        .assert()
        .success()
        .stdout(predicate::str::contains(format!("ok  {db}#{STORY}")));
    let rescue = tempfile::tempdir().unwrap();
    let out = bin()
        .args(["--store", &db, "fsck", STORY, "--json", "--salvage"])
        .arg(rescue.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let written = json_of(&out)["salvage"]["written"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(
        std::fs::read(&written).unwrap(),
        std::fs::read(home.file(STORY)).unwrap(),
        "a clean session is salvaged as it is"
    );
}

/// `fsck` exited 0 on an empty session file (which `show` and `append`
/// refuse), followed a symlink in the store, and analysed any file given as a
/// path (`../../etc/passwd`), which `show` refuses.
#[test]
fn regression_fsck_passed_an_empty_file_followed_symlinks_and_read_any_path() {
    let home = Home::new();
    storyboard(&home);
    std::fs::write(home.file(OTHER), b"").unwrap();
    home.cairn().args(["show", OTHER]).assert().code(2);
    home.cairn()
        .args(["fsck", OTHER])
        .assert()
        .code(1)
        .stdout(predicate::str::contains("the file is empty"));
    let outside = home.path().join("passwd");
    std::fs::write(&outside, b"root:x:0:0:root:/root:/bin/sh\n").unwrap();
    std::fs::remove_file(home.file(OTHER)).unwrap();
    std::os::unix::fs::symlink(&outside, home.file(OTHER)).unwrap();
    home.refuses(&["fsck", OTHER], "not a regular file");
    home.cairn()
        .args(["fsck", "--all"])
        .assert()
        .code(1)
        .stdout(
            predicate::str::contains("not a regular file")
                .and(predicate::str::contains("root:x").not()),
        );
    for path in [outside.to_str().unwrap(), "../../etc/passwd"] {
        home.refuses(&["fsck", path], "<session id>.jsonl");
    }
}

#[test]
fn newer_format_version_is_refused_with_upgrade_advice() {
    let home = Home::new();
    storyboard(&home);
    let id = "01jf0000000000000000000new";
    let mut line = format!(
        r#"{{"seq":0,"ts":"2030-01-01T00:00:00.000Z","kind":"header","data":{{"format":99,"session":"{id}","created":"2030-01-01T00:00:00.000Z","writer":"cairn/99.0.0","hologram":true}}"#
    )
    .into_bytes();
    frame::seal(&mut line);
    std::fs::write(home.file(id), line).unwrap();
    for cmd in ["show", "tree", "log", "context"] {
        home.cairn().args([cmd, id]).assert().code(2).stderr(
            predicate::str::contains("format version 99")
                .and(predicate::str::contains("upgrade cairn")),
        );
    }
    home.append(id, &[msg("user", "m", "x")])
        .status
        .code()
        .filter(|c| *c == 2)
        .unwrap();
}

// --- reading --------------------------------------------------------------------

#[test]
fn ls_json_has_the_documented_shape() {
    let home = Home::new();
    storyboard(&home);
    let v = home.json(&["ls", "--json"]);
    let rows = v.as_array().unwrap();
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0]["id"], STORY);
    for key in [
        "id",
        "title",
        "status",
        "created",
        "updated",
        "entries",
        "records",
        "first_message",
        "forked_from",
    ] {
        assert!(rows[0].get(key).is_some(), "{key}");
    }
    assert_eq!(
        rows[0]["status"], "failed",
        "the crashed operation ended failed"
    );
    assert_eq!(rows[0]["entries"], 16);
}

#[test]
fn ls_shows_the_most_recent_20_unless_all() {
    let home = Home::new();
    for i in 0..22 {
        home.store()
            .create(cairn::NewSession {
                title: Some(format!("s{i}")),
                ..Default::default()
            })
            .unwrap();
    }
    let out = stdout(&home.cairn().arg("ls").output().unwrap());
    assert_eq!(out.lines().count(), 1 + 20 + 1, "{out}");
    assert!(out.contains("2 older; `cairn ls --all`"), "{out}");
    let out = stdout(&home.cairn().args(["ls", "--all"]).output().unwrap());
    assert_eq!(out.lines().count(), 1 + 22);
    let empty = Home::new();
    empty.prints(&["ls"], "no sessions");
}

#[test]
fn context_and_show_json_have_the_documented_shape() {
    let home = Home::new();
    storyboard(&home);
    let c = home.json(&["context", STORY, "--json"]);
    assert_eq!(c["leaf"], "t5");
    assert_eq!(c["messages"].as_array().unwrap().len(), 6);
    assert_eq!(c["messages"][0]["source"], "compaction_summary");
    assert_eq!(c["messages"][1]["message"]["role"], "user");
    assert_eq!(
        c["app_state"],
        json!({"buff": "power-up", "skill": "ten-palm strike"})
    );
    assert_eq!(c["settings"], json!({"model": "demo-model-2"}));
    assert_eq!(c["labels"], json!({"finale": "u4", "panel-1": "st1"}));
    assert_eq!(c["compaction"]["first_kept"], "u3");
    let s = home.json(&["show", STORY, "--json"]);
    assert_eq!(s["context"], c);
    assert_eq!(s["session"]["id"], STORY);
    assert_eq!(s["session"]["records"], 21);
    assert_eq!(s["session"]["in_use"], false);
    assert_eq!(s["session"]["format"], 1);
}

#[test]
fn tree_json_lists_every_node_with_children_and_the_active_path() {
    let home = Home::new();
    storyboard(&home);
    let t = home.json(&["tree", STORY, "--json"]);
    let nodes = t["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 16);
    let st1 = nodes.iter().find(|n| n["id"] == "st1").unwrap();
    assert_eq!(st1["children"], json!(["lb1", "co1"]));
    assert_eq!(st1["labels"], json!(["panel-1"]));
    assert_eq!(
        nodes.iter().find(|n| n["id"] == "u2").unwrap()["active"],
        false
    );
    assert_eq!(t["leaf"], "t5");
    assert_eq!(t["active"].as_array().unwrap().first().unwrap(), "u1");
}

#[test]
fn log_prints_records_pretty_or_verbatim() {
    let home = Home::new();
    storyboard(&home);
    let raw = std::fs::read_to_string(home.file(OTHER)).unwrap();
    home.cairn()
        .args(["log", OTHER, "--json"])
        .assert()
        .success()
        .stdout(raw.clone());
    let second = raw.lines().nth(1).unwrap().to_owned() + "\n";
    home.cairn()
        .args(["log", OTHER, "--json", "--from", "1"])
        .assert()
        .success()
        .stdout(second);
    home.cairn()
        .args(["log", OTHER, "--from", "99"])
        .assert()
        .success()
        .stdout("");
    home.cairn()
        .args(["log", STORY, "--from", "14"])
        .assert()
        .success()
        .stdout(predicate::str::contains("#14").and(predicate::str::contains("#13").not()));
    let out = stdout(&home.cairn().args(["log", STORY]).output().unwrap());
    assert!(
        out.contains("#0  2026-01-02T03:04:00.000Z  header"),
        "{out}"
    );
    assert!(
        out.contains("\\u001b[31min red"),
        "escapes stay JSON-escaped: {out}"
    );
    assert!(!out.contains('\u{1b}'));
}

#[test]
fn a_broken_pipe_exits_quietly() {
    let home = Home::new();
    let id = home.new_session("long");
    let lines: Vec<Value> = (0..3000)
        .map(|i| msg("user", &format!("m{i}"), &"lorem ipsum ".repeat(8)))
        .collect();
    let input: String = lines.iter().map(|l| format!("{l}\n")).collect();
    home.cairn()
        .args(["append", &id, "--durability", "buffered"])
        .write_stdin(input)
        .assert()
        .success();
    for args in [["log", id.as_str()], ["tree", id.as_str()]] {
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_cairn"))
            .arg("--store")
            .arg(home.path())
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut first = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut first)
            .unwrap();
        // The reader is gone (like `| head -1`).
        let out = child.wait_with_output().unwrap();
        assert!(!first.is_empty());
        assert_eq!(out.status.code(), Some(0), "{args:?}");
        assert_eq!(String::from_utf8_lossy(&out.stderr), "", "{args:?}");
    }
}

// --- writing the tree -------------------------------------------------------------

#[test]
fn checkout_moves_the_leaf_and_prints_context_and_state() {
    let home = Home::new();
    storyboard(&home);
    home.cairn()
        .args(["checkout", STORY, "panel-1", "--summary", "try again"])
        .assert()
        .success()
        .stdout(
            predicate::str::contains("moved the leaf to st1 [panel-1]")
                .and(predicate::str::contains("context: 4 messages"))
                .and(predicate::str::contains(
                    r#"app state: {"buff":"power-up","skill":"ten-palm strike"}"#,
                )),
        );
    home.cairn()
        .args(["rewind", STORY, "st2"])
        .assert()
        .success()
        .stdout(predicate::str::contains(
            r#"app state: {"buff":"exhausted"}"#,
        ));
    home.cairn()
        .args(["checkout", STORY, "root"])
        .assert()
        .success()
        .stdout(
            predicate::str::contains("the start")
                .and(predicate::str::contains("context: 0 messages")),
        );
    let s = home
        .store()
        .open(&SessionId::parse(STORY).unwrap(), Access::Read)
        .unwrap();
    assert_eq!(s.branch().len(), 1, "only the checkout entry, a new root");
}

#[test]
fn fork_prints_the_new_id_and_copies_the_branch() {
    let home = Home::new();
    storyboard(&home);
    let out = home
        .cairn()
        .args(["fork", STORY, "panel-1", "--title", "take two"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let id = SessionId::parse(stdout(&out).trim()).unwrap();
    let f = home.store().open(&id, Access::Read).unwrap();
    assert_eq!(f.title().as_deref(), Some("take two"));
    assert_eq!(
        f.header()
            .lineage
            .forked_from
            .as_ref()
            .unwrap()
            .session
            .as_str(),
        STORY
    );
    assert_eq!(f.entry_count(), 4);
    assert_eq!(
        f.context().app_state(),
        &json!({"buff": "power-up", "skill": "ten-palm strike"})
    );
}

#[test]
fn labels_are_set_listed_used_and_deleted() {
    let home = Home::new();
    storyboard(&home);
    home.cairn()
        .args(["label", STORY, "u3", "climb"])
        .assert()
        .success()
        .stdout("label climb → u3\n");
    let v = home.json(&["label", STORY, "--json"]);
    assert_eq!(v, json!({"climb": "u3", "finale": "u4", "panel-1": "st1"}));
    home.prints(&["checkout", STORY, "climb"], "u3 [climb]");
    home.cairn()
        .args(["label", STORY, "climb", "--delete"])
        .assert()
        .success();
    home.cairn()
        .args(["label", STORY])
        .assert()
        .success()
        .stdout("finale → u4\npanel-1 → st1\n");
    home.refuses(&["label", STORY, "climb", "--delete"], "no such label");
    home.cairn()
        .args(["label", STORY, "u3", "bad name!"])
        .assert()
        .code(2);
    home.refuses(&["label", STORY, "u3"], "expected 2");
}

#[test]
fn rm_refuses_without_a_terminal_unless_yes() {
    let home = Home::new();
    storyboard(&home);
    home.cairn()
        .args(["rm", OTHER])
        .write_stdin("y\n")
        .assert()
        .code(2)
        .stderr(predicate::str::contains("--yes"));
    assert!(home.file(OTHER).exists());
    home.cairn()
        .args(["rm", OTHER, "--yes"])
        .assert()
        .success()
        .stdout(format!("removed {OTHER}\n"));
    assert!(!home.file(OTHER).exists());
    home.cairn().args(["rm", OTHER, "--yes"]).assert().code(2);
}

// --- export -----------------------------------------------------------------------

#[test]
fn export_markdown_is_a_transcript_of_the_branch() {
    let home = Home::new();
    storyboard(&home);
    let out = stdout(
        &home
            .cairn()
            .args(["export", STORY, "--format", "md"])
            .output()
            .unwrap(),
    );
    assert!(out.starts_with("# comic storyboard\n"), "{out}");
    assert!(out.contains("**Tool call** `render_panel`"), "{out}");
    assert!(out.contains("**Result** of `render_panel`"), "{out}");
    assert!(out.contains("> **Checkout**"), "{out}");
    assert!(out.contains("> **Compaction**"), "{out}");
    assert!(
        !out.contains("side plot"),
        "the dropped branch is not in the transcript"
    );
}

#[test]
fn export_json_holds_every_entry_as_stored() {
    let home = Home::new();
    storyboard(&home);
    let file = home.path().join("out.json");
    home.cairn()
        .args(["export", STORY, "-f", "json", "-o"])
        .arg(&file)
        .assert()
        .success();
    let v: Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    assert_eq!(v["format"], "cairn-export");
    assert_eq!(v["entries"].as_array().unwrap().len(), 16);
    assert_eq!(v["entries"][0]["id"], "u1");
    assert!(v["entries"][0].get("crc").is_none());
    assert_eq!(v["header"]["session"], STORY);
    assert_eq!(v["context"]["leaf"], "t5");
}

/// The exports are written as they are read: a damaged record met half-way
/// (here on a side branch, which the indexed open does not read) stops the
/// export with the record named, and the half-written file is removed.
#[test]
fn an_export_that_meets_a_damaged_record_fails_and_leaves_no_partial_file() {
    use cairn::testkit::build::{assistant, user};
    let home = Home::new();
    let store = home.store();
    let s = store.create(cairn::NewSession::default()).unwrap();
    let root = s.append(user("the root")).unwrap().id.unwrap();
    s.append(assistant("a side remark to damage")).unwrap();
    s.append_entry(cairn::NewEntry {
        id: None,
        parent: cairn::Parent::Entry(root),
        body: assistant("the kept answer"),
    })
    .unwrap();
    s.sync().unwrap();
    assert!(s.save_index(), "the index is saved");
    let id = s.id().to_string();
    drop(s);
    let path = home.file(&id);
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, text.replace("to damage", "to DAMAGE")).unwrap();
    // The open trusts the index and reads only the branch: it succeeds.
    home.cairn().args(["context", &id]).assert().success();
    let file = home.path().join("out.json");
    home.cairn()
        .args(["export", &id, "-f", "json", "-o"])
        .arg(&file)
        .assert()
        .failure()
        .stderr(predicate::str::contains("cannot write").and(predicate::str::contains("checksum")));
    assert!(!file.exists(), "no half-written export is left");
}

#[test]
fn export_html_is_self_contained_with_one_svg_node_per_entry() {
    let home = Home::new();
    storyboard(&home);
    let out = stdout(
        &home
            .cairn()
            .args(["export", STORY, "--format", "html"])
            .output()
            .unwrap(),
    );
    assert!(out.starts_with("<!DOCTYPE html>"));
    assert_eq!(out.matches("<g class=\"node").count(), 16);
    assert_eq!(out.matches("<g class=\"node active").count(), 13);
    assert_eq!(out.matches("class=\"node active leaf\"").count(), 1);
    assert!(out.contains("[panel-1]") && out.contains("[finale]"));
    for remote in [
        "src=\"http",
        "href=\"http",
        "url(",
        "@import",
        "<script",
        "<link",
    ] {
        assert!(!out.contains(remote), "{remote}");
    }
    assert!(out.contains("&lt;") || !out.contains("<script"));
    assert!(
        out.contains("\\x1b[31min red"),
        "control characters are made visible"
    );
    assert!(!out.contains('\u{1b}'));
}

// --- colour -------------------------------------------------------------------------

#[test]
fn color_always_adds_colours_but_never_passes_content_escapes() {
    let home = Home::new();
    storyboard(&home);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_cairn"))
        .env_remove("NO_COLOR")
        .arg("--store")
        .arg(home.path())
        .args(["--color", "always", "show", STORY])
        .output()
        .unwrap();
    let text = stdout(&out);
    assert!(text.contains("\u{1b}[1;36muser\u{1b}[0m"), "{text}");
    assert!(
        !text.contains("\u{1b}[31m"),
        "the message's own escape stays inert"
    );
    assert!(text.contains("\\x1b[31min red"));
}

#[test]
fn copy_moves_a_store_to_sqlite_and_back_byte_for_byte_and_sqlite_stores_work_everywhere() {
    let home = Home::new();
    storyboard(&home);
    let db = format!("sqlite:{}", home.path().join("store.db").display());
    let back = home.path().join("back");
    copy_to(&home, &db).stdout(predicate::str::contains("copied 2 session(s)"));
    // The SQLite store answers the same commands.
    for (args, says) in [
        (["tree", STORY].as_slice(), "u4"),
        (["ls"].as_slice(), "comic storyboard"),
    ] {
        bin()
            .args(["--store", &db])
            .args(args)
            .assert()
            .success()
            .stdout(predicate::str::contains(says));
    }
    // A second copy finds everything unchanged.
    copy_to(&home, &db).stdout(predicate::str::contains("2 already there unchanged"));
    bin()
        .args(["copy", "--from", &db, "--to"])
        .arg(&back)
        .assert()
        .success();
    for id in [STORY, OTHER] {
        let a = std::fs::read(home.file(id)).unwrap();
        let b = std::fs::read(back.join("sessions").join(format!("{id}.jsonl"))).unwrap();
        assert!(a == b, "{id} changed on its way through SQLite");
    }
}

#[test]
fn memory_and_show_memory_print_the_session_memory() {
    let home = Home::new();
    storyboard(&home);
    let out = stdout(&home.cairn().args(["memory", STORY]).output().unwrap());
    assert!(out.contains("Goal: Panel 4"), "{out}");
    assert!(
        out.contains("render_panel: outcome unknown"),
        "the recovered crash is a failed attempt: {out}"
    );
    assert!(out.contains("rewound to entry st1"), "{out}");
    let shown = stdout(
        &home
            .cairn()
            .args(["show", STORY, "--memory"])
            .output()
            .unwrap(),
    );
    assert!(
        shown.contains("Session memory") && shown.contains("context at t5"),
        "{shown}"
    );
    let json: Value = serde_json::from_slice(
        &home
            .cairn()
            .args(["memory", STORY, "--json"])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    assert!(json["text"].as_str().unwrap().contains("Goal:"));
    assert_eq!(json["memory"]["goal"]["entries"][0], "u4");
}

#[test]
fn steps_and_recover_work_on_a_crashed_operation_appended_by_another_program() {
    let home = Home::new();
    let id = home.new_session("ops");
    let records = [
        r#"{"kind":"message","id":"u1","data":{"role":"user","content":[{"type":"text","text":"charge me"}]}}"#,
        r#"{"kind":"op_started","data":{"op":"op-2","input":"u1"}}"#,
        r#"{"kind":"model_attempted","data":{"op":"op-2","attempt":1,"entry":"a1"}}"#,
        r#"{"kind":"message","id":"a1","data":{"role":"assistant","content":[{"type":"tool_call","call_id":"c1","name":"charge","arguments":{}}]}}"#,
        &format!(
            r#"{{"kind":"tool_dispatched","data":{{"op":"op-2","call_id":"c1","tool":"charge","args_hash":"x","effect":"side_effect","key":"{}","result_entry":"r1"}}}}"#,
            cairn::idempotency_key(&SessionId::parse(&id).unwrap(), "op-2", "c1")
        ),
    ];
    home.cairn()
        .args(["append", &id])
        .write_stdin(records.join("\n"))
        .assert()
        .success();
    let steps = stdout(&home.cairn().args(["steps", &id]).output().unwrap());
    // Nobody holds the session: the process that dispatched it is gone.
    assert!(
        steps.contains("s0003") && steps.contains("charge") && steps.contains("interrupted"),
        "{steps}"
    );
    home.prints(&["recover", &id], "IndeterminateTool");
    home.cairn()
        .args(["recover", &id, "--policy", "unknown"])
        .assert()
        .success()
        .stdout(predicate::str::contains(
            "recorded c1 (charge) as TOOL_OUTCOME_UNKNOWN",
        ));
    let steps = stdout(
        &home
            .cairn()
            .args(["steps", &id, "--json"])
            .output()
            .unwrap(),
    );
    let v: Value = serde_json::from_str(&steps).unwrap();
    assert_eq!(v[2]["status"], "unknown");
    // The result used the preallocated id, and the verdict is settled.
    let log = stdout(&home.cairn().args(["log", &id, "--json"]).output().unwrap());
    assert!(log.contains(r#""id":"r1""#), "{log}");
}

/// A parent session and, newer, a subagent's session under it.
fn parent_and_newer_child(home: &Home) -> (SessionId, SessionId) {
    let store = home.store();
    let parent = store.create(cairn::NewSession::default()).unwrap();
    parent
        .append(cairn::EntryBody::Message(cairn::Message::text(
            cairn::Role::User,
            "the parent",
        )))
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(5));
    let child = store.spawn_child(&parent, "call-1", None, 2).unwrap();
    child
        .append(cairn::EntryBody::Message(cairn::Message::text(
            cairn::Role::User,
            "the child",
        )))
        .unwrap();
    (parent.id().clone(), child.id().clone())
}

#[test]
fn regression_last_picked_a_subagents_session_newer_than_its_parent() {
    let home = Home::new();
    let (parent, child) = parent_and_newer_child(&home);
    assert_eq!(
        home.store().latest().unwrap(),
        child,
        "the child is the newest"
    );
    assert_eq!(
        home.json(&["show", "--last", "--json"])["session"]["id"],
        parent.as_str()
    );
    assert_eq!(
        home.json(&["show", "--last", "--all", "--json"])["session"]["id"],
        child.as_str()
    );
    home.refuses(&["show", "--all"], "--all goes with --last");
}

#[test]
fn regression_agent_continue_resumed_a_subagents_session_as_a_top_level_agent() {
    let home = Home::new();
    let (parent, child) = parent_and_newer_child(&home);
    let script = home.path().join("script.json");
    std::fs::write(
        &script,
        json!({"turns": [{"replies": [{"text": "Hello."}]}]}).to_string(),
    )
    .unwrap();
    let out = home
        .cairn()
        .args(["agent", "--continue", "--script"])
        .arg(&script)
        .arg("--workdir")
        .arg(home.path())
        .args(["-p", "continue here"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let said = |id: &SessionId| {
        let s = home.store().open(id, Access::Read).unwrap();
        let ctx = s.context();
        ctx.messages()
            .iter()
            .any(|m| m.message().unwrap().plain_text() == "continue here")
    };
    assert!(said(&parent), "the parent took the request");
    assert!(!said(&child), "the subagent's session is untouched");
}
