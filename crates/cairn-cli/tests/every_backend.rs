//! Every command of the CLI, run on a directory store and on a SQLite store
//! (`sqlite:PATH`): each must work on both, and the agent's sessions must
//! land in the store named (not in a directory called `sqlite:PATH`).

// Test helpers panic on a failed step; that is how a test fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::Stdio;

use serde_json::{Value, json};
use support::cairn_in;

/// The stores a test runs on: a directory, and a SQLite database.
fn stores(dir: &Path) -> [String; 2] {
    [
        dir.join("home").display().to_string(),
        format!("sqlite:{}", dir.join("cairn.db").display()),
    ]
}

/// Runs `args` and returns stdout, failing with the command and its stderr.
fn ok(store: &str, cwd: &Path, args: &[&str]) -> String {
    let out = cairn_in(store, cwd).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "`cairn --store {store} {}` failed ({}):\n{}\n{}",
        args.join(" "),
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// A session with a tool call, its result, app state and a second message, made with `new` and `append`.
fn session(store: &str, cwd: &Path) -> String {
    let id = ok(
        store,
        cwd,
        &["new", "--title", "every command", "--state", "{}"],
    )
    .trim()
    .to_owned();
    let records = [
        json!({"kind": "message", "id": "u1", "data": {"role": "user", "content": [{"type": "text", "text": "draw panel 1"}]}}),
        json!({"kind": "message", "id": "a1", "data": {"role": "assistant", "content": [{"type": "tool_call", "call_id": "c1", "name": "render", "arguments": {"panel": 1}}]}}),
        json!({"kind": "message", "id": "r1", "data": {"role": "tool", "content": [{"type": "tool_result", "call_id": "c1", "content": [{"type": "text", "text": "rendered"}]}]}}),
        json!({"kind": "app_state", "id": "s1", "data": {"patch": {"panel": 1}}}),
        json!({"kind": "message", "id": "a2", "data": {"role": "assistant", "content": [{"type": "text", "text": "Panel 1 is done."}]}}),
    ];
    let input: Vec<String> = records.iter().map(Value::to_string).collect();
    cairn_in(store, cwd)
        .args(["append", &id])
        .write_stdin(input.join("\n"))
        .assert()
        .success();
    id
}

/// Every command, on `store`.
fn every_command(store: &str, dir: &Path) {
    let cwd = dir.join("cwd");
    std::fs::create_dir_all(&cwd).unwrap();
    let id = session(store, &cwd);
    assert!(ok(store, &cwd, &["ls"]).contains("every command"));
    let listed: Value = serde_json::from_str(&ok(store, &cwd, &["ls", "--json", "--all"])).unwrap();
    assert_eq!(listed.as_array().unwrap().len(), 1, "{listed}");
    assert!(ok(store, &cwd, &["show", &id]).contains("Panel 1 is done"));
    ok(store, &cwd, &["show", &id, "--json"]);
    ok(store, &cwd, &["show", &id, "--memory"]);
    assert!(ok(store, &cwd, &["context", &id]).contains("draw panel 1"));
    ok(store, &cwd, &["context", &id, "--json"]);
    assert!(ok(store, &cwd, &["tree", &id]).contains("Panel 1 is done"));
    ok(store, &cwd, &["tree", &id, "--ascii"]);
    ok(store, &cwd, &["tree", &id, "--json"]);
    assert!(ok(store, &cwd, &["log", &id]).contains("app_state"));
    ok(store, &cwd, &["log", &id, "--json"]);
    ok(store, &cwd, &["label", &id, "r1", "rendered"]);
    assert!(ok(store, &cwd, &["label", &id]).contains("rendered"));
    ok(store, &cwd, &["checkout", &id, "rendered"]);
    ok(store, &cwd, &["rewind", "--last", "s1"]);
    let fork = ok(
        store,
        &cwd,
        &["fork", &id, "rendered", "--title", "take two"],
    );
    let fork = fork.split_whitespace().last().unwrap().to_owned();
    assert!(ok(store, &cwd, &["tree", &fork]).contains("rendered"));
    for format in ["md", "json", "html"] {
        let file = cwd.join(format!("export.{format}"));
        ok(
            store,
            &cwd,
            &[
                "export",
                &id,
                "--format",
                format,
                "-o",
                file.to_str().unwrap(),
            ],
        );
        assert!(std::fs::metadata(&file).unwrap().len() > 0);
    }
    ok(store, &cwd, &["steps", &id]);
    ok(store, &cwd, &["steps", &id, "--json"]);
    ok(store, &cwd, &["recover", &id, "--policy", "unknown"]);
    ok(store, &cwd, &["memory", &id]);
    ok(store, &cwd, &["memory", &id, "--json"]);
    assert!(ok(store, &cwd, &["fsck", &id]).contains("ok"));
    ok(store, &cwd, &["fsck", "--all"]);
    ok(store, &cwd, &["fsck", "--all", "--json"]);
    let copy = dir.join("copy");
    ok(
        store,
        &cwd,
        &["copy", "--from", store, "--to", copy.to_str().unwrap()],
    );
    assert!(copy.join("sessions").join(format!("{id}.jsonl")).exists());
    ok(store, &cwd, &["rm", &fork, "--yes"]);
    assert!(!ok(store, &cwd, &["ls"]).contains("take two"));

    // The agent, one prompt, then --continue: both in this store.
    let script = dir.join("script.json");
    std::fs::write(
        &script,
        json!({"turns": [
            {"match": "one", "replies": [{"text": "first answer"}]},
            {"match": "two", "replies": [{"text": "second answer"}]}]})
        .to_string(),
    )
    .unwrap();
    let script = script.to_str().unwrap();
    let first = ok(store, &cwd, &["agent", "--script", script, "-p", "one"]);
    assert!(first.contains("first answer"), "{first}");
    let second = ok(
        store,
        &cwd,
        &["agent", "--continue", "--script", script, "-p", "two"],
    );
    assert!(second.contains("second answer"), "{second}");
    let agent_id = first
        .split("--resume ")
        .nth(1)
        .and_then(|r| r.split(')').next())
        .unwrap()
        .to_owned();
    assert!(
        second.contains(&agent_id),
        "--continue resumed another session: {second}"
    );
    let shown = ok(store, &cwd, &["show", &agent_id]);
    assert!(
        shown.contains("one") && shown.contains("two"),
        "both requests are in one session: {shown}"
    );
    assert!(
        std::fs::read_dir(&cwd).unwrap().all(|e| !e
            .unwrap()
            .file_name()
            .to_string_lossy()
            .starts_with("sqlite:")),
        "nothing is written under a directory named after the store"
    );

    assert!(ok(store, &cwd, &["demo", "--journal"]).contains("nothing lost"));
    let demo = ok(store, &cwd, &["demo"]);
    assert!(
        // Quoted where the shell needs it (a URL's `?` and `&`).
        demo.contains(&format!("cairn --store {store} tree"))
            || demo.contains(&format!("cairn --store '{store}' tree")),
        "the demo's commands name the store: {demo}"
    );
}

fn temp() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_owned();
    (dir, path)
}

#[test]
fn regression_every_command_works_on_a_directory_store() {
    let (_keep, dir) = temp();
    every_command(&stores(&dir)[0], &dir);
}

#[test]
fn regression_every_command_works_on_a_sqlite_store() {
    let (_keep, dir) = temp();
    every_command(&stores(&dir)[1], &dir);
}

#[cfg_attr(skip_postgres, ignore = "CAIRN_SKIP_POSTGRES=1")]
#[test]
fn every_command_works_on_a_postgres_store() {
    let Some(scratch) = cairn_postgres::scratch::Scratch::new("cli") else {
        return;
    };
    let (_keep, dir) = temp();
    let url = format!(
        "{}&cairn_files={}",
        scratch.url,
        dir.join("files").display()
    );
    every_command(&url, &dir);
    let (_keep, dir) = temp();
    let Some(scratch) = cairn_postgres::scratch::Scratch::new("cli") else {
        return;
    };
    reads_work_while_a_writer_holds_the_session(&scratch.url, &dir);
}

/// `cairn recover --all --policy unknown`, run by three workers at once on a
/// Postgres store holding interrupted sessions: each session is recovered
/// by exactly one of them, and none is left needing it.
#[test]
#[cfg_attr(skip_postgres, ignore = "CAIRN_SKIP_POSTGRES=1")]
fn recover_all_from_many_workers_recovers_each_interrupted_session_once() {
    use std::sync::Arc;
    let Some(scratch) = cairn_postgres::scratch::Scratch::new("recoverall") else {
        return;
    };
    let backend = cairn_postgres::PostgresBackend::open(&scratch.url).unwrap();
    let store = cairn::Store::with_backend(Arc::new(backend));
    let mut ids = Vec::new();
    for i in 0..6 {
        let s = store.create(cairn::NewSession::default()).unwrap();
        let op = s
            .start_operation(cairn::Message::text(cairn::Role::User, "go"))
            .unwrap();
        let t = op.model_attempt(None, None).unwrap();
        let call = cairn::testkit::build::calls("", &[("c1", "charge", json!({"n": i}))]);
        op.record_assistant(t, call).unwrap();
        op.dispatch_tool("c1", cairn::EffectClass::SideEffect)
            .unwrap();
        ids.push(s.id().to_string());
    }
    let (_keep, dir) = temp();
    let workers: Vec<_> = (0..3)
        .map(|_| {
            std::process::Command::new(env!("CARGO_BIN_EXE_cairn"))
                .current_dir(&dir)
                .env_remove("CAIRN_HOME")
                .args([
                    "--store",
                    &scratch.url,
                    "recover",
                    "--all",
                    "--policy",
                    "unknown",
                    "--json",
                ])
                .stdout(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut recovered: Vec<String> = Vec::new();
    for w in workers {
        let out = w.wait_with_output().unwrap();
        assert!(out.status.success());
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        for r in v["recovered"].as_array().unwrap() {
            if !r["actions"].as_array().unwrap().is_empty() {
                recovered.push(r["session"].as_str().unwrap().to_owned());
            }
        }
    }
    recovered.sort();
    ids.sort();
    assert_eq!(
        recovered, ids,
        "each session's call resolved by exactly one worker"
    );
    for id in &ids {
        let id = cairn::SessionId::parse(id).unwrap();
        let s = store.open(&id, cairn::Access::Read).unwrap();
        assert!(
            !matches!(
                s.verdict().expect("the verdict"),
                cairn::Verdict::IndeterminateTool { .. }
            ),
            "{:?}",
            s.verdict().expect("the verdict")
        );
    }
}

/// While `cairn append` holds a session, a write command names the holder
/// and its hint lists read commands: each of them must work meanwhile.
fn reads_work_while_a_writer_holds_the_session(store: &str, dir: &Path) {
    let cwd = dir.join("cwd");
    std::fs::create_dir_all(&cwd).unwrap();
    let id = session(store, &cwd);
    let mut writer = std::process::Command::new(env!("CARGO_BIN_EXE_cairn"))
        .current_dir(&cwd)
        .env_remove("CAIRN_HOME")
        .args(["--store", store, "append", &id])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = writer.stdin.take().unwrap();
    let line = json!({"kind": "message", "data": {"role": "user", "content": [{"type": "text", "text": "held"}]}});
    writeln!(stdin, "{line}").unwrap();
    let mut ack = String::new();
    BufReader::new(writer.stdout.take().unwrap())
        .read_line(&mut ack)
        .unwrap();
    assert!(ack.contains("\"seq\""), "{ack}");
    let refused = cairn_in(store, &cwd)
        .args(["label", &id, "a1", "busy"])
        .output()
        .unwrap();
    assert!(!refused.status.success());
    let err = String::from_utf8_lossy(&refused.stderr);
    let hint = err
        .lines()
        .find(|l| l.starts_with("hint:"))
        .unwrap_or_else(|| panic!("no hint: {err}"));
    let listed = hint
        .split('(')
        .nth(1)
        .and_then(|l| l.split(')').next())
        .unwrap();
    for command in listed.split(", ") {
        let args: Vec<&str> = match command {
            "ls" => vec!["ls"],
            "export" => vec!["export", &id, "--format", "md"],
            other => vec![other, &id],
        };
        ok(store, &cwd, &args);
    }
    drop(stdin);
    assert!(writer.wait().unwrap().success());
}

#[test]
fn the_write_lock_hint_names_read_commands_that_work_during_a_write() {
    let (_keep, dir) = temp();
    reads_work_while_a_writer_holds_the_session(&stores(&dir)[0], &dir);
    let (_keep, dir) = temp();
    reads_work_while_a_writer_holds_the_session(&stores(&dir)[1], &dir);
}

#[test]
fn regression_the_demos_explore_commands_left_out_the_store() {
    let (_keep, dir) = temp();
    let cwd = dir.join("cwd");
    std::fs::create_dir_all(&cwd).unwrap();
    let store = dir.join("my store").display().to_string();
    let flag = format!("cairn --store '{store}' ");
    for args in [&["demo"][..], &["demo", "--journal"][..]] {
        let out = ok(&store, &cwd, args);
        let explore = out.split("Explore what").nth(1).unwrap();
        let commands: Vec<&str> = explore
            .lines()
            .map(str::trim)
            .filter(|l| l.starts_with("cairn "))
            .collect();
        assert!(commands.len() >= 4, "{explore}");
        for c in commands {
            assert!(c.starts_with(&flag), "{c} does not name the store");
        }
    }
}
