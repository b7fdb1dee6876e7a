//! `cairn recover`, `checkout` and `fork` never leave a tool call without a
//! result where a provider would receive it: random histories cut at any
//! record and recovered through the binary, and the regressions of the
//! recovery commands.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use cairn::testkit::recovery::{assert_no_unanswered_call_reaches_a_provider, recovery_history};
use cairn::{Access, EffectClass, EntryBody, Message, Role, SessionId};
use predicates::prelude::*;
use serde_json::{Value, json};
use support::{Home, stdout};

fn call(id: &str, tool: &str) -> Value {
    json!({"kind": "message", "id": id, "data": {"role": "assistant", "content": [
        {"type": "tool_call", "call_id": "c1", "name": tool, "arguments": {}}
    ]}})
}

/// Recovery through the binary: for random histories, each cut at every
/// record, `cairn recover --policy unknown` leaves a context a provider
/// accepts, and running it again does nothing.
#[test]
fn no_call_without_a_result_survives_cairn_recover_at_any_cut() {
    // Seeds whose cuts reach every verdict, calls without operation records included.
    for seed in [0u64, 2, 5, 6] {
        let (id, lines) = recovery_history(seed * 0x9E37_79B9 + 11, 25);
        let n = lines.len();
        for k in 1..=n {
            let home = Home::new();
            let file = home.file(id.as_str());
            std::fs::create_dir_all(file.parent().unwrap()).unwrap();
            std::fs::write(&file, lines[..k].concat()).unwrap();
            let what = format!("seed {seed}, cut at record {k} of {n}");
            let first = home
                .cairn()
                .args(["recover", id.as_str(), "--policy", "unknown", "--json"])
                .output()
                .unwrap();
            assert!(
                first.status.success(),
                "{what}: {}",
                support::stderr(&first)
            );
            let s = home.store().open(&id, Access::Read).unwrap();
            assert_no_unanswered_call_reaches_a_provider(&s, &what);
            drop(s);
            let second: Value = serde_json::from_slice(
                &home
                    .cairn()
                    .args(["recover", id.as_str(), "--policy", "unknown", "--json"])
                    .output()
                    .unwrap()
                    .stdout,
            )
            .unwrap();
            assert_eq!(
                second["actions"],
                json!([]),
                "{what}: a second recovery acted"
            );
            assert_eq!(second["before"], second["after"], "{what}");
        }
    }
}

#[test]
fn regression_recover_said_ready_for_a_tool_call_appended_without_operation_records() {
    let home = Home::new();
    let id = home.new_session("plain");
    let out = home.append(
        &id,
        &[
            support::msg("user", "u1", "list the files"),
            call("a1", "ls"),
        ],
    );
    assert!(out.status.success(), "{}", support::stderr(&out));
    home.cairn()
        .args(["recover", &id])
        .assert()
        .success()
        .stdout(predicate::str::contains("ToolsNotStarted").and(predicate::str::contains("c1")));
    home.cairn()
        .args(["recover", &id, "--policy", "unknown"])
        .assert()
        .success()
        .stdout(predicate::str::contains(
            "closed c1 (ls) as TOOL_NOT_STARTED",
        ));
    home.cairn()
        .args(["recover", &id])
        .assert()
        .success()
        .stdout(predicate::str::contains("Ready"));
}

#[test]
fn regression_recover_on_a_running_session_said_the_tool_may_have_run() {
    let home = Home::new();
    let id = home.new_session("busy");
    let s = home
        .store()
        .open(&SessionId::parse(&id).unwrap(), Access::Write)
        .unwrap();
    let op = s
        .start_operation(Message::text(Role::User, "charge me"))
        .unwrap();
    let t = op.model_attempt(None, None).unwrap();
    let reply = Message {
        role: Role::Assistant,
        content: vec![cairn::Block::ToolCall {
            call_id: "c1".into(),
            name: "charge".into(),
            arguments: json!({}),
        }],
        usage: None,
        model: None,
        stop_reason: None,
    };
    op.record_assistant(t, reply).unwrap();
    let _running = op.dispatch_tool("c1", EffectClass::SideEffect).unwrap();
    // This process holds the writer lock: the tool is still running.
    let out = stdout(&home.cairn().args(["recover", &id]).output().unwrap());
    assert!(out.contains("IndeterminateTool"), "{out}");
    assert!(
        out.contains("running") && out.contains("in progress"),
        "{out}"
    );
    assert!(!out.contains("may have run"), "{out}");
    drop(op);
    drop(s);
    // Once the writer is gone, it may have run.
    let out = stdout(&home.cairn().args(["recover", &id]).output().unwrap());
    assert!(out.contains("may have run"), "{out}");
}

#[test]
fn regression_checkout_onto_an_assistant_with_tool_calls_left_them_dangling() {
    let home = Home::new();
    let id = home.new_session("branchy");
    let result = json!({"kind": "message", "id": "r1", "data": {"role": "tool", "content": [
        {"type": "tool_result", "call_id": "c1", "content": [{"type": "text", "text": "a b"}]}
    ]}});
    let out = home.append(
        &id,
        &[
            support::msg("user", "u1", "list the files"),
            call("a1", "ls"),
            result,
        ],
    );
    assert!(out.status.success(), "{}", support::stderr(&out));
    let len = std::fs::metadata(home.file(&id)).unwrap().len();
    for cmd in ["checkout", "fork"] {
        home.cairn()
            .args([cmd, &id, "a1"])
            .assert()
            .failure()
            .stderr(
                predicate::str::contains("without a result")
                    .and(predicate::str::contains("u1"))
                    .and(predicate::str::contains("r1")),
            );
    }
    assert_eq!(std::fs::metadata(home.file(&id)).unwrap().len(), len);
    assert_eq!(
        home.store().list().unwrap().len(),
        1,
        "a refused fork left a session"
    );
    home.cairn()
        .args(["checkout", &id, "u1"])
        .assert()
        .success();
    // Checking out where the branch already is writes nothing.
    let len = std::fs::metadata(home.file(&id)).unwrap().len();
    home.cairn()
        .args(["checkout", &id, "u1"])
        .assert()
        .success()
        .stdout(predicate::str::contains("already at"));
    assert_eq!(std::fs::metadata(home.file(&id)).unwrap().len(), len);
    let s = home
        .store()
        .open(&SessionId::parse(&id).unwrap(), Access::Read)
        .unwrap();
    assert!(matches!(
        s.entry(&cairn::EntryId::parse("a1").unwrap())
            .unwrap()
            .unwrap()
            .body,
        EntryBody::Message(_)
    ));
}

/// `cairn recover` on a session whose agent was SIGKILLed while its bash
/// command ran: the command is shown as running before anything is
/// decided, stopped under `--on-running stop`, the log says so, and only
/// then is the call recorded as of unknown outcome.
#[test]
fn cairn_recover_shows_and_stops_a_tool_process_still_running() {
    let home = Home::new();
    let work = home.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    let script = home.path().join("script.json");
    let command = "echo started >> times.txt; sleep 30; echo x >> out.txt";
    std::fs::write(
        &script,
        json!({"turns": [{"replies": [
            {"text": "Running.", "tool_calls": [{"name": "bash", "arguments": {"command": command}}]},
            {"text": "Done."}]}]})
        .to_string(),
    )
    .unwrap();
    let mut agent = std::process::Command::new(env!("CARGO_BIN_EXE_cairn"))
        .env_remove("CAIRN_HOME")
        .arg("--store")
        .arg(home.path())
        .arg("agent")
        .arg("--workdir")
        .arg(&work)
        .arg("--script")
        .arg(&script)
        .args(["--yes", "-p", "go"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while !std::fs::read_to_string(work.join("times.txt")).is_ok_and(|t| t.contains("started")) {
        assert!(
            std::time::Instant::now() < deadline,
            "the command never started"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    agent.kill().unwrap(); // SIGKILL
    agent.wait().unwrap();
    let id = home.store().list().unwrap()[0].id.to_string();

    let look: Value = home.json(&["recover", &id, "--json"]);
    let processes = look["processes"].as_array().unwrap();
    assert_eq!(processes.len(), 1, "{look}");
    assert!(
        processes[0].as_str().unwrap().contains("is running: pid"),
        "{look}"
    );

    let done: Value = home.json(&[
        "recover",
        &id,
        "--policy",
        "unknown",
        "--on-running",
        "stop",
        "--json",
    ]);
    let settled = done["settled"].to_string();
    assert!(settled.contains("stopped with SIGTERM"), "{done}");
    assert!(
        done["actions"][0]
            .as_str()
            .unwrap()
            .ends_with("(bash) as TOOL_OUTCOME_UNKNOWN"),
        "{done}"
    );
    assert!(!work.join("out.txt").exists(), "stopped before its effect");
    let s = home
        .store()
        .open(&SessionId::parse(&id).unwrap(), Access::Read)
        .unwrap();
    let ended: Vec<Value> = s
        .op_records()
        .into_iter()
        .filter(|(_, k)| k == "agent.process")
        .filter_map(|(seq, _)| match s.record(seq).unwrap().body {
            cairn::Body::Op(cairn::OpRecord::Ignored(u)) if u.data["phase"] == "ended" => {
                Some(u.data)
            }
            _ => None,
        })
        .collect();
    assert_eq!(ended.len(), 1);
    assert_eq!(ended[0]["how"], json!({"stopped": {"signal": "SIGTERM"}}));
    assert_eq!(ended[0]["by"], "cairn recover --on-running stop");
    // Nothing runs any more: a second look finds no process running.
    let again: Value = home.json(&["recover", &id, "--json"]);
    assert_eq!(again["processes"], json!([]), "{again}");
}
