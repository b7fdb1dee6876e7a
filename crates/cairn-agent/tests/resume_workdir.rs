//! A resumed session runs its tools where they first ran and talks to the
//! provider it first used: the working directory (absolute), the tool set
//! and the provider settings are recorded in the session, `--resume` and
//! `--continue` use them from any directory, and a different working
//! directory must be asked for with `--workdir` and is recorded.

// Test helpers panic on a failed step; that is how a test fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use cairn::{Access, SessionId, Store};
use serde_json::{Value, json};

const BIN: &str = env!("CARGO_BIN_EXE_cairn-agent");

/// A temporary layout: a store, the session's working directory, and a
/// caller directory elsewhere.
struct Dirs {
    _keep: tempfile::TempDir,
    home: PathBuf,
    work: PathBuf,
    elsewhere: PathBuf,
}

fn dirs() -> Dirs {
    let keep = tempfile::tempdir().unwrap();
    let root = keep.path().to_owned();
    let (home, work, elsewhere) = (root.join("home"), root.join("work"), root.join("elsewhere"));
    std::fs::create_dir_all(&work).unwrap();
    std::fs::create_dir_all(&elsewhere).unwrap();
    Dirs {
        _keep: keep,
        home,
        work,
        elsewhere,
    }
}

/// `cairn-agent --store HOME ARGS`, run in `cwd`.
fn agent(d: &Dirs, cwd: &Path, args: &[&str]) -> Output {
    Command::new(BIN)
        .current_dir(cwd)
        .arg("--store")
        .arg(&d.home)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn ok(out: &Output) -> String {
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout.clone()).unwrap()
}

fn session_id(stdout: &str) -> String {
    stdout
        .split("--resume ")
        .nth(1)
        .and_then(|r| r.split(')').next())
        .map(str::to_owned)
        .unwrap_or_else(|| panic!("no session id in {stdout}"))
}

fn settings(d: &Dirs, id: &str) -> serde_json::Map<String, Value> {
    let s = Store::open_dir(&d.home)
        .open(&SessionId::parse(id).unwrap(), Access::Read)
        .unwrap();
    s.context().settings().clone()
}

/// A script whose request runs `echo started >> side.log`; the first run
/// (in the directory where it ran first) then waits, to be killed.
fn side_effect_script(d: &Dirs) {
    let command =
        "echo started >> side.log; [ -e first ] || { touch first; echo $$ > pid; exec sleep 30; }";
    let script = json!({"turns": [{"replies": [
        {"text": "Starting.", "tool_calls": [{"name": "bash", "arguments": {"command": command}}]},
        {"text": "Started."}]}]});
    std::fs::write(d.work.join("script.json"), script.to_string()).unwrap();
}

#[test]
fn regression_resume_from_another_directory_reran_a_side_effect_in_the_callers_directory() {
    let d = dirs();
    side_effect_script(&d);
    // Started in `work` with a relative script path and --workdir, killed mid-tool.
    let mut child = Command::new(BIN)
        .current_dir(&d.work)
        .arg("--store")
        .arg(&d.home)
        .args([
            "--workdir",
            ".",
            "--script",
            "script.json",
            "--yes",
            "-p",
            "go",
        ])
        .env("CAIRN_AGENT_ACKS", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut id = None;
    for line in BufReader::new(child.stdout.take().unwrap()).lines() {
        let line = line.unwrap();
        if let Some(s) = line.strip_prefix("@ack session ") {
            id = Some(s.to_owned());
        }
        if line.starts_with("@ack t1") {
            break;
        }
    }
    // The command has started once bash wrote its pid.
    let pid = loop {
        match std::fs::read_to_string(d.work.join("pid")) {
            Ok(p) if p.ends_with('\n') => break p.trim().to_owned(),
            _ => std::thread::sleep(std::time::Duration::from_millis(10)),
        }
    };
    child.kill().unwrap();
    child.wait().unwrap();
    // SIGKILL leaves the command running (its own process group): end it.
    Command::new("kill").args(["-KILL", &pid]).status().unwrap();
    let id = id.unwrap();
    // Resumed from elsewhere, with no --workdir and no --script.
    let out = ok(&agent(
        &d,
        &d.elsewhere,
        &[
            "--resume",
            &id,
            "--on-unknown",
            "rerun",
            "--yes",
            "-p",
            "again",
        ],
    ));
    assert!(
        !d.elsewhere.join("side.log").exists(),
        "the side effect ran in the caller's directory: {out}"
    );
    let log = std::fs::read_to_string(d.work.join("side.log")).unwrap();
    assert_eq!(
        log.lines().count(),
        3,
        "the first run, the rerun and the new request ran in work: {log:?}"
    );
    assert!(out.contains("where this session worked"), "{out}");
    let set = settings(&d, &id);
    assert_eq!(set["workdir"], Value::from(d.work.display().to_string()));
    assert_eq!(set["provider"], "scripted");
    assert_eq!(
        set["script"],
        Value::from(d.work.join("script.json").display().to_string()),
        "the script path is recorded absolute"
    );
    let tools = set["tools"].as_array().unwrap();
    assert!(tools.iter().any(|t| t == "bash"), "{set:?}");
}

/// A session started in `work` with a relative `--script` that says hello.
fn hello_session(d: &Dirs) -> String {
    std::fs::write(
        d.work.join("script.json"),
        json!({"turns": [{"replies": [{"text": "hello"}]}]}).to_string(),
    )
    .unwrap();
    session_id(&ok(&agent(
        d,
        &d.work,
        &["--script", "script.json", "-p", "hi"],
    )))
}

#[test]
fn regression_a_relative_script_path_failed_when_resumed_from_elsewhere() {
    let d = dirs();
    let id = hello_session(&d);
    let s = Store::open_dir(&d.home)
        .open(&SessionId::parse(&id).unwrap(), Access::Read)
        .unwrap();
    assert_eq!(
        s.header().cwd.as_deref(),
        Some(d.work.display().to_string().as_str()),
        "the header's cwd is the tools' working directory"
    );
    drop(s);
    let again = ok(&agent(
        &d,
        &d.elsewhere,
        &["--resume", &id, "-p", "hi again"],
    ));
    assert!(again.contains("hello"), "{again}");
}

#[test]
fn a_different_working_directory_on_resume_is_asked_for_and_recorded() {
    let d = dirs();
    let id = hello_session(&d);
    let moved = ok(&agent(
        &d,
        &d.work,
        &[
            "--resume",
            &id,
            "--workdir",
            d.elsewhere.to_str().unwrap(),
            "-p",
            "over there",
        ],
    ));
    assert!(moved.contains("the change is recorded"), "{moved}");
    assert_eq!(
        settings(&d, &id)["workdir"],
        Value::from(d.elsewhere.display().to_string())
    );
    // The recorded directory is gone: resuming says how to go on.
    std::fs::remove_dir_all(&d.elsewhere).unwrap();
    let out = agent(&d, &d.work, &["--resume", &id, "-p", "where"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("working directory") && err.contains("--workdir"),
        "{err}"
    );
}

#[test]
fn a_changed_tool_set_on_resume_is_announced_and_recorded() {
    let d = dirs();
    let id = hello_session(&d);
    {
        let s = Store::open_dir(&d.home)
            .open(&SessionId::parse(&id).unwrap(), Access::Write)
            .unwrap();
        let values = json!({"tools": ["read_file", "old_tool"]});
        s.append(cairn::EntryBody::Settings(cairn::Settings {
            values: values.as_object().unwrap().clone(),
        }))
        .unwrap();
    }
    let out = ok(&agent(&d, &d.elsewhere, &["--resume", &id, "-p", "again"]));
    assert!(out.contains("no longer offered: old_tool"), "{out}");
    assert!(out.contains("new: list_dir"), "{out}");
    let tools = settings(&d, &id)["tools"].clone();
    assert!(
        tools.as_array().unwrap().iter().all(|t| t != "old_tool"),
        "{tools}"
    );
}
