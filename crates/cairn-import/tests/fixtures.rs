//! The fixtures of `tests/fixtures/` (written by `make_fixtures.py`, which
//! says where each fact of each format comes from), imported and checked:
//! pi's against pi itself, Claude Code's and Codex's against what their
//! formats say the model is shown. And an import in pieces, as `--watch`
//! does it, ends where an import of the whole file does.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use cairn::{
    Access, Block, EntryBody, MemoryBackend, Role, Session, SessionId, Store, TOOL_OUTCOME_UNKNOWN,
    unanswered_calls,
};
use cairn_import::{FileReport, Format, Ledger, NoteKind, Options, Outcome, import_file};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use support::{canonical_cairn, canonical_pi, oracle, pi_contexts};

fn fixture(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(rel)
}

const CLAUDE: &str = "claude-code/session.jsonl";
const CODEX: &str = "codex/rollout-2025-06-01T12-00-00-0198c0de-codex-fixture.jsonl";

fn import(path: &Path, opts: &Options) -> (Store, FileReport) {
    let store = Store::with_backend(Arc::new(MemoryBackend::new()));
    let mut ledger = Ledger::in_memory();
    let r = import_file(&store, &mut ledger, path, opts).unwrap();
    (store, r)
}

fn open(store: &Store, r: &FileReport) -> Session {
    store
        .open(&SessionId::parse(&r.session).unwrap(), Access::Read)
        .unwrap()
}

/// The source's own session id, from the header's lineage.
fn source_id(s: &Session) -> Option<String> {
    s.header().lineage.imported_from.as_ref()?.source_id.clone()
}

fn notes(r: &FileReport, kind: NoteKind) -> Vec<u64> {
    r.notes
        .iter()
        .filter(|n| n.kind == kind)
        .filter_map(|n| n.line)
        .collect()
}

#[test]
fn pi_fixtures_import_with_pis_own_context() {
    let Some(dir) = oracle() else { return };
    let files = [fixture("pi/v3-everything.jsonl"), fixture("pi/v1.jsonl")];
    let contexts = pi_contexts(&dir, &files);
    for (f, pi) in files.iter().zip(&contexts) {
        let (store, r) = import(f, &Options::default());
        assert_eq!(r.format, "pi");
        let s = open(&store, &r);
        let (cairn_side, _) = canonical_cairn(&s.context(), false);
        assert_eq!(cairn_side, canonical_pi(pi), "{}", f.display());
    }
}

#[test]
fn pi_fixture_keeps_labels_titles_and_unknown_types() {
    let (store, r) = import(&fixture("pi/v3-everything.jsonl"), &Options::default());
    assert_eq!(notes(&r, NoteKind::Kept), vec![18]);
    // toolu_03 was left open where the person branched away: that branch
    // ends there, off the current one, and needs no repair.
    assert!(notes(&r, NoteKind::Repaired).is_empty(), "{:?}", r.notes);
    let s = open(&store, &r);
    assert_eq!(s.title().as_deref(), Some("fix the build"));
    assert_eq!(
        s.labels()
            .get("after-ls")
            .map(ToString::to_string)
            .as_deref(),
        Some("u0000004")
    );
    let ctx = s.context();
    assert_eq!(ctx.settings().get("thinking_level"), Some(&json!("medium")));
    assert_eq!(ctx.settings().get("model"), Some(&json!("claude-sonnet-4")));
    let raw = String::from_utf8(s.raw_record(8).unwrap()).unwrap();
    assert!(
        raw.contains(r#""label":"after ls""#),
        "the label's text is kept: {raw}"
    );
}

#[test]
fn damaged_pi_fixture_reports_every_problem() {
    let (store, r) = import(&fixture("pi/damaged.jsonl"), &Options::default());
    assert_eq!(notes(&r, NoteKind::Damaged), vec![3, 7], "{:?}", r.notes);
    assert_eq!(
        notes(&r, NoteKind::Repaired),
        vec![4, 5, 7],
        "{:?}",
        r.notes
    );
    let s = open(&store, &r);
    assert!(unanswered_calls(&s.context()).unwrap().is_empty());
    let strict = Options {
        strict: true,
        ..Options::default()
    };
    let store2 = Store::with_backend(Arc::new(MemoryBackend::new()));
    let err = import_file(
        &store2,
        &mut Ledger::in_memory(),
        &fixture("pi/damaged.jsonl"),
        &strict,
    )
    .unwrap_err();
    assert!(err.to_string().contains("2 damaged line(s)"), "{err}");
}

#[test]
fn claude_code_fixture_resolves_the_live_leaf_and_merges_split_responses() {
    let (store, r) = import(&fixture(CLAUDE), &Options::default());
    assert_eq!(r.format, "claude-code");
    let s = open(&store, &r);
    assert_eq!(source_id(&s).as_deref(), Some("5b1c2f3e-cc-fixture"));
    assert_eq!(s.header().cwd.as_deref(), Some("/home/dev/app"));
    assert_eq!(
        s.title().as_deref(),
        Some("Fix undefined x"),
        "the custom title wins over the summary"
    );
    let ctx = s.context();
    let (canon, repaired) = canonical_cairn(&ctx, false);
    // The compaction's summary, then the live branch: the stray isMeta line
    // written after the crash is not the leaf.
    assert_eq!(
        canon,
        vec![
            json!({"role": "user", "content": [{"text": format!("{}This session is being continued from a previous conversation. Summary: the build fails on an undefined `x`.{}", cairn_import::pi::COMPACTION_SUMMARY_PREFIX, cairn_import::pi::COMPACTION_SUMMARY_SUFFIX)}]}),
            json!({"role": "user", "content": [{"text": "Define it then."}]}),
            json!({"role": "assistant", "content": [{"call": ["toolu_B", "Edit", {"file_path": "src/main.rs", "old_string": "", "new_string": "let x = 1;"}]}]}),
        ]
    );
    assert_eq!(repaired, vec!["toolu_B"]);
    // Three lines of one response are one entry, named by each line's uuid.
    let merged = s.entry(&s.resolve("a-0003").unwrap()).unwrap().unwrap();
    let EntryBody::Message(m) = &merged.body else {
        panic!()
    };
    assert_eq!(m.content.len(), 3);
    assert!(matches!(&m.content[0], Block::Thinking { signature: Some(sig), .. } if sig == "EqQB"));
    assert_eq!(m.model.as_deref(), Some("claude-sonnet-4"));
    // The history before the compaction is reachable: the compaction hangs
    // under its logical parent.
    let c = s.entry(&s.resolve("c-0001").unwrap()).unwrap().unwrap();
    assert_eq!(c.parent.map(|p| p.to_string()).as_deref(), Some("a-0004"));
    let tool = s.entry(&s.resolve("u-0002").unwrap()).unwrap().unwrap();
    assert!(matches!(&tool.body, EntryBody::Message(m) if m.role == Role::Tool));
    // The progress line is in the tree, skipped by the folds; the sidechain
    // is a branch; side records are log-only.
    let kinds: Vec<&str> = s.nodes().iter().map(|n| n.kind).collect();
    assert!(kinds.contains(&"ignored"));
    assert!(s.resolve("s-0002").is_ok());
    assert_eq!(
        s.op_records().len(),
        4,
        "summary, file-history-snapshot, custom-title, queue-operation"
    );
    assert_eq!(notes(&r, NoteKind::Repaired).len(), 3, "{:?}", r.notes);
}

#[test]
fn codex_fixture_joins_calls_and_turns_a_rollback_into_a_checkout() {
    let (store, r) = import(&fixture(CODEX), &Options::default());
    assert_eq!(r.format, "codex");
    let s = open(&store, &r);
    assert_eq!(source_id(&s).as_deref(), Some("0198c0de-codex-fixture"));
    let ctx = s.context();
    assert_eq!(ctx.settings().get("model"), Some(&json!("gpt-5-codex")));
    assert_eq!(
        ctx.settings().get("reasoning_effort"),
        Some(&json!("medium"))
    );
    // The replacement history is the whole context (its summary once, as
    // Codex framed it), then what came after the compaction.
    let texts = support::texts(&ctx);
    assert_eq!(texts.len(), 6, "{texts:?}");
    assert!(texts[0].starts_with("<environment_context>"));
    assert_eq!(texts[1..2], ["Run the tests"]);
    assert!(texts[2].starts_with("Another language model") && texts[2].ends_with("delete them."));
    assert_eq!(texts[3], "Now add one");
    assert_eq!(
        texts
            .iter()
            .filter(|t| t.contains("asked not to delete"))
            .count(),
        1,
        "the summary is shown once"
    );
    // The history it replaced stays in the log, on another branch.
    let compacted = s
        .branch()
        .into_iter()
        .find(|id| s.entry(id).unwrap().unwrap().body.kind() == "checkout")
        .expect("the compaction is a checkout to a new root");
    assert_eq!(s.entry(&compacted).unwrap().unwrap().parent, None);
    // The rolled-back turn is in the log, not on the branch.
    let branch: Vec<String> = s.branch().iter().map(ToString::to_string).collect();
    let deleted = s.nodes().into_iter().find(|n| {
        s.entry(&n.id)
            .unwrap()
            .and_then(|e| e.body.message().map(|m| m.plain_text()))
            .as_deref()
            == Some("Delete the tests")
    });
    let deleted = deleted.expect("the rolled-back turn is kept");
    assert!(!branch.contains(&deleted.id.to_string()));
    assert!(s.nodes().iter().any(|n| n.kind == "checkout"));
    // The function call's arguments (a JSON string) are parsed, joined to
    // its output on call_id.
    let first_call = s
        .nodes()
        .into_iter()
        .filter_map(|n| s.entry(&n.id).unwrap())
        .find_map(|e| match e.body {
            EntryBody::Message(m) => m.content.iter().find_map(|b| match b {
                Block::ToolCall {
                    call_id, arguments, ..
                } if call_id == "call_T1" => Some(arguments.clone()),
                _ => None,
            }),
            _ => None,
        })
        .unwrap();
    assert_eq!(
        first_call,
        json!({"command": ["cargo", "test"], "timeout_ms": 60000})
    );
    let unknown = ctx
        .messages()
        .last()
        .unwrap()
        .message()
        .expect("read the message")
        .content
        .clone();
    assert!(
        matches!(&unknown[0], Block::ToolResult { call_id, code: Some(c), .. } if call_id == "call_P1" && c == TOOL_OUTCOME_UNKNOWN)
    );
    // session_meta, two UI events, the unknown line type.
    assert_eq!(s.op_records().len(), 4);
}

/// Imports `path` line by line as `--watch` would, then finishes; the
/// context must be the one importing it whole gives.
fn piecewise_equals_whole(rel: &str, cuts: &[usize]) {
    let src = fixture(rel);
    let text = std::fs::read_to_string(&src).unwrap();
    let lines: Vec<&str> = text.split_inclusive('\n').collect();
    let (whole_store, whole) = import(&src, &Options::default());
    let expected = canonical_cairn(&open(&whole_store, &whole).context(), true).0;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(src.file_name().unwrap());
    let store = Store::with_backend(Arc::new(MemoryBackend::new()));
    let mut ledger = Ledger::in_memory();
    let live = Options {
        live: true,
        format: Format::from_name(whole.format),
        ..Options::default()
    };
    let mut session = None;
    for &cut in cuts {
        std::fs::write(&path, lines[..cut].concat()).unwrap();
        let r = import_file(&store, &mut ledger, &path, &live).unwrap();
        assert!(
            session.is_none() || session.as_ref() == Some(&r.session),
            "{rel}: one session"
        );
        session = Some(r.session.clone());
    }
    std::fs::write(&path, &text).unwrap();
    let last = import_file(
        &store,
        &mut ledger,
        &path,
        &Options {
            live: false,
            ..live
        },
    )
    .unwrap();
    assert_eq!(last.outcome, Outcome::Grown);
    let got = canonical_cairn(&open(&store, &last).context(), true).0;
    assert_eq!(got, expected, "{rel}: piecewise import at {cuts:?}");
}

#[test]
fn importing_a_growing_file_in_pieces_ends_where_importing_it_whole_does() {
    piecewise_equals_whole("pi/v3-everything.jsonl", &[2, 5, 6, 9, 14, 17]);
    piecewise_equals_whole("pi/v1.jsonl", &[2, 4]);
    // Cuts between model responses and between a compact boundary and its
    // summary line (what arrives together is joined).
    piecewise_equals_whole(CLAUDE, &[2, 7, 11, 15]);
    piecewise_equals_whole(CODEX, &[4, 7, 10, 13]);
}

#[test]
fn format_is_detected_from_the_first_records() {
    for (rel, format) in [
        ("pi/v1.jsonl", "pi"),
        (CLAUDE, "claude-code"),
        (CODEX, "codex"),
    ] {
        let bytes = std::fs::read(fixture(rel)).unwrap();
        assert_eq!(cairn_import::detect(&bytes).unwrap().name(), format);
    }
    assert!(
        cairn_import::detect(b"{\"hello\":1}\n")
            .unwrap_err()
            .contains("first 50 lines")
    );
    let _ = Value::Null;
}
