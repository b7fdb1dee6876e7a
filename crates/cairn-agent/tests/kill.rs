//! The crash test: `cairn-agent`, driven by the scripted provider through a
//! multi-tool session, is killed with SIGKILL at many random moments (and
//! sometimes again while it resumes). Each time, `--resume` with the
//! non-interactive policy (`--on-unknown mark --yes`) must bring the session
//! to a valid state: every tool call answered, every acknowledged record
//! present, and the stand-in side effect (a line in a tally file, one per
//! call) done at most once per call — exactly once when its result says it
//! ran.
//!
//! `CAIRN_KILL_ITERATIONS` (default 24) and `CAIRN_KILL_SEED` tune it.

// Test helpers panic on a failed step; that is how a test fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cairn::testkit::Rng;
use cairn::{Access, Body, EntryId, OpRecord, Outcome, Store, Verdict};
use serde_json::{Value, json};

const BIN: &str = env!("CARGO_BIN_EXE_cairn-agent");

fn script() -> Value {
    json!({"chunk_chars": 4, "chunk_delay_ms": 2, "turns": [{"replies": [
        {"text": "Step one: the state, a counted side effect, a read.", "tool_calls": [
            {"name": "set_state", "arguments": {"patch": {"step": 1}}},
            {"name": "bash", "arguments": {"command": "sleep 0.02; echo c1 >> tally.txt"}},
            {"name": "read_file", "arguments": {"path": "tally.txt"}}]},
        {"text": "Step two: more side effects.", "tool_calls": [
            {"name": "bash", "arguments": {"command": "echo c2 >> tally.txt"}},
            {"name": "list_dir", "arguments": {}},
            {"name": "write_file", "arguments": {"path": "notes.txt", "content": "hello"}}]},
        {"text": "Step three: two commands in one reply.", "tool_calls": [
            {"name": "bash", "arguments": {"command": "sleep 0.02; echo c3 >> tally.txt"}},
            {"name": "bash", "arguments": {"command": "echo c4 >> tally.txt"}},
            {"name": "set_state", "arguments": {"patch": {"step": 2}}}]},
        {"text": "All steps are done; the tally has each line once."}]}]})
}

struct Run {
    child: Child,
    lines: Arc<Mutex<Vec<String>>>,
    reader: std::thread::JoinHandle<()>,
}

fn spawn(home: &Path, work: &Path, script: &Path, extra: &[&str]) -> Run {
    let mut cmd = Command::new(BIN);
    cmd.arg("--store")
        .arg(home)
        .arg("--workdir")
        .arg(work)
        .arg("--script")
        .arg(script);
    cmd.args(["--yes", "--on-unknown", "mark", "--compact-at", "0"])
        .args(extra);
    cmd.env("CAIRN_AGENT_ACKS", "1")
        .env_remove("CAIRN_AGENT_CHILD");
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = child.stdout.take().unwrap();
    let lines = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&lines);
    let reader = std::thread::spawn(move || {
        for l in BufReader::new(out).lines() {
            let Ok(l) = l else { break };
            sink.lock().unwrap().push(l);
        }
    });
    Run {
        child,
        lines,
        reader,
    }
}

impl Run {
    fn kill_after(mut self, d: Duration) -> Vec<String> {
        std::thread::sleep(d);
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = self.reader.join();
        self.lines.lock().unwrap().clone()
    }

    fn finish(mut self, what: &str) -> Vec<String> {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                let _ = self.reader.join();
                let lines = self.lines.lock().unwrap().clone();
                let mut err = String::new();
                if let Some(mut e) = self.child.stderr.take() {
                    let _ = std::io::Read::read_to_string(&mut e, &mut err);
                }
                assert!(
                    status.success(),
                    "{what} failed ({status}): {err}\nstdout: {lines:#?}"
                );
                return lines;
            }
            assert!(Instant::now() < deadline, "{what} did not finish");
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

fn acks<'a>(lines: &'a [String], kind: &str) -> Vec<&'a str> {
    let prefix = format!("@ack {kind} ");
    lines
        .iter()
        .filter_map(|l| l.strip_prefix(&prefix))
        .collect()
}

fn session_file(home: &Path) -> Option<String> {
    let dir = home.join("sessions");
    let mut ids: Vec<String> = std::fs::read_dir(dir)
        .ok()?
        .filter_map(Result::ok)
        .filter_map(|e| {
            e.file_name()
                .to_str()?
                .strip_suffix(".jsonl")
                .map(str::to_owned)
        })
        .collect();
    assert!(ids.len() <= 1, "one run makes one session: {ids:?}");
    ids.pop()
}

/// Checks the resumed session; returns a description for the summary.
fn check(home: &Path, work: &Path, acked: &[String], context: &str) -> String {
    let store = Store::open_dir(home);
    let Some(id) = session_file(home) else {
        assert!(
            acks(acked, "session").is_empty(),
            "{context}: an acknowledged session is missing"
        );
        return "before the session existed".into();
    };
    let session = store
        .open(&cairn::SessionId::parse(&id).unwrap(), Access::Read)
        .unwrap();
    let verdict = session.verdict().expect("the verdict");
    assert!(
        matches!(
            verdict,
            Verdict::Finished { .. } | Verdict::Ready { op: None }
        ),
        "{context}: after resume the verdict is {verdict:?}"
    );
    support::every_call_answered(&session).unwrap_or_else(|e| panic!("{context}: {e}"));
    for e in acks(acked, "entry") {
        let eid = EntryId::parse(e).unwrap();
        assert!(
            session.entry(&eid).unwrap().is_some(),
            "{context}: acknowledged entry {e} is missing"
        );
    }
    let mut dispatched: HashMap<String, usize> = HashMap::new();
    let mut finished = Vec::new();
    for (seq, _) in session.op_records() {
        match session.record(seq).unwrap().body {
            Body::Op(OpRecord::ToolDispatched(t)) => *dispatched.entry(t.call_id).or_default() += 1,
            Body::Op(OpRecord::OpFinished(f)) => finished.push(f.op),
            _ => {}
        }
    }
    for c in acks(acked, "t1") {
        assert!(
            dispatched.contains_key(c),
            "{context}: acknowledged T1 of {c} is missing"
        );
    }
    for op in acks(acked, "finished") {
        assert!(
            finished.iter().any(|f| f == op),
            "{context}: acknowledged op_finished of {op} is missing"
        );
    }
    // The side effect: at most once per call; exactly once when its result says it ran.
    let tally = std::fs::read_to_string(work.join("tally.txt")).unwrap_or_default();
    let mut counts: HashMap<&str, usize> = HashMap::new();
    for l in tally.lines() {
        *counts.entry(l).or_default() += 1;
    }
    for (line, n) in &counts {
        assert!(
            *n <= 1,
            "{context}: side effect {line} happened {n} times:\n{tally}"
        );
    }
    let ctx = session.context();
    for m in ctx.messages() {
        for (call_id, name, args) in m.message().expect("read the message").tool_calls() {
            if name != "bash" {
                continue;
            }
            let cmd = args["command"].as_str().unwrap();
            let marker = cmd
                .rsplit("echo ")
                .next()
                .unwrap()
                .split(' ')
                .next()
                .unwrap();
            let (is_error, code, _) = support::result_of(&session, call_id).unwrap();
            if !is_error && code.is_none() {
                assert_eq!(
                    counts.get(marker),
                    Some(&1),
                    "{context}: {call_id} reported success, so {marker} is in the tally once"
                );
            }
        }
    }
    if matches!(
        verdict,
        Verdict::Finished {
            outcome: Outcome::Completed,
            ..
        }
    ) {
        assert_eq!(*ctx.app_state(), json!({"step": 2}), "{context}");
    }
    let unknown = ctx
        .messages()
        .iter()
        .flat_map(|m| m.message().expect("read the message").content.clone())
        .filter(|b| matches!(b, cairn::Block::ToolResult { code: Some(c), .. } if c == cairn::TOOL_OUTCOME_UNKNOWN))
        .count();
    format!("{} records, {} unknown outcome(s)", session.len(), unknown)
}

#[test]
fn sigkill_at_random_moments_then_resume_leaves_a_valid_session() {
    let iterations: u64 = std::env::var("CAIRN_KILL_ITERATIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(24);
    let (mut rng, seed) = Rng::from_env_or_os("CAIRN_KILL_SEED");
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("script.json");
    std::fs::write(&script, script_text()).unwrap();

    // Calibrate: how long an uninterrupted run takes here.
    let (home, work) = (dir.path().join("cal-home"), dir.path().join("cal-work"));
    std::fs::create_dir_all(&work).unwrap();
    let started = Instant::now();
    let lines = spawn(&home, &work, &script, &["-p", "go"]).finish("the uninterrupted run");
    let full = started.elapsed();
    check(&home, &work, &lines, "the uninterrupted run");
    assert_eq!(
        std::fs::read_to_string(work.join("tally.txt")).unwrap(),
        "c1\nc2\nc3\nc4\n"
    );
    let window = (full.as_millis() as u64 * 11 / 10).max(20);

    let mut summary = Vec::new();
    for i in 0..iterations {
        let context = format!("iteration {i} (seed {seed})");
        let home = dir.path().join(format!("home-{i}"));
        let work = dir.path().join(format!("work-{i}"));
        std::fs::create_dir_all(&work).unwrap();
        let at = rng.below(window);
        let mut acked =
            spawn(&home, &work, &script, &["-p", "go"]).kill_after(Duration::from_millis(at));
        let Some(id) = session_file(&home) else {
            summary.push(format!("{i}: killed at {at}ms, before the session existed"));
            assert!(acks(&acked, "session").is_empty());
            continue;
        };
        let file = std::fs::read(home.join("sessions").join(format!("{id}.jsonl"))).unwrap();
        if !file.contains(&b'\n') {
            // Killed between creating the file and writing its header: the
            // session was never acknowledged (see the report on create).
            assert!(
                acks(&acked, "session").is_empty(),
                "{context}: an acknowledged session has no header"
            );
            summary.push(format!(
                "{i}: killed at {at}ms, while the session file was being created"
            ));
            continue;
        }
        let resume = ["--resume", id.as_str()];
        if rng.below(3) == 0 {
            // Killed again while resuming.
            let again = rng.below(window / 2);
            acked.extend(
                spawn(&home, &work, &script, &resume).kill_after(Duration::from_millis(again)),
            );
        }
        acked.extend(
            spawn(&home, &work, &script, &resume).finish(&format!("{context}: the resume")),
        );
        // Orphaned commands of a killed agent may still be finishing.
        std::thread::sleep(Duration::from_millis(60));
        let what = check(&home, &work, &acked, &context);
        let verdicts: Vec<&str> = acked
            .iter()
            .filter_map(|l| l.strip_prefix("recovery verdict: "))
            .collect();
        let found = if verdicts.is_empty() {
            "nothing pending".to_owned()
        } else {
            verdicts.join(" then ")
        };
        summary.push(format!(
            "{i}: killed at {at}ms; resume found {found}; {what}"
        ));
    }
    eprintln!("seed {seed}, window {window}ms\n{}", summary.join("\n"));
}

fn script_text() -> String {
    script().to_string()
}
