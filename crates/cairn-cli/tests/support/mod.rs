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
use cairn::testkit::child::succeeded;
use cairn::{
    Access, AppStateChange, Block, Body, Compaction, EffectClass, EntryBody, EntryId, Message,
    NewEntry, NewSession, OpRecord, Parent, Role, Session, SessionId, Settings, Store, Usage,
};
use cairn::{ModelAttempted, OpStarted, ToolDispatched};
use serde_json::json;

/// `cairn --store STORE --color never …` run in `cwd`, with a fixed width
/// and no inherited store: for tests that run on every kind of store (a
/// directory, `sqlite:PATH`).
pub fn cairn_in(store: &str, cwd: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_cairn"));
    c.current_dir(cwd)
        .env_remove("CAIRN_HOME")
        .env("COLUMNS", "80")
        .args(["--color", "never", "--store", store]);
    c
}

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
        let out = succeeded(
            self.cairn()
                .args(["new", "--title", title])
                .output()
                .unwrap(),
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
    let cairn::Verdict::IndeterminateTool { calls, .. } = s.verdict().expect("the verdict") else {
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

/// The delegating fixture session's id (`delegation`).
pub const BOSS: &str = "01jf0000000000000000000b0s";
/// Its subagent session's id.
pub const HELPER: &str = "01jf0000000000000000000c1d";

/// One operation of the delegation fixture, written record by record with
/// fixed ids.
struct Run<'s> {
    s: &'s Session,
    op: String,
}

impl Run<'_> {
    fn record(&self, r: OpRecord) {
        self.s.append_op(r).unwrap();
    }

    fn model(&self, entry: &str, m: Message) {
        self.record(OpRecord::ModelAttempted(ModelAttempted {
            op: self.op.clone(),
            attempt: 1,
            entry: eid(entry),
            provider: Some("scripted".into()),
            model: Some("demo-model".into()),
        }));
        put(
            self.s,
            entry,
            Parent::Leaf,
            EntryBody::Message(Message {
                usage: Some(Usage {
                    input: 200,
                    output: 20,
                    cached: 0,
                    cost: None,
                }),
                model: Some("demo-model".into()),
                ..m
            }),
        );
    }

    fn ask(&self, call: &str, tool: &str, approved: bool) {
        self.record(OpRecord::ApprovalRequested(cairn::ApprovalRequested {
            op: self.op.clone(),
            call_id: call.into(),
            tool: tool.into(),
        }));
        self.record(OpRecord::ApprovalResolved(cairn::ApprovalResolved {
            op: self.op.clone(),
            call_id: call.into(),
            approved,
            by: Some("person".into()),
        }));
    }

    fn dispatch(&self, call: &str, tool: &str, args: serde_json::Value, result: &str) {
        self.record(OpRecord::ToolDispatched(ToolDispatched {
            op: self.op.clone(),
            call_id: call.into(),
            tool: tool.into(),
            args_hash: cairn::args_hash(&args),
            effect: EffectClass::SideEffect,
            key: cairn::idempotency_key(self.s.id(), &self.op, call),
            result_entry: eid(result),
        }));
    }

    fn answer(&self, id: &str, call: &str, content: Vec<Block>, is_error: bool) {
        put(
            self.s,
            id,
            Parent::Leaf,
            EntryBody::Message(Message {
                role: Role::Tool,
                content: vec![Block::ToolResult {
                    call_id: call.into(),
                    content,
                    is_error,
                    code: None,
                }],
                usage: None,
                model: None,
                stop_reason: None,
            }),
        );
    }

    fn finish(self) {
        self.record(OpRecord::OpFinished(cairn::OpFinished {
            op: self.op.clone(),
            outcome: cairn::Outcome::Completed,
            error: None,
        }));
    }
}

fn start<'s>(s: &'s Session, op: &str, input: &str, text: &str) -> Run<'s> {
    put(s, input, Parent::Leaf, user(text));
    s.append_op(OpRecord::OpStarted(OpStarted {
        op: op.into(),
        input: Some(eid(input)),
    }))
    .unwrap();
    Run { s, op: op.into() }
}

fn text(t: &str) -> Block {
    Block::Text { text: t.into() }
}

/// Builds the delegation fixture: one operation whose model reads a file
/// (ok), publishes after a person approved it, is refused a deletion (a
/// person denied it), fails a render (a tool error), and delegates to a
/// subagent session, whose own operation runs a tool and answers; ids and
/// times are fixed.
pub fn delegation(home: &Home) {
    let store = home.store();
    let boss = store
        .create(NewSession {
            id: Some(SessionId::parse(BOSS).unwrap()),
            title: Some("issue 7 of the comic".into()),
            cwd: Some("/work".into()),
            ..NewSession::default()
        })
        .unwrap();
    let run = start(
        &boss,
        "op-1",
        "u1",
        "Finish issue 7: check the notes, publish, clean up.",
    );
    run.model(
        "a1",
        calls(
            "Reading the notes and publishing.",
            &[
                ("call-1", "read_file", json!({"path": "notes.md"})),
                ("call-2", "publish", json!({"issue": 7})),
                ("call-3", "delete_drafts", json!({"all": true})),
            ],
        ),
    );
    run.dispatch("call-1", "read_file", json!({"path": "notes.md"}), "t1");
    run.answer(
        "t1",
        "call-1",
        vec![text("Panel 6 needs more ink.\nPanel 7 is fine.")],
        false,
    );
    run.ask("call-2", "publish", true);
    run.dispatch("call-2", "publish", json!({"issue": 7}), "t2");
    run.answer("t2", "call-2", vec![text("issue 7 published")], false);
    run.ask("call-3", "delete_drafts", false);
    run.answer(
        "t3",
        "call-3",
        vec![text("A person denied this call; it was not run.")],
        true,
    );
    run.model(
        "a2",
        calls(
            "Rendering panel 6 and asking the ink supplier.",
            &[
                ("call-4", "render_panel", json!({"panel": 6})),
                ("call-5", "delegate", json!({"task": "Order more ink."})),
            ],
        ),
    );
    run.dispatch("call-4", "render_panel", json!({"panel": 6}), "t4");
    run.answer("t4", "call-4", vec![text("renderer out of ink")], true);
    run.dispatch(
        "call-5",
        "delegate",
        json!({"task": "Order more ink."}),
        "t5",
    );

    let helper = store
        .create(NewSession {
            id: Some(SessionId::parse(HELPER).unwrap()),
            title: Some("ink supplier".into()),
            cwd: Some("/work".into()),
            lineage: cairn::Lineage {
                forked_from: None,
                parent: Some(cairn::SpawnOrigin {
                    session: boss.id().clone(),
                    call_id: "call-5".into(),
                    depth: 1,
                }),
                ..cairn::Lineage::default()
            },
            ..NewSession::default()
        })
        .unwrap();
    let sub = start(&helper, "op-1", "h1", "Order more ink.");
    sub.model(
        "h2",
        calls(
            "Ordering.",
            &[("call-1", "order", json!({"item": "ink", "qty": 2}))],
        ),
    );
    sub.dispatch("call-1", "order", json!({"item": "ink", "qty": 2}), "h3");
    sub.answer("h3", "call-1", vec![text("order #88 placed")], false);
    sub.model(
        "h4",
        Message::text(Role::Assistant, "Ordered two bottles of ink (order #88)."),
    );
    sub.finish();
    drop(helper);
    fix_times(&home.file(HELPER));

    run.answer(
        "t5",
        "call-5",
        vec![
            text("Ordered two bottles of ink (order #88)."),
            cairn::child_reference(&SessionId::parse(HELPER).unwrap()),
        ],
        false,
    );
    run.model(
        "a3",
        Message::text(Role::Assistant, "Issue 7 is published; ink is on its way."),
    );
    run.finish();
    drop(boss);
    fix_times(&home.file(BOSS));
}
