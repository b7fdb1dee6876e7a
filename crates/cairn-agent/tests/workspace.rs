//! Workspace snapshots through the agent's tools, and the rewind that
//! brings the files back: each tool path (create, modify, delete, rename,
//! mode change, symlink; through write_file, edit_file and bash), rewind
//! and forward across branches, and conflicts with changes made outside
//! the agent.

// Test helpers panic on a failed step; that is how a test fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use cairn::{EntryId, Session};
use cairn_blobs::BlobStore;
use cairn_workspace::{History, Phase, Scope, WorkspaceError, checkout_files, diff, read_all};
use pretty_assertions::assert_eq;
use serde_json::json;
use support::Harness;

/// One turn of a script: a request matching `word` gets `calls`, then a reply.
fn turn(word: &str, calls: serde_json::Value) -> serde_json::Value {
    json!({"match": word, "replies": [{"text": "On it.", "tool_calls": calls}, {"text": format!("{word} done.")}]})
}

/// A bash call.
fn bash(command: &str) -> serde_json::Value {
    json!([{"name": "bash", "arguments": {"command": command}}])
}

fn script() -> serde_json::Value {
    json!({"turns": [
        turn("create", json!([{"name": "write_file", "arguments": {"path": "a.txt", "content": "one\n"}}])),
        turn("edit", json!([{"name": "edit_file", "arguments": {"path": "a.txt", "old_string": "one", "new_string": "two"}}])),
        turn("shell", json!([{"name": "bash", "arguments": {"command": "mv a.txt b.txt && printf x > new.txt && chmod 755 b.txt && rm del.txt && ln -s b.txt link && printf i > ignored.txt"}}])),
        turn("many", json!([{"name": "bash", "arguments": {"command": "printf changed > f7"}}, {"name": "bash", "arguments": {"command": "true"}}])),
    ]})
}

/// What the working directory holds: path → content (a symlink as `-> target`, a mode other than 644 noted).
fn files(work: &Path) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut stack = vec![work.to_owned()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let e = e.unwrap();
            let p = e.path();
            let rel = p.strip_prefix(work).unwrap().to_string_lossy().into_owned();
            let meta = std::fs::symlink_metadata(&p).unwrap();
            if meta.file_type().is_symlink() {
                out.push((
                    rel,
                    format!("-> {}", std::fs::read_link(&p).unwrap().display()),
                ));
            } else if meta.is_dir() {
                if rel != ".git" {
                    stack.push(p);
                }
            } else {
                let mode = meta.permissions().mode() & 0o777;
                let text = std::fs::read_to_string(&p).unwrap();
                out.push((
                    rel,
                    if mode == 0o644 {
                        text
                    } else {
                        format!("{text} ({mode:o})")
                    },
                ));
            }
        }
    }
    out.sort();
    out
}

fn content(work: &Path, path: &str) -> String {
    files(work)
        .into_iter()
        .find(|(p, _)| p == path)
        .map(|(_, c)| c)
        .unwrap_or_default()
}

fn state(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = pairs
        .iter()
        .map(|(a, b)| ((*a).to_owned(), (*b).to_owned()))
        .collect();
    v.sort();
    v
}

struct Setup {
    h: Harness,
    agent: cairn_agent::Agent,
}

fn setup() -> Setup {
    let h = Harness::new();
    std::fs::write(h.work.join("del.txt"), "keep me").unwrap();
    std::fs::write(h.work.join(".gitignore"), "ignored.txt\n").unwrap();
    std::fs::create_dir_all(h.work.join(".git")).unwrap();
    std::fs::write(h.work.join(".git/HEAD"), "ref: refs/heads/main\n").unwrap();
    for p in ["del.txt", ".gitignore", ".git/HEAD"] {
        std::fs::set_permissions(h.work.join(p), std::fs::Permissions::from_mode(0o644)).unwrap();
    }
    let mut rt = h.runtime(Harness::scripted(script()), Default::default());
    rt.config.auto_approve = true;
    let agent = h.agent(h.new_session(), rt);
    Setup { h, agent }
}

fn blobs(h: &Harness) -> BlobStore {
    BlobStore::new(h.home.join("blobs"))
}

fn rewind(h: &Harness, s: &Session, to: Option<&EntryId>) {
    checkout_files(&h.store, s, &blobs(h), to, None, false).unwrap();
}

/// `diff` between two entries: each path and its action.
fn changes(
    h: &Harness,
    s: &Session,
    a: Option<&EntryId>,
    b: Option<&EntryId>,
) -> Vec<(String, &'static str)> {
    diff(&h.store, s, a, b)
        .unwrap()
        .into_iter()
        .map(|c| (c.path, c.action.name()))
        .collect()
}

fn leaf(s: &Session) -> EntryId {
    s.leaf().unwrap()
}

#[test]
fn each_tool_path_is_rewound_and_forwarded_across_branches() {
    let Setup { h, mut agent } = setup();
    let start = state(&[("del.txt", "keep me"), (".gitignore", "ignored.txt\n")]);
    assert_eq!(files(&h.work), start);

    agent.prompt("create a file").unwrap();
    let created = leaf(agent.session());
    agent.prompt("edit it").unwrap();
    let edited = leaf(agent.session());
    agent.prompt("shell: rename, chmod, delete, link").unwrap();
    let shelled = leaf(agent.session());
    let after_shell = state(&[
        ("b.txt", "two\n (755)"),
        ("new.txt", "x"),
        ("link", "-> b.txt"),
        (".gitignore", "ignored.txt\n"),
        ("ignored.txt", "i"),
    ]);
    assert_eq!(files(&h.work), after_shell);

    let s = agent.session();
    let with = |extra: &[(&str, &str)]| {
        let mut v = start.clone();
        v.extend(state(extra));
        v.retain(|(p, _)| !extra.iter().any(|(q, c)| *q == p && c.is_empty()));
        v.sort();
        v.dedup();
        v
    };
    rewind(&h, s, Some(&edited));
    // The ignored file is not the agent's to restore: it stays.
    assert_eq!(
        files(&h.work),
        with(&[("a.txt", "two\n"), ("ignored.txt", "i")])
    );
    rewind(&h, s, Some(&created));
    assert_eq!(
        files(&h.work),
        with(&[("a.txt", "one\n"), ("ignored.txt", "i")])
    );
    rewind(&h, s, None);
    assert_eq!(files(&h.work), with(&[("ignored.txt", "i")]));
    // Forward again to the end of the first branch.
    rewind(&h, s, Some(&shelled));
    assert_eq!(files(&h.work), after_shell);

    // A second branch from `created`: the same shell command on "one".
    rewind(&h, s, Some(&created));
    agent.prompt("shell again").unwrap();
    let other = leaf(agent.session());
    let s = agent.session();
    assert_eq!(content(&h.work, "b.txt"), "one\n (755)");
    rewind(&h, s, Some(&shelled));
    assert_eq!(files(&h.work), after_shell);
    rewind(&h, s, Some(&other));
    assert_eq!(content(&h.work, "b.txt"), "one\n (755)");

    // The user's .git is never read, written or named.
    assert_eq!(
        std::fs::read_to_string(h.work.join(".git/HEAD")).unwrap(),
        "ref: refs/heads/main\n"
    );
    for (_, r) in read_all(s).unwrap() {
        assert!(
            r.files
                .keys()
                .all(|p| !p.starts_with(".git/") && p != "ignored.txt"),
            "{r:?}"
        );
    }
}

#[test]
fn diff_shows_the_workspace_difference_between_two_entries() {
    let Setup { h, mut agent } = setup();
    agent.prompt("create a file").unwrap();
    let created = leaf(agent.session());
    agent.prompt("shell").unwrap();
    let s = agent.session();
    let shelled = leaf(s);
    let changes = changes(&h, s, Some(&created), Some(&shelled));
    assert_eq!(
        changes,
        vec![
            ("a.txt".to_owned(), "delete"),
            ("b.txt".to_owned(), "create"),
            ("del.txt".to_owned(), "delete"),
            ("link".to_owned(), "create"),
            ("new.txt".to_owned(), "create"),
        ]
    );
}

#[test]
fn a_file_changed_outside_the_agent_is_never_overwritten_silently() {
    let Setup { h, mut agent } = setup();
    agent.prompt("create a file").unwrap();
    let created = leaf(agent.session());
    agent.prompt("edit it").unwrap();
    let s = agent.session();
    let before = leaf(s);
    std::fs::write(h.work.join("a.txt"), "mine, by hand\n").unwrap();
    let e = checkout_files(&h.store, s, &blobs(&h), Some(&created), None, false).unwrap_err();
    let WorkspaceError::Conflicts(conflicts) = &e else {
        panic!("{e}");
    };
    assert_eq!(conflicts.len(), 1);
    assert_eq!(conflicts[0].path, "a.txt");
    assert!(e.to_string().contains("--force"), "{e}");
    // Nothing moved: neither the conversation nor the file.
    assert_eq!(leaf(s), before);
    assert_eq!(
        std::fs::read_to_string(h.work.join("a.txt")).unwrap(),
        "mine, by hand\n"
    );
    // Forced, it is overwritten — and the hand-made content is still in the blob store.
    let report = checkout_files(&h.store, s, &blobs(&h), Some(&created), None, true).unwrap();
    assert_eq!(report.overwritten, vec!["a.txt".to_owned()]);
    assert_eq!(
        std::fs::read_to_string(h.work.join("a.txt")).unwrap(),
        "one\n"
    );
    let sha = cairn_blobs::digest(b"mine, by hand\n");
    assert!(blobs(&h).contains(&sha));
}

#[test]
fn unchanged_files_cost_nothing() {
    let Setup { h, mut agent } = setup();
    for i in 0..50 {
        std::fs::write(h.work.join(format!("f{i}")), format!("file {i}")).unwrap();
    }
    std::fs::write(h.work.join("big"), "large enough for a blob\n".repeat(200)).unwrap();
    agent.prompt("many").unwrap();
    let s = agent.session();
    let records = read_all(s).unwrap();
    let tree: Vec<_> = records
        .iter()
        .filter(|(_, r)| r.scope == Scope::Tree)
        .collect();
    assert_eq!(tree.len(), 4, "{records:?}");
    // The first scan sees every file once; then only what changed.
    assert_eq!(tree[0].1.phase, Phase::Before);
    assert_eq!(tree[0].1.files.len(), 53);
    assert_eq!(tree[1].1.phase, Phase::After);
    assert_eq!(tree[1].1.files.keys().collect::<Vec<_>>(), vec!["f7"]);
    assert!(tree[2].1.files.is_empty() && tree[3].1.files.is_empty());
    // Small text files are kept in the records themselves; a larger one
    // is stored once, as a blob.
    let inline = tree[0]
        .1
        .files
        .values()
        .flatten()
        .filter(|s| s.text.is_some());
    assert_eq!(inline.count(), 52);
    assert_eq!(walk_count(&h.home.join("blobs")), 1);
    assert!(!History::read(s).unwrap().is_empty());
}

fn walk_count(dir: &Path) -> usize {
    let mut n = 0;
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            n += walk_count(&p);
        } else if p.extension().is_some_and(|x| x == "zst") {
            n += 1;
        }
    }
    n
}

#[test]
fn a_store_kept_inside_the_working_directory_is_not_snapshotted() {
    let h = Harness::new();
    let inside = h.work.join(".cairn");
    std::fs::create_dir_all(inside.join("sessions")).unwrap();
    std::fs::write(inside.join("sessions/x.jsonl"), "a log\n").unwrap();
    let mut rt = h.runtime(Harness::scripted(script()), Default::default());
    rt.config.auto_approve = true;
    rt.env = cairn_agent::tools::ToolEnv::new(&h.work, inside.join("blobs"));
    let mut agent = h.agent(h.new_session(), rt);
    agent.prompt("many").unwrap();
    let records = read_all(agent.session()).unwrap();
    assert!(!records.is_empty());
    for (_, r) in records {
        assert!(r.files.keys().all(|p| !p.starts_with(".cairn/")), "{r:?}");
    }
}

#[test]
fn a_side_effect_the_recovery_loop_reruns_is_snapshotted_around() {
    let h = Harness::new();
    std::fs::write(h.work.join("tally"), "before\n").unwrap();
    // Crashed after the T1 of a bash call, before its result.
    let s = h.new_session();
    let id = s.id().clone();
    let op = s
        .start_operation(cairn::Message::text(cairn::Role::User, "go"))
        .unwrap();
    let t = op.model_attempt(None, None).unwrap();
    let call = cairn::testkit::build::calls(
        "",
        &[(
            "c1",
            "bash",
            json!({"command": "printf rerun >> tally && mkdir made"}),
        )],
    );
    op.record_assistant(t, call).unwrap();
    let called = leaf(&s);
    op.dispatch_tool("c1", cairn::EffectClass::SideEffect)
        .unwrap();
    drop(op);
    drop(s);
    let done = json!({"turns": [{"replies": [{"text": "unused"}, {"text": "All done."}]}]});
    let mut rt = h.runtime(Harness::scripted(done), Default::default());
    rt.config.on_unknown = cairn_agent::OnUnknown::Rerun;
    let mut agent = h.agent(h.store.open(&id, cairn::Access::Write).unwrap(), rt);
    agent.resume().unwrap();
    assert_eq!(content(&h.work, "tally"), "before\nrerun");

    let records = read_all(agent.session()).unwrap();
    let phases: Vec<(Phase, Option<&str>)> = records
        .iter()
        .map(|(_, r)| (r.phase, r.call_id.as_deref()))
        .collect();
    assert_eq!(
        phases,
        vec![(Phase::Before, Some("c1")), (Phase::After, Some("c1"))]
    );
    let result = records[1].1.at.clone().unwrap();
    assert_eq!(
        agent.session().entry(&result).unwrap().unwrap().parent,
        Some(called.clone()),
        "the after snapshot is at the call's result"
    );
    assert!(records[1].1.files["made"].as_ref().unwrap().dir);
    // So the rewind (to before the call) takes the re-run's effect away.
    let asked = agent.session().entry(&called).unwrap().unwrap().parent;
    rewind(&h, agent.session(), asked.as_ref());
    assert_eq!(content(&h.work, "tally"), "before\n");
    assert!(!h.work.join("made").exists());
}

/// An agent whose process "dies" right after `tool` did its work, before
/// its result is recorded: the hook unwinds out of the loop, which leaves
/// the log as a SIGKILL would (the `before` snapshot and the T1 durable,
/// no `after`, no result); then a new agent resumes the session.
fn crash_then_resume(
    h: &Harness,
    mut agent: cairn_agent::Agent,
    request: &str,
    tool: &'static str,
) -> cairn_agent::Agent {
    let id = agent.session().id().clone();
    agent.runtime().after_tool_effect = Some(Box::new(move |name, _| {
        assert!(name != tool, "the process dies here");
    }));
    let died = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| agent.prompt(request)));
    assert!(died.is_err(), "the crash point was reached");
    let rt = agent.runtime();
    let script = std::mem::replace(&mut rt.provider, Harness::scripted(json!({"turns": []})));
    drop(agent);
    let mut rt = h.runtime(script, Default::default());
    rt.config.auto_approve = true;
    rt.config.on_unknown = cairn_agent::OnUnknown::Mark;
    let mut agent = h.agent(h.store.open(&id, cairn::Access::Write).unwrap(), rt);
    agent.resume().unwrap();
    agent
}

#[test]
fn rewind_brings_back_the_files_of_a_tool_that_died_before_its_result() {
    let Setup { h, mut agent } = setup();
    agent.prompt("create a file").unwrap();
    let created = leaf(agent.session());
    let at_created = files(&h.work);
    let agent = crash_then_resume(&h, agent, "shell", "bash");
    // The crashed call's changes are on record, at its result entry.
    let s = agent.session();
    let after: Vec<_> = read_all(s)
        .unwrap()
        .into_iter()
        .filter(|(_, r)| r.phase == Phase::After && r.scope == Scope::Tree)
        .collect();
    assert_eq!(after.len(), 1, "{after:?}");
    assert!(after[0].1.files.contains_key("new.txt"));
    assert!(h.work.join("new.txt").exists());

    let report = checkout_files(&h.store, s, &blobs(&h), Some(&created), None, false).unwrap();
    // The directory is as it was at the entry, but for the file the crashed
    // command wrote that `.gitignore` keeps out of every snapshot: the
    // report names it.
    let mut now = files(&h.work);
    now.retain(|(p, _)| p != "ignored.txt");
    assert_eq!(now, at_created, "the directory is as it was at the entry");
    let left: Vec<&str> = report
        .unrestorable
        .iter()
        .map(|l| l.path.as_str())
        .collect();
    assert_eq!(
        left,
        ["ignored.txt"],
        "the one file no snapshot recorded is named"
    );
}

#[test]
fn rewind_brings_back_the_files_a_subagent_wrote_in_the_same_directory() {
    let h = Harness::new();
    std::fs::write(h.work.join("keep.txt"), "kept\n").unwrap();
    std::fs::set_permissions(
        h.work.join("keep.txt"),
        std::fs::Permissions::from_mode(0o644),
    )
    .unwrap();
    let script = json!({"turns": [
        turn("letter", json!([{"name": "delegate", "arguments": {"task": "write the balloon"}}])),
        turn("write the balloon", bash("printf hi > balloons.txt && mkdir -p art && printf x > art/b.txt")),
        turn("start", json!([{"name": "write_file", "arguments": {"path": "a.txt", "content": "a\n"}}])),
    ]});
    let provider = Harness::scripted(script);
    let mut rt = h.runtime(std::sync::Arc::clone(&provider), Default::default());
    rt.config.auto_approve = true;
    let sub = cairn_agent::delegate::Subagents {
        store: h.store.clone(),
        provider,
        tools: cairn_agent::tools::Registry::standard(),
        env: rt.env.clone(),
        config: cairn_agent::AgentConfig {
            auto_approve: true,
            ..rt.config.clone()
        },
        max_depth: 1,
        observer: std::sync::Arc::new(|| Box::new(cairn_agent::observer::Silent)),
        prompter: std::sync::Arc::new(|| Box::new(cairn_agent::prompt::Batch)),
        after_tool_effect: None,
    };
    rt.tools
        .add(std::sync::Arc::new(cairn_agent::delegate::Delegate::new(
            sub,
        )));
    let mut agent = h.agent(h.new_session(), rt);
    agent.prompt("start").unwrap();
    let started = leaf(agent.session());
    let at_started = files(&h.work);
    agent.prompt("letter panel 3").unwrap();
    assert_eq!(content(&h.work, "balloons.txt"), "hi");
    let s = agent.session();
    assert_eq!(h.store.children(s.id()).unwrap().len(), 1);

    let changes = changes(&h, s, Some(&started), s.leaf().as_ref());
    assert_eq!(
        changes,
        [
            ("art".to_owned(), "create"),
            ("art/b.txt".to_owned(), "create"),
            ("balloons.txt".to_owned(), "create")
        ]
    );
    let report = checkout_files(&h.store, s, &blobs(&h), Some(&started), None, false).unwrap();
    assert_eq!(
        files(&h.work),
        at_started,
        "the directory is as it was at the entry"
    );
    assert!(report.unrestorable.is_empty(), "{report:?}");
}

#[test]
fn rewind_names_a_file_over_the_snapshot_limit_it_cannot_bring_back() {
    let h = Harness::new();
    std::fs::write(h.work.join("big.bin"), "0123456789abcdefghij").unwrap();
    std::fs::write(h.work.join("small.txt"), "s").unwrap();
    let script = json!({"turns": [
        turn("look", bash("true")),
        turn("change", bash("printf short > big.bin && printf t > small.txt")),
    ]});
    let mut rt = h.runtime(Harness::scripted(script), Default::default());
    rt.config.auto_approve = true;
    rt.env.snapshots = Some(cairn_workspace::Limits {
        max_files: 100,
        max_file_bytes: 16,
    });
    let mut agent = h.agent(h.new_session(), rt);
    agent.prompt("look").unwrap();
    let looked = leaf(agent.session());
    agent.prompt("change").unwrap();
    let s = agent.session();
    let report = checkout_files(&h.store, s, &blobs(&h), Some(&looked), None, false).unwrap();
    // small.txt is back; big.bin's content at the entry was never kept,
    // so it stays as it is, and the report says so by name.
    assert_eq!(content(&h.work, "small.txt"), "s");
    assert_eq!(content(&h.work, "big.bin"), "short");
    assert_eq!(report.restored, ["small.txt"]);
    let left: Vec<(&str, &str)> = report
        .unrestorable
        .iter()
        .map(|l| (l.path.as_str(), l.why))
        .collect();
    assert_eq!(left.len(), 1, "{left:?}");
    assert_eq!(left[0].0, "big.bin");
    assert!(
        left[0].1.contains("larger than the snapshot limit"),
        "{left:?}"
    );
}

#[test]
fn rewind_names_a_file_a_tool_named_outside_the_working_directory() {
    let h = Harness::new();
    let outside = h.dir.path().join("outside.txt");
    std::fs::write(&outside, "mine").unwrap();
    let script = json!({"turns": [
        turn("look", bash("true")),
        turn("write", json!([{"name": "write_file", "arguments": {"path": outside.display().to_string(), "content": "x"}}])),
    ]});
    let mut rt = h.runtime(Harness::scripted(script), Default::default());
    rt.config.auto_approve = true;
    let mut agent = h.agent(h.new_session(), rt);
    agent.prompt("look").unwrap();
    let looked = leaf(agent.session());
    agent.prompt("write outside").unwrap();
    // The file tools refuse a path outside the working directory; the
    // call named it all the same.
    assert_eq!(std::fs::read_to_string(&outside).unwrap(), "mine");
    let s = agent.session();
    let report = checkout_files(&h.store, s, &blobs(&h), Some(&looked), None, false).unwrap();
    assert_eq!(
        std::fs::read_to_string(&outside).unwrap(),
        "mine",
        "never touched by a restore"
    );
    let left: Vec<&str> = report
        .unrestorable
        .iter()
        .map(|l| l.path.as_str())
        .collect();
    assert_eq!(left, [outside.display().to_string()]);
    assert!(
        report.unrestorable[0]
            .why
            .contains("outside the working directory")
    );
}

#[test]
fn rewind_names_the_files_past_a_snapshots_path_limit() {
    let h = Harness::new();
    for name in ["a", "b", "c", "d", "e"] {
        std::fs::write(h.work.join(name), name).unwrap();
    }
    let script = json!({"turns": [
        turn("look", bash("true")),
        turn("change", bash("printf x > new.txt && printf changed > a && printf changed > e")),
    ]});
    let mut rt = h.runtime(Harness::scripted(script), Default::default());
    rt.config.auto_approve = true;
    rt.env.snapshots = Some(cairn_workspace::Limits {
        max_files: 3,
        max_file_bytes: 1 << 20,
    });
    let mut agent = h.agent(h.new_session(), rt);
    agent.prompt("look").unwrap();
    let looked = leaf(agent.session());
    let at_looked = files(&h.work);
    agent.prompt("change").unwrap();
    let s = agent.session();
    assert!(read_all(s).unwrap().iter().any(|(_, r)| r.truncated));
    let report = checkout_files(&h.store, s, &blobs(&h), Some(&looked), None, false).unwrap();
    // Each path is as it was at the entry, or named.
    let left: Vec<&str> = report
        .unrestorable
        .iter()
        .map(|l| l.path.as_str())
        .collect();
    let now = files(&h.work);
    for (path, content) in &now {
        let before = at_looked.iter().find(|(p, _)| p == path).map(|(_, c)| c);
        assert!(
            before == Some(content) || left.contains(&path.as_str()),
            "{path} is neither as at the entry nor named: {left:?}"
        );
    }
    for (path, _) in &at_looked {
        assert!(
            now.iter().any(|(p, _)| p == path) || left.contains(&path.as_str()),
            "{path} is gone and not named"
        );
    }
    assert!(
        !left.is_empty(),
        "the scan was truncated: something is named"
    );
}
