//! Shared helpers for the CLI's integration tests: running the built binary
//! against a temporary store, and building fixture sessions with fixed ids and
//! fixed times (so human output can be snapshot).

// Each test binary uses its own subset of these helpers; helpers are test
// code, which clippy's `allow-*-in-tests` settings do not reach.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

use assert_cmd::Command;
use cairn::frame;
use cairn::testkit::build::{assistant, calls, tool_result, user};
use cairn::{
    Access, AppStateChange, Block, Body, Compaction, EffectClass, EntryBody, EntryId, Message,
    NewEntry, NewSession, OpRecord, Parent, Role, Session, SessionId, Settings, Store, Usage,
};
use cairn::{ModelAttempted, OpStarted, ToolDispatched};
use serde_json::json;

/// The fixture session's id.
pub const STORY: &str = "01jd0000000000000000000abc";
/// A second, small session's id.
pub const OTHER: &str = "01je0000000000000000000xyz";

/// A temporary store home.
pub struct Home {
    /// The directory (removed on drop).
    pub dir: tempfile::TempDir,
}

impl Home {
    /// An empty store.
    pub fn new() -> Home {
        Home {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    /// The store's home directory.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// The store, through the library.
    pub fn store(&self) -> Store {
        Store::open_dir(self.path())
    }

    /// The file of a session.
    pub fn file(&self, id: &str) -> PathBuf {
        self.path().join("sessions").join(format!("{id}.jsonl"))
    }

    /// `cairn --store HOME --color never …`, with a fixed width and no
    /// inherited store.
    pub fn cairn(&self) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_cairn"));
        c.env_remove("CAIRN_HOME")
            .env_remove("NO_COLOR")
            .env("COLUMNS", "80")
            .arg("--store")
            .arg(self.path())
            .arg("--color")
            .arg("never");
        c
    }

    /// Runs `cairn ARGS` and expects it to fail with exit code 2 and a
    /// message containing `says`.
    pub fn refuses(&self, args: &[&str], says: &str) {
        self.cairn()
            .args(args)
            .assert()
            .code(2)
            .stderr(predicates::str::contains(says));
    }

    /// Runs `cairn ARGS` and expects it to succeed, printing `says`.
    pub fn prints(&self, args: &[&str], says: &str) {
        self.cairn()
            .args(args)
            .assert()
            .success()
            .stdout(predicates::str::contains(says));
    }

    /// Runs `cairn ARGS`, expects it to succeed, and parses what it printed
    /// as JSON.
    pub fn json(&self, args: &[&str]) -> serde_json::Value {
        let out = self.cairn().args(args).output().unwrap();
        assert!(out.status.success(), "{}", stderr(&out));
        serde_json::from_slice(&out.stdout).unwrap()
    }

    /// Creates a session through the CLI and returns its id.
    pub fn new_session(&self, title: &str) -> String {
        let out = self
            .cairn()
            .args(["new", "--title", title])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap().trim().to_owned()
    }

    /// Appends JSON lines through the CLI; returns the output.
    pub fn append(&self, id: &str, lines: &[serde_json::Value]) -> std::process::Output {
        let input: String = lines.iter().map(|l| format!("{l}\n")).collect();
        self.cairn()
            .args(["append", id])
            .write_stdin(input)
            .output()
            .unwrap()
    }
}

/// The text of a command's stdout.
pub fn stdout(out: &std::process::Output) -> String {
    String::from_utf8(out.stdout.clone()).unwrap()
}

/// The text of a command's stderr.
pub fn stderr(out: &std::process::Output) -> String {
    String::from_utf8(out.stderr.clone()).unwrap()
}

/// An input record for a text message.
pub fn msg(role: &str, id: &str, text: &str) -> serde_json::Value {
    json!({"kind": "message", "id": id, "data": {"role": role, "content": [{"type": "text", "text": text}]}})
}

fn put(s: &Session, id: &str, parent: Parent, body: EntryBody) {
    s.append_entry(NewEntry {
        id: Some(EntryId::parse(id).unwrap()),
        parent,
        body,
    })
    .unwrap();
}

fn label(name: &str, target: &str) -> EntryBody {
    EntryBody::Label(cairn::Label {
        name: name.into(),
        target: Some(eid(target)),
    })
}

fn eid(id: &str) -> EntryId {
    EntryId::parse(id).unwrap()
}

/// Builds the fixture: a storyboard with a tool call, app-state changes, a
/// label, a side branch left by a checkout, a compaction, a settings change,
/// hostile escape sequences in a message, and a crash (a torn tail cut and
/// saved by a writer). Ids and times are fixed. Also a second small session.
pub fn storyboard(home: &Home) {
    let store = home.store();
    let s = store
        .create(NewSession {
            id: Some(SessionId::parse(STORY).unwrap()),
            title: Some("comic storyboard".into()),
            cwd: Some("/work".into()),
            app_state: Some(json!({})),
            ..NewSession::default()
        })
        .unwrap();
    put(
        &s,
        "u1",
        Parent::Leaf,
        user("Draw panel 1: the hero eats a glowing mushroom and powers up."),
    );
    put(
        &s,
        "a1",
        Parent::Leaf,
        EntryBody::Message(Message {
            usage: Some(Usage {
                input: 120,
                output: 30,
                cached: 0,
                cost: None,
            }),
            model: Some("demo-model".into()),
            ..calls(
                "Rendering panel 1.",
                &[("call-1", "render_panel", json!({"panel": 1}))],
            )
        }),
    );
    put(
        &s,
        "t1",
        Parent::Leaf,
        tool_result("call-1", "panel-1.png rendered"),
    );
    put(
        &s,
        "st1",
        Parent::Leaf,
        EntryBody::AppState(AppStateChange::Set(
            json!({"buff": "power-up", "skill": "ten-palm strike"}),
        )),
    );
    put(&s, "lb1", Parent::Leaf, label("panel-1", "st1"));
    put(
        &s,
        "u2",
        Parent::Leaf,
        user("Panel 2, a side plot: the hero duels the rival."),
    );
    put(
        &s,
        "st2",
        Parent::Leaf,
        EntryBody::AppState(AppStateChange::Patch(
            json!({"buff": "exhausted", "skill": null}),
        )),
    );
    put(
        &s,
        "co1",
        Parent::Entry(eid("st1")),
        EntryBody::Checkout(cairn::Checkout {
            from: Some(eid("st2")),
            summary: Some("The duel was dropped.".into()),
        }),
    );
    put(
        &s,
        "u3",
        Parent::Leaf,
        user("Panel 3: the hero climbs the tower."),
    );
    put(
        &s,
        "a3",
        Parent::Leaf,
        assistant("Panel 3 is done: the climb."),
    );
    put(
        &s,
        "cp1",
        Parent::Leaf,
        EntryBody::Compaction(Compaction {
            summary: "Panels 1-3 drafted; the hero is powered up.".into(),
            first_kept: Some(eid("u3")),
            tokens_before: Some(4200),
        }),
    );
    put(
        &s,
        "se1",
        Parent::Leaf,
        EntryBody::Settings(Settings {
            values: json!({"model": "demo-model-2"})
                .as_object()
                .unwrap()
                .clone(),
        }),
    );
    put(
        &s,
        "u4",
        Parent::Leaf,
        user("Panel 4 \u{1b}[31min red\u{1b}[0m and a bell\u{7}."),
    );
    put(&s, "lb2", Parent::Leaf, label("finale", "u4"));
    drop(s);
    fix_times(&home.file(STORY));
    // A crash: half a record at the end, cut by the next writer.
    let mut bytes = std::fs::read(home.file(STORY)).unwrap();
    bytes.extend_from_slice(
        br#"{"seq":16,"ts":"2026-01-02T03:05:00.000Z","kind":"message","id":"u5","pa"#,
    );
    std::fs::write(home.file(STORY), bytes).unwrap();
    let s = store
        .open(&SessionId::parse(STORY).unwrap(), Access::Write)
        .unwrap();
    assert!(s.open_report().torn.is_some());
    // An operation whose tool call was dispatched (T1) when the process died,
    // then recovered: its result is recorded as TOOL_OUTCOME_UNKNOWN.
    let op = "op-17";
    s.append_op(OpRecord::OpStarted(OpStarted {
        op: op.into(),
        input: Some(eid("u4")),
    }))
    .unwrap();
    s.append_op(OpRecord::ModelAttempted(ModelAttempted {
        op: op.into(),
        attempt: 1,
        entry: eid("a5"),
        provider: Some("scripted".into()),
        model: Some("demo-model-2".into()),
    }))
    .unwrap();
    put(
        &s,
        "a5",
        Parent::Leaf,
        EntryBody::Message(Message {
            role: Role::Assistant,
            content: vec![Block::ToolCall {
                call_id: "call-5".into(),
                name: "render_panel".into(),
                arguments: json!({"panel": 4}),
            }],
            usage: Some(Usage {
                input: 300,
                output: 12,
                cached: 0,
                cost: None,
            }),
            model: Some("demo-model-2".into()),
            stop_reason: Some("tool_use".into()),
        }),
    );
    s.append_op(OpRecord::ToolDispatched(ToolDispatched {
        op: op.into(),
        call_id: "call-5".into(),
        tool: "render_panel".into(),
        args_hash: cairn::args_hash(&json!({"panel": 4})),
        effect: EffectClass::Idempotent,
        key: cairn::idempotency_key(s.id(), op, "call-5"),
        result_entry: eid("t5"),
    }))
    .unwrap();
    drop(s);
    let s = store
        .open(&SessionId::parse(STORY).unwrap(), Access::Write)
        .unwrap();
    let cairn::Verdict::IndeterminateTool { calls, .. } = s.verdict() else {
        panic!("expected an indeterminate tool")
    };
    let resumed = s.resume_operation().unwrap();
    resumed.record_unknown(&calls[0]).unwrap();
    resumed
        .finish(
            cairn::Outcome::Failed,
            Some("interrupted by a crash".into()),
        )
        .unwrap();
    drop(s);
    fix_times(&home.file(STORY));

    let o = store
        .create(NewSession {
            id: Some(SessionId::parse(OTHER).unwrap()),
            title: None,
            cwd: Some("/work".into()),
            ..NewSession::default()
        })
        .unwrap();
    put(&o, "q1", Parent::Leaf, user("What is a cairn?"));
    drop(o);
    fix_times(&home.file(OTHER));
}

/// Rewrites a closed session file with fixed times: record `seq` at
/// 2026-01-02T03:04:SS.000Z with SS = seq, and the header's creation time
/// equal to its record's. The file stays valid (every line re-sealed).
pub fn fix_times(path: &Path) {
    let bytes = std::fs::read(path).unwrap();
    let mut out = Vec::new();
    for line in bytes.split_inclusive(|b| *b == b'\n') {
        let (seq, _, mut body) = frame::decode_line(line).unwrap();
        let ts = format!("2026-01-02T03:04:{:02}.000Z", seq % 60);
        if let Body::Header(h) = &mut body {
            h.created = ts.clone();
        }
        out.extend_from_slice(&frame::encode(seq, &ts, &body));
    }
    std::fs::write(path, out).unwrap();
}

/// Replaces what varies between runs (the store path, torn-tail file stamps)
/// with placeholders.
pub fn normalize(text: &str, home: &Home) -> String {
    let text = text.replace(&home.path().display().to_string(), "[STORE]");
    text.lines()
        .map(|l| match l.find(".torn-") {
            Some(i) => format!("{}.torn-[TIME]", &l[..i]),
            None => l.to_owned(),
        })
        .collect::<Vec<_>>()
        .join("\n")
        + "\n"
}
