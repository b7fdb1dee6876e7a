//! The format is a contract (`docs/FORMAT.md`): the conformance corpus in
//! `tests/corpus/` and one test per reader decision.
//!
//! Each corpus case is a directory holding one session file
//! (`<session id>.jsonl`) and `expected.json`: what opening it read-only,
//! `fsck`, the recovery verdict, the status with no writer and the context
//! must be. `corpus_cases_match_their_expected_json` checks every case;
//! the named tests below check one decision each, on its case, with the
//! assertion that matters spelled out.
//!
//! The corpus is regenerated (after a deliberate format change only) with
//! `CAIRN_WRITE_CORPUS=1 cargo test -p cairn --test format_contract -- --ignored write_corpus`.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::fs;
use std::path::{Path, PathBuf};

use cairn::frame;
use cairn::{
    Access, AppStateChange, Block, Body, Checkout, Compaction, Custom, EffectClass, EntryBody,
    EntryId, Lineage, Message, NewEntry, NewSession, OpenError, Outcome, Parent, Role, SessionId,
    SessionInfo, Settings, Store, ToolOutput, Usage,
};
use serde_json::{Value, json};

fn corpus_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus")
}

/// The session file of a case directory.
fn session_file(dir: &Path) -> PathBuf {
    fs::read_dir(dir)
        .expect("case directory")
        .map(|e| e.expect("entry").path())
        .find(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .unwrap_or_else(|| panic!("{} has no .jsonl file", dir.display()))
}

/// What cairn does with a session file, in the shape of `expected.json`.
fn observe(file: &Path) -> Value {
    let home = tempfile::tempdir().expect("tempdir");
    let sessions = home.path().join("sessions");
    fs::create_dir_all(&sessions).expect("sessions dir");
    let name = file.file_name().expect("file name");
    let path = sessions.join(name);
    fs::copy(file, &path).expect("copy");
    let stem = name.to_str().expect("utf-8").trim_end_matches(".jsonl");
    let id = SessionId::parse(stem).expect("the file is named by its session id");
    let store = Store::open_dir(home.path());
    let report = cairn::fsck::check_file(&path).expect("fsck reads the file");
    let fsck = json!({
        "clean": report.is_clean(),
        "problems": report.problems.iter().map(|p| json!({
            "line": p.line,
            "severity": p.severity,
        })).collect::<Vec<_>>(),
    });
    let mut out = json!({ "session": stem, "fsck": fsck });
    match store.open(&id, Access::Read) {
        Ok(s) => {
            let ctx = s.context();
            out["open"] = json!("ok");
            out["verdict"] =
                serde_json::to_value(s.verdict().expect("the verdict")).expect("verdict");
            out["status"] = serde_json::to_value(store.status(&id).expect("status")).expect("s");
            out["context"] = json!({
                "leaf": ctx.leaf(),
                "messages": ctx.messages().iter().map(|m| json!({
                    "entry": m.entry(),
                    "message": m.message().expect("read the message"),
                })).collect::<Vec<_>>(),
                "app_state": ctx.app_state(),
                "settings": ctx.settings(),
                "labels": ctx.labels(),
                "title": s.title(),
            });
        }
        Err(OpenError::Damaged(d)) => out["open"] = json!({ "damaged": { "line": d.line } }),
        Err(OpenError::NewerFormat { found, .. }) => {
            out["open"] = json!({ "newer_format": found });
        }
        // No intact header (a torn or damaged line 1, an empty file): the
        // damage is at line 1, as fsck reports it.
        Err(OpenError::NotASession { .. }) => out["open"] = damaged_at(1),
        Err(e) => panic!("{}: unexpected open error: {e}", file.display()),
    }
    // The file is never changed by a read-only open or fsck.
    assert_eq!(
        fs::read(&path).expect("read"),
        fs::read(file).expect("read")
    );
    out
}

/// Checks one case against its `expected.json`; returns the observation.
fn case(name: &str) -> Value {
    let dir = corpus_dir().join(name);
    let expected: Value = serde_json::from_slice(
        &fs::read(dir.join("expected.json"))
            .unwrap_or_else(|e| panic!("{name}/expected.json: {e}")),
    )
    .expect("expected.json is JSON");
    let mut seen = observe(&session_file(&dir));
    seen["about"] = expected["about"].clone();
    seen["written_by"] = expected["written_by"].clone();
    pretty_assertions::assert_eq!(seen, expected, "corpus case {name}");
    seen
}

#[test]
fn corpus_cases_match_their_expected_json() {
    let mut names: Vec<String> = fs::read_dir(corpus_dir())
        .expect("corpus dir")
        .map(|e| e.expect("entry"))
        .filter(|e| e.path().is_dir())
        .map(|e| e.file_name().into_string().expect("utf-8"))
        .collect();
    names.sort();
    assert!(names.len() >= 20, "the corpus lost cases: {names:?}");
    for name in &names {
        case(name);
    }
}

/// Every case written by cairn is made of lines exactly as cairn writes
/// them: decoding and re-encoding each line gives back its bytes.
#[test]
fn corpus_files_written_by_cairn_are_byte_exact_cairn_output() {
    let mut checked = 0;
    for e in fs::read_dir(corpus_dir()).expect("corpus dir") {
        let dir = e.expect("entry").path();
        if !dir.is_dir() {
            continue;
        }
        let expected: Value =
            serde_json::from_slice(&fs::read(dir.join("expected.json")).expect("expected"))
                .expect("json");
        if expected["written_by"] != "cairn" {
            continue;
        }
        let bytes = fs::read(session_file(&dir)).expect("read");
        checked += 1;
        for line in bytes.split_inclusive(|b| *b == b'\n') {
            let (seq, ts, body) = frame::decode_line(line).expect("decodes");
            assert_eq!(
                frame::encode(seq, &ts, &body),
                line,
                "{}: line {} is not what cairn writes",
                dir.display(),
                seq + 1
            );
        }
    }
    assert!(checked >= 6, "only {checked} cases written by cairn");
}

fn open_of(v: &Value) -> &Value {
    &v["open"]
}

fn damaged_at(line: u64) -> Value {
    json!({ "damaged": { "line": line } })
}

/// The lines fsck reports with `severity`.
fn fsck_at(v: &Value, severity: &str) -> Vec<u64> {
    v["fsck"]["problems"]
        .as_array()
        .expect("problems")
        .iter()
        .filter(|p| p["severity"] == severity)
        .map(|p| p["line"].as_u64().expect("line"))
        .collect()
}

// ---- Point 1: what open decodes ----

#[test]
fn an_undecodable_entry_off_branch_opens_when_no_operation_follows_and_fsck_reports_it() {
    let v = case("offbranch_undecodable_no_operation");
    assert_eq!(open_of(&v), "ok");
    assert_eq!(fsck_at(&v, "invalid"), vec![2]);
}

#[test]
fn an_undecodable_entry_after_the_last_op_started_fails_open_even_off_branch() {
    let v = case("offbranch_undecodable_after_op_started");
    assert_eq!(open_of(&v), &damaged_at(4));
    assert_eq!(fsck_at(&v, "damaged"), vec![4]);
}

// ---- Point 2: one rule for frames and payloads ----

#[test]
fn frame_members_out_of_order_are_damage() {
    let v = case("frame_member_order");
    assert_eq!(open_of(&v), &damaged_at(2));
    assert_eq!(fsck_at(&v, "damaged"), vec![2]);
}

#[test]
fn an_extra_frame_member_is_damage() {
    let v = case("frame_extra_member");
    assert_eq!(open_of(&v), &damaged_at(2));
    assert_eq!(fsck_at(&v, "damaged"), vec![2]);
}

#[test]
fn ignorable_false_is_damage() {
    let v = case("frame_ignorable_false");
    assert_eq!(open_of(&v), &damaged_at(2));
    assert_eq!(fsck_at(&v, "damaged"), vec![2]);
}

#[test]
fn whitespace_between_frame_tokens_is_damage() {
    let v = case("frame_whitespace");
    assert_eq!(open_of(&v), &damaged_at(2));
}

#[test]
fn a_minimal_header_opens_with_the_documented_defaults() {
    let v = case("header_minimal");
    assert_eq!(open_of(&v), "ok");
    assert_eq!(v["context"]["app_state"], json!({}));
    assert_eq!(v["context"]["title"], Value::Null);
    assert_eq!(v["fsck"]["clean"], true);
}

#[test]
fn lineage_depth_zero_is_refused_by_open_and_fsck() {
    let v = case("header_lineage_depth_zero");
    assert_eq!(open_of(&v), &damaged_at(1));
    assert_eq!(fsck_at(&v, "damaged"), vec![1]);
}

#[test]
fn null_counts_as_absent_for_optional_fields() {
    let v = case("null_as_absent");
    assert_eq!(open_of(&v), "ok");
    assert_eq!(v["fsck"]["clean"], true);
    let m = &v["context"]["messages"][0]["message"];
    assert!(m.get("model").is_none() && m.get("stop_reason").is_none());
    assert_eq!(v["context"]["title"], "from the header");
}

#[test]
fn null_reads_as_the_default_except_where_any_json_is_allowed() {
    let v = case("null_as_default");
    assert_eq!(open_of(&v), "ok");
    assert_eq!(v["fsck"]["clean"], true);
    assert_eq!(v["context"]["app_state"], Value::Null);
    let messages = &v["context"]["messages"];
    assert_eq!(messages[0]["message"]["usage"]["input"], 0);
    assert_eq!(
        messages[0]["message"]["content"][0]["arguments"],
        Value::Null
    );
    assert_eq!(messages[1]["message"]["content"][0]["is_error"], false);
    // The custom entry is not visible: three entries, two messages.
    assert_eq!(messages.as_array().map(Vec::len), Some(2));
}

#[test]
fn usage_without_cached_and_checkout_without_from_take_their_defaults() {
    let v = case("defaults_usage_checkout");
    assert_eq!(open_of(&v), "ok");
    assert_eq!(v["fsck"]["clean"], true);
    let usage = &v["context"]["messages"][0]["message"]["usage"];
    assert_eq!(usage["cached"], 0);
}

#[test]
fn an_upper_case_sha256_is_kept_as_written() {
    let v = case("blob_sha256_upper_case");
    assert_eq!(open_of(&v), "ok");
    let block = &v["context"]["messages"][0]["message"]["content"][0];
    assert_eq!(block["sha256"], "E3B0C442");
}

#[test]
fn a_tool_call_nested_in_a_tool_result_is_refused_by_open_and_fsck() {
    let v = case("tool_result_nested_tool_call");
    assert_eq!(open_of(&v), &damaged_at(3));
    assert_eq!(fsck_at(&v, "damaged"), vec![3]);
}

/// The writer refuses first: a session cairn wrote never holds one.
#[test]
fn a_tool_call_nested_in_a_tool_result_is_refused_at_append() {
    let home = tempfile::tempdir().expect("tempdir");
    let store = Store::open_dir(home.path());
    let s = store.create(NewSession::default()).expect("create");
    let call = Block::ToolCall {
        call_id: "c1".into(),
        name: "t".into(),
        arguments: json!({}),
    };
    s.append(EntryBody::Message(Message {
        role: Role::Assistant,
        content: vec![call.clone()],
        usage: None,
        model: None,
        stop_reason: None,
    }))
    .expect("call");
    let nested = Message {
        role: Role::Tool,
        content: vec![Block::ToolResult {
            call_id: "c1".into(),
            content: vec![call],
            is_error: false,
            code: None,
        }],
        usage: None,
        model: None,
        stop_reason: None,
    };
    let before = s.len();
    let e = s
        .append(EntryBody::Message(nested))
        .expect_err("refused")
        .to_string();
    assert!(e.contains("text, image and blob"), "{e}");
    assert_eq!(s.len(), before);
}

#[test]
fn an_empty_custom_namespace_is_refused_by_open_and_fsck() {
    let v = case("custom_namespace_empty");
    assert_eq!(open_of(&v), &damaged_at(2));
    assert_eq!(fsck_at(&v, "damaged"), vec![2]);
}

#[test]
fn a_label_name_with_a_space_is_refused_by_open_and_fsck_alike() {
    let v = case("label_name_with_space");
    assert_eq!(open_of(&v), &damaged_at(3));
    assert_eq!(fsck_at(&v, "damaged"), vec![3]);
}

// ---- Point 3: numbers and strings (RFC 7493, I-JSON) ----

#[test]
fn an_integer_beyond_64_bits_is_refused_not_rounded() {
    let v = case("number_integer_beyond_64_bits");
    assert_eq!(open_of(&v), &damaged_at(2));
    assert_eq!(fsck_at(&v, "damaged"), vec![2]);
}

#[test]
fn a_64_bit_integer_is_kept_exactly() {
    let v = case("number_64_bit_integers");
    assert_eq!(open_of(&v), "ok");
    assert_eq!(
        v["context"]["app_state"],
        json!({"max": u64::MAX, "min": i64::MIN, "float": 0.1})
    );
}

#[test]
fn a_number_beyond_the_double_range_is_refused() {
    let v = case("number_beyond_double_range");
    assert_eq!(open_of(&v), &damaged_at(2));
}

#[test]
fn a_lone_surrogate_is_refused() {
    let v = case("string_lone_surrogate");
    assert_eq!(open_of(&v), &damaged_at(2));
}

#[test]
fn a_repeated_member_is_refused_in_any_object() {
    for name in ["member_repeated_typed", "member_repeated_untyped"] {
        let v = case(name);
        assert_eq!(open_of(&v), &damaged_at(2), "{name}");
        assert_eq!(fsck_at(&v, "damaged"), vec![2], "{name}");
    }
}

/// `cairn append` decodes its input with the same rule: a number it cannot
/// keep exactly is refused with a message that says what to do.
#[test]
fn an_integer_beyond_64_bits_is_refused_at_append_with_advice() {
    let line = br#"{"seq":0,"ts":"","kind":"settings","id":"x","parent":null,"data":{"values":{"n":12345678901234567890123}}}"#;
    let frame = frame::Frame::parse(line).expect("frame");
    let err = frame::decode_body(&frame).expect_err("refused").to_string();
    assert!(
        err.contains("12345678901234567890123") && err.contains("string"),
        "{err}"
    );
}

// ---- Point 4: what a second reader had to guess ----

#[test]
fn an_unknown_block_type_makes_the_record_invalid() {
    let v = case("block_type_unknown");
    assert_eq!(open_of(&v), &damaged_at(2));
    assert_eq!(fsck_at(&v, "damaged"), vec![2]);
}

#[test]
fn an_unknown_member_of_data_is_ignored() {
    let v = case("data_unknown_member");
    assert_eq!(open_of(&v), "ok");
    assert_eq!(v["fsck"]["clean"], true);
}

#[test]
fn only_the_newest_compaction_counts_even_when_first_kept_reaches_past_an_older_one() {
    let v = case("compaction_newest_counts");
    let messages = v["context"]["messages"].as_array().expect("messages");
    let texts: Vec<&str> = messages
        .iter()
        .map(|m| m["message"]["content"][0]["text"].as_str().expect("text"))
        .collect();
    assert_eq!(
        texts,
        [
            "The conversation before this point was compacted. Summary:\n\nsecond summary",
            "two",
            "three",
            "four"
        ]
    );
}

#[test]
fn a_checkout_summary_is_a_user_message_joined_to_its_prefix_by_a_blank_line() {
    let v = case("checkout_with_summary");
    let last = v["context"]["messages"]
        .as_array()
        .and_then(|m| m.last())
        .expect("a message");
    assert_eq!(last["message"]["role"], "user");
    assert_eq!(
        last["message"]["content"][0]["text"],
        "The conversation returned here from another branch. Summary of that branch:\n\ntried b"
    );
}

#[test]
fn fsck_reports_a_torn_tail_as_torn_and_a_reader_ignores_it() {
    let v = case("torn_tail");
    assert_eq!(open_of(&v), "ok");
    assert_eq!(
        v["fsck"]["problems"],
        json!([{"line": 3, "severity": "torn_tail"}])
    );
}

#[test]
fn fsck_enforces_the_journal_rules() {
    let v = case("journal_record_without_operation");
    assert_eq!(open_of(&v), "ok");
    assert_eq!(fsck_at(&v, "invalid"), vec![2]);
}

#[test]
fn an_open_operation_without_a_writer_is_interrupted() {
    let v = case("operation_provider_interrupted");
    assert_eq!(v["status"], "interrupted");
    assert_eq!(v["verdict"]["verdict"], "provider_interrupted");
}

#[test]
fn an_open_operation_is_running_while_a_writer_holds_the_lock() {
    let dir = corpus_dir().join("operation_provider_interrupted");
    let file = session_file(&dir);
    let home = tempfile::tempdir().expect("tempdir");
    fs::create_dir_all(home.path().join("sessions")).expect("dir");
    fs::copy(
        &file,
        home.path().join("sessions").join(file.file_name().unwrap()),
    )
    .expect("copy");
    let store = Store::open_dir(home.path());
    let id = store.latest().expect("one session");
    let writer = store.open(&id, Access::Write).expect("writer");
    assert_eq!(
        serde_json::to_value(store.status(&id).expect("status")).unwrap(),
        "running"
    );
    drop(writer);
    assert_eq!(
        serde_json::to_value(store.status(&id).expect("status")).unwrap(),
        "interrupted"
    );
}

#[test]
fn a_newer_format_is_refused_by_name() {
    let v = case("header_newer_format");
    assert_eq!(open_of(&v), &json!({ "newer_format": 2 }));
}

// ---- The generator ----

// ---- What a second reader could not tell from the text alone ----

#[test]
fn fields_with_a_value_default_are_written_even_at_their_default() {
    case("defaults_written_by_cairn");
    let dir = corpus_dir().join("defaults_written_by_cairn");
    let text = fs::read_to_string(session_file(&dir)).expect("read");
    assert!(text.contains(r#""usage":{"input":0,"output":0,"cached":0}"#));
    assert!(text.contains(r#""visible":false"#));
    assert!(text.contains(r#""data":{"from":null}"#));
    for absent in ["cost", "model", "stop_reason", "summary"] {
        assert!(
            !text.contains(&format!("\"{absent}\"")),
            "{absent} is written"
        );
    }
}

#[test]
fn fsck_lists_the_child_of_a_damaged_line_but_not_its_grandchild() {
    let v = case("damaged_line_children");
    assert_eq!(open_of(&v), &damaged_at(3));
    assert_eq!(fsck_at(&v, "damaged"), [3]);
    assert_eq!(fsck_at(&v, "invalid"), [4]);
}

#[test]
fn op_started_naming_no_entry_is_refused_and_so_is_the_rest_of_its_operation() {
    let v = case("op_started_input_unknown");
    assert_eq!(open_of(&v), "ok");
    assert_eq!(fsck_at(&v, "invalid"), [3, 4, 6]);
}

#[test]
fn a_torn_tail_of_two_lines_is_listed_line_by_line() {
    let v = case("torn_tail_two_lines");
    assert_eq!(open_of(&v), "ok");
    assert_eq!(fsck_at(&v, "torn_tail"), [3, 4]);
    assert_eq!(v["context"]["leaf"], "u1");
}

#[test]
fn a_torn_header_is_damage_at_line_one_not_a_torn_tail() {
    let v = case("torn_header");
    assert_eq!(open_of(&v), &damaged_at(1));
    assert_eq!(fsck_at(&v, "damaged"), [1]);
}

#[test]
fn a_compaction_may_keep_from_the_leaf_that_holds_an_unanswered_call() {
    let v = case("compaction_keeps_unanswered_call_at_leaf");
    assert_eq!(v["fsck"]["clean"], true);
    assert_eq!(v["verdict"]["verdict"], "tools_not_started");
    assert_eq!(v["context"]["messages"][1]["entry"], "a1");
}

#[test]
fn a_compaction_that_drops_an_unanswered_call_is_refused_by_fsck_not_by_open() {
    let v = case("compaction_drops_unanswered_call");
    assert_eq!(open_of(&v), "ok");
    assert_eq!(fsck_at(&v, "invalid"), [5]);
}

const TS0: &str = "2026-11-30T12:00:00.000Z";

fn ts(seq: u64) -> String {
    format!("2026-11-30T12:00:{:02}.{:03}Z", seq / 1000, seq % 1000)
}

fn eid(s: &str) -> EntryId {
    EntryId::parse(s).expect("entry id")
}

fn sid(n: u32) -> SessionId {
    SessionId::parse(&format!("01jf{n:022}")).expect("session id")
}

fn user(text: &str) -> EntryBody {
    EntryBody::Message(Message::text(Role::User, text))
}

fn assistant(text: &str) -> EntryBody {
    EntryBody::Message(Message::text(Role::Assistant, text))
}

/// A session written by cairn, then made reproducible: every line decoded
/// and re-encoded with a fixed time (and the header's `created` fixed).
struct Gen {
    _home: tempfile::TempDir,
    session: cairn::Session,
}

impl Gen {
    fn new(n: u32, title: Option<&str>) -> Gen {
        Gen::with(NewSession {
            id: Some(sid(n)),
            title: title.map(str::to_owned),
            cwd: Some("/corpus".into()),
            app_state: None,
            lineage: Lineage::default(),
        })
    }

    fn with(opts: NewSession) -> Gen {
        let home = tempfile::tempdir().expect("tempdir");
        let store = Store::open_dir(home.path());
        let session = store.create(opts).expect("create");
        Gen {
            _home: home,
            session,
        }
    }

    fn add(&self, id: &str, parent: Parent, body: EntryBody) {
        self.session
            .append_entry(NewEntry {
                id: Some(eid(id)),
                parent,
                body,
            })
            .expect("append");
    }

    fn at(&self, parent: &str) -> Parent {
        let _ = self;
        Parent::Entry(eid(parent))
    }

    /// The session's lines, normalised.
    fn lines(&self) -> Vec<Vec<u8>> {
        let bytes = fs::read(self.store_path()).expect("read");
        bytes
            .split_inclusive(|b| *b == b'\n')
            .map(|line| {
                let (seq, _, mut body) = frame::decode_line(line).expect("cairn wrote it");
                if let Body::Header(h) = &mut body {
                    h.created = TS0.into();
                }
                frame::encode(seq, &ts(seq), &body)
            })
            .collect()
    }

    fn store_path(&self) -> PathBuf {
        PathBuf::from(self.session.location())
    }
}

/// A line as a writer would frame it, from its covered text (everything
/// before the checksum trailer).
fn sealed(covered: &str) -> Vec<u8> {
    let mut line = covered.as_bytes().to_vec();
    frame::seal(&mut line);
    line
}

/// A canonical entry line with hand-written `data`.
fn entry_line(seq: u64, kind: &str, id: &str, parent: Option<&str>, data: &str) -> Vec<u8> {
    let parent = parent.map_or("null".to_owned(), |p| format!("\"{p}\""));
    sealed(&format!(
        r#"{{"seq":{seq},"ts":"{}","kind":"{kind}","id":"{id}","parent":{parent},"data":{data}"#,
        ts(seq)
    ))
}

/// A canonical header line with hand-written `data`.
fn header_line(data: &str) -> Vec<u8> {
    sealed(&format!(
        r#"{{"seq":0,"ts":"{TS0}","kind":"header","data":{data}"#
    ))
}

/// Writes a case; `by_cairn`: every line is cairn's own output.
fn write_case(name: &str, about: &str, by_cairn: bool, session: &SessionId, lines: &[Vec<u8>]) {
    let dir = corpus_dir().join(name);
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).expect("case dir");
    let file = dir.join(format!("{session}.jsonl"));
    fs::write(&file, lines.concat()).expect("write session");
    let by = if by_cairn { "cairn" } else { "hand" };
    let mut expected = json!({ "about": about, "written_by": by });
    let seen = observe(&file);
    for (k, v) in seen.as_object().expect("object") {
        expected[k] = v.clone();
    }
    let mut text = serde_json::to_string_pretty(&expected).expect("json");
    text.push('\n');
    fs::write(dir.join("expected.json"), text).expect("write expected");
}

/// A header as cairn writes it, for hand-built cases.
fn header_data(n: u32) -> String {
    format!(
        r#"{{"format":1,"session":"{}","created":"{TS0}","cwd":"/corpus","title":null,"app_state":{{}},"lineage":{{}},"writer":"cairn/0.1.0"}}"#,
        sid(n)
    )
}

fn hand_case(name: &str, about: &str, n: u32, rest: &[Vec<u8>]) {
    let mut lines = vec![header_line(&header_data(n))];
    lines.extend_from_slice(rest);
    write_case(name, about, false, &sid(n), &lines);
}

#[test]
#[ignore = "writes the corpus: run with CAIRN_WRITE_CORPUS=1 after a deliberate format change"]
fn write_corpus() {
    if std::env::var_os("CAIRN_WRITE_CORPUS").is_none() {
        return;
    }
    // -- Valid sessions written by cairn --
    {
        let g = Gen::new(1, Some("a conversation"));
        let s = &g.session;
        g.add("u1", Parent::Leaf, user("list the files"));
        let call = Message {
            role: Role::Assistant,
            content: vec![
                Block::Thinking {
                    thinking: "use ls".into(),
                    signature: Some("sig".into()),
                },
                Block::ToolCall {
                    call_id: "c1".into(),
                    name: "bash".into(),
                    arguments: json!({"cmd": "ls", "big": 9007199254740993u64}),
                },
            ],
            usage: Some(Usage {
                input: 10,
                output: 5,
                cached: 2,
                cost: Some(0.25),
            }),
            model: Some("m-1".into()),
            stop_reason: Some("tool_use".into()),
        };
        g.add("a1", Parent::Leaf, EntryBody::Message(call));
        let result = Message {
            role: Role::Tool,
            content: vec![Block::ToolResult {
                call_id: "c1".into(),
                content: vec![
                    Block::Text {
                        text: "a.txt\nb.txt".into(),
                    },
                    Block::Blob {
                        uri: "file:///tmp/out".into(),
                        media_type: Some("text/plain".into()),
                        size: Some(12),
                        sha256: Some("e3b0c442".into()),
                    },
                ],
                is_error: false,
                code: None,
            }],
            usage: None,
            model: None,
            stop_reason: None,
        };
        g.add("r1", Parent::Leaf, EntryBody::Message(result));
        g.add(
            "s1",
            Parent::Leaf,
            EntryBody::AppState(AppStateChange::Set(json!({"cwd": "/", "n": 1}))),
        );
        g.add(
            "s2",
            Parent::Leaf,
            EntryBody::AppState(AppStateChange::Patch(json!({"n": null, "m": [1, 2]}))),
        );
        g.add(
            "t1",
            Parent::Leaf,
            EntryBody::Settings(Settings {
                values: serde_json::from_value(json!({"model": "m-2", "reasoning_effort": "low"}))
                    .unwrap(),
            }),
        );
        g.add("a2", Parent::Leaf, assistant("two files"));
        s.label("start", Some(&eid("u1"))).expect("label");
        g.add(
            "i1",
            Parent::Leaf,
            EntryBody::SessionInfo(SessionInfo {
                title: Some("renamed".into()),
            }),
        );
        g.add(
            "x1",
            Parent::Leaf,
            EntryBody::Custom(Custom {
                namespace: "host.note".into(),
                visible: true,
                content: json!({"note": "shown as JSON text"}),
            }),
        );
        write_case(
            "conversation",
            "Every entry kind on one branch: the context, app state (set then merge patch), settings, labels and title.",
            true,
            s.id(),
            &g.lines(),
        );
    }
    {
        let g = Gen::new(2, None);
        g.add("u1", Parent::Leaf, user("zero"));
        g.add("a1", Parent::Leaf, assistant("one"));
        g.add("u2", Parent::Leaf, user("two"));
        g.add("a2", Parent::Leaf, assistant("three"));
        g.add(
            "k1",
            Parent::Leaf,
            EntryBody::Compaction(Compaction {
                summary: "first summary".into(),
                first_kept: Some(eid("a2")),
                tokens_before: Some(100),
            }),
        );
        g.add("u3", Parent::Leaf, user("four"));
        g.add(
            "k2",
            Parent::Leaf,
            EntryBody::Compaction(Compaction {
                summary: "second summary".into(),
                first_kept: Some(eid("u2")),
                tokens_before: None,
            }),
        );
        write_case(
            "compaction_newest_counts",
            "Two compactions: only the newest counts, and its first_kept reaches back past the older one, which is skipped (a compaction is never a message).",
            true,
            g.session.id(),
            &g.lines(),
        );
    }
    {
        let g = Gen::new(3, None);
        g.add("u1", Parent::Leaf, user("start"));
        g.add("a1", Parent::Leaf, assistant("try b"));
        g.add(
            "c1",
            g.at("u1"),
            EntryBody::Checkout(Checkout {
                from: Some(eid("a1")),
                summary: Some("tried b".into()),
            }),
        );
        write_case(
            "checkout_with_summary",
            "A checkout back to the first message with a summary of the branch left: the summary is a user message after the prefix and a blank line.",
            true,
            g.session.id(),
            &g.lines(),
        );
    }
    {
        let g = Gen::new(4, None);
        let op = g
            .session
            .start_operation(Message::text(Role::User, "hi"))
            .expect("op");
        let _ticket = op.model_attempt(Some("p"), Some("m")).expect("attempt");
        drop(op);
        write_case(
            "operation_provider_interrupted",
            "An operation whose model attempt has no assistant entry: verdict provider_interrupted; status interrupted when nobody holds the writer lock (running when a writer does, which the file does not show).",
            true,
            g.session.id(),
            &g.lines(),
        );
    }
    {
        let g = Gen::new(5, None);
        let op = g
            .session
            .start_operation(Message::text(Role::User, "delete it"))
            .expect("op");
        let ticket = op.model_attempt(Some("p"), Some("m")).expect("attempt");
        let reply = Message {
            role: Role::Assistant,
            content: vec![Block::ToolCall {
                call_id: "c1".into(),
                name: "rm".into(),
                arguments: json!({"path": "x"}),
            }],
            usage: None,
            model: Some("m".into()),
            stop_reason: Some("tool_use".into()),
        };
        op.record_assistant(ticket, reply).expect("reply");
        let _t = op
            .dispatch_tool("c1", EffectClass::SideEffect)
            .expect("dispatch");
        drop(op);
        write_case(
            "operation_indeterminate_tool",
            "A side-effecting tool dispatched with no result entry: verdict indeterminate_tool.",
            true,
            g.session.id(),
            &g.lines(),
        );
    }
    {
        let g = Gen::new(6, None);
        let op = g
            .session
            .start_operation(Message::text(Role::User, "run ls"))
            .expect("op");
        let ticket = op.model_attempt(None, None).expect("attempt");
        let reply = Message {
            role: Role::Assistant,
            content: vec![Block::ToolCall {
                call_id: "c1".into(),
                name: "ls".into(),
                arguments: json!({}),
            }],
            usage: None,
            model: None,
            stop_reason: Some("tool_use".into()),
        };
        op.record_assistant(ticket, reply).expect("reply");
        let t = op.dispatch_tool("c1", EffectClass::ReadOnly).expect("d");
        op.record_result(t, ToolOutput::text("a.txt")).expect("r");
        let ticket = op.model_attempt(None, None).expect("attempt");
        op.record_assistant(ticket, Message::text(Role::Assistant, "one file"))
            .expect("reply");
        op.finish(Outcome::Completed, None).expect("finish");
        write_case(
            "operation_finished",
            "A completed operation with one tool call: verdict finished, status succeeded.",
            true,
            g.session.id(),
            &g.lines(),
        );
    }
    {
        let g = Gen::new(7, None);
        g.add("u1", Parent::Leaf, user("hello"));
        let mut lines = g.lines();
        let torn = entry_line(
            2,
            "message",
            "a1",
            Some("u1"),
            r#"{"role":"assistant","content":[]}"#,
        );
        lines.push(torn[..torn.len() / 2].to_vec());
        write_case(
            "torn_tail",
            "A line cut short at the end of the file: a reader treats it as not yet written; fsck reports it as a torn tail (a writer would cut and save it).",
            false,
            g.session.id(),
            &lines,
        );
    }
    // -- Point 1: what open decodes --
    hand_case(
        "offbranch_undecodable_no_operation",
        "An off-branch message without content (not decodable), then a root checkout: open does not decode it (no operation follows it); fsck reports it.",
        11,
        &[
            entry_line(1, "message", "m1", None, r#"{"role":"user"}"#),
            entry_line(2, "checkout", "c1", None, r#"{"from":"m1"}"#),
        ],
    );
    hand_case(
        "offbranch_undecodable_after_op_started",
        "The same off-branch message after an op_started: open folds every record from the last op_started on, so it decodes it and fails.",
        12,
        &[
            entry_line(
                1,
                "message",
                "u1",
                None,
                r#"{"role":"user","content":[{"type":"text","text":"go"}]}"#,
            ),
            sealed(&format!(
                r#"{{"seq":2,"ts":"{}","kind":"op_started","data":{{"op":"op-2","input":"u1"}}"#,
                ts(2)
            )),
            entry_line(3, "message", "m1", Some("u1"), r#"{"role":"assistant"}"#),
            entry_line(4, "checkout", "c1", None, r#"{"from":"m1"}"#),
        ],
    );
    // -- Point 2: one rule --
    let text = r#"{"role":"user","content":[{"type":"text","text":"x"}]}"#;
    hand_case(
        "frame_member_order",
        "Frame members in another order than section 1's: damage (the frame is exactly as writers emit it).",
        21,
        &[sealed(&format!(
            r#"{{"ts":"{}","seq":1,"kind":"message","id":"m1","parent":null,"data":{text}"#,
            ts(1)
        ))],
    );
    hand_case(
        "frame_extra_member",
        "A frame member that section 1 does not list: damage.",
        22,
        &[sealed(&format!(
            r#"{{"seq":1,"ts":"{}","kind":"message","id":"m1","parent":null,"extra":1,"data":{text}"#,
            ts(1)
        ))],
    );
    hand_case(
        "frame_ignorable_false",
        "\"ignorable\": false: damage (the member is present only as true).",
        23,
        &[sealed(&format!(
            r#"{{"seq":1,"ts":"{}","kind":"message","ignorable":false,"id":"m1","parent":null,"data":{text}"#,
            ts(1)
        ))],
    );
    hand_case(
        "frame_whitespace",
        "Whitespace between frame tokens: damage.",
        24,
        &[sealed(&format!(
            r#"{{"seq": 1,"ts":"{}","kind":"message","id":"m1","parent":null,"data":{text}"#,
            ts(1)
        ))],
    );
    {
        let n = 25;
        let lines = vec![
            header_line(&format!(
                r#"{{"format":1,"session":"{}","created":"{TS0}","writer":"other/1"}}"#,
                sid(n)
            )),
            entry_line(1, "message", "m1", None, text),
        ];
        write_case(
            "header_minimal",
            "A header with only format, session, created and writer: cwd and title default to null, app_state to {}, lineage to {}.",
            false,
            &sid(n),
            &lines,
        );
    }
    {
        let n = 26;
        let lines = vec![header_line(&format!(
            r#"{{"format":1,"session":"{}","created":"{TS0}","cwd":null,"title":null,"app_state":{{}},"lineage":{{"parent":{{"session":"{}","call_id":"c1","depth":0}}}},"writer":"cairn/0.1.0"}}"#,
            sid(n),
            sid(1)
        ))];
        write_case(
            "header_lineage_depth_zero",
            "lineage.parent.depth is 0 (the type is an integer >= 1): the header is invalid, so the session cannot be opened.",
            false,
            &sid(n),
            &lines,
        );
    }
    {
        let n = 27;
        let lines = vec![
            header_line(&format!(
                r#"{{"format":1,"session":"{}","created":"{TS0}","cwd":null,"title":"from the header","app_state":{{}},"lineage":{{"forked_from":null,"parent":null}},"writer":"cairn/0.1.0"}}"#,
                sid(n)
            )),
            entry_line(
                1,
                "message",
                "m1",
                None,
                r#"{"role":"assistant","content":[{"type":"thinking","thinking":"t","signature":null},{"type":"text","text":"x"}],"usage":null,"model":null,"stop_reason":null}"#,
            ),
            entry_line(2, "session_info", "i1", Some("m1"), r#"{"title":null}"#),
            entry_line(
                3,
                "compaction",
                "k1",
                Some("i1"),
                r#"{"summary":"s","first_kept":"m1","tokens_before":null}"#,
            ),
        ];
        write_case(
            "null_as_absent",
            "null for optional members (model, stop_reason, usage, signature, title, tokens_before, lineage members): read as absent. A session_info with a null title does not clear the title.",
            false,
            &sid(n),
            &lines,
        );
    }
    {
        let n = 33;
        let lines = vec![
            header_line(&format!(
                r#"{{"format":1,"session":"{}","created":"{TS0}","cwd":null,"title":null,"app_state":null,"lineage":null,"writer":"cairn/0.1.0"}}"#,
                sid(n)
            )),
            entry_line(
                1,
                "message",
                "a1",
                None,
                r#"{"role":"assistant","content":[{"type":"tool_call","call_id":"c1","name":"t","arguments":null}],"usage":{"input":null,"output":2,"cached":null,"cost":null}}"#,
            ),
            entry_line(
                2,
                "message",
                "r1",
                Some("a1"),
                r#"{"role":"tool","content":[{"type":"tool_result","call_id":"c1","content":[],"is_error":null,"code":null}]}"#,
            ),
            entry_line(
                3,
                "custom",
                "x1",
                Some("r1"),
                r#"{"namespace":"n","visible":null,"content":null}"#,
            ),
        ];
        write_case(
            "null_as_default",
            "null for optional members with a default (lineage, usage counts, is_error, visible) reads as the default; where the type is any JSON (app_state, arguments, custom content) null is a value, kept.",
            false,
            &sid(n),
            &lines,
        );
    }
    hand_case(
        "defaults_usage_checkout",
        "usage without cached (defaults to 0) and a checkout without from (defaults to null).",
        28,
        &[
            entry_line(
                1,
                "message",
                "m1",
                None,
                r#"{"role":"assistant","content":[{"type":"text","text":"x"}],"usage":{"input":3,"output":4}}"#,
            ),
            entry_line(2, "checkout", "c1", Some("m1"), "{}"),
        ],
    );
    hand_case(
        "blob_sha256_upper_case",
        "A blob whose sha256 is upper-case hex: informational, never verified by a reader, kept as written.",
        29,
        &[entry_line(
            1,
            "message",
            "m1",
            None,
            r#"{"role":"user","content":[{"type":"blob","uri":"file:///x","sha256":"E3B0C442"}]}"#,
        )],
    );
    hand_case(
        "tool_result_nested_tool_call",
        "A tool_call block inside tool_result.content (which holds text, image and blob blocks only): the record is invalid.",
        30,
        &[
            entry_line(
                1,
                "message",
                "a1",
                None,
                r#"{"role":"assistant","content":[{"type":"tool_call","call_id":"c1","name":"t","arguments":{}}]}"#,
            ),
            entry_line(
                2,
                "message",
                "r1",
                Some("a1"),
                r#"{"role":"tool","content":[{"type":"tool_result","call_id":"c1","content":[{"type":"tool_call","call_id":"c2","name":"t","arguments":{}}]}]}"#,
            ),
        ],
    );
    hand_case(
        "label_name_with_space",
        "A label whose name has a space (names follow the entry-id rule): the record is invalid; open (which folds every label) and fsck both refuse it.",
        31,
        &[
            entry_line(1, "message", "m1", None, text),
            entry_line(
                2,
                "label",
                "l1",
                Some("m1"),
                r#"{"name":"my label","target":"m1"}"#,
            ),
        ],
    );
    hand_case(
        "custom_namespace_empty",
        "A custom entry with an empty namespace (the field is a non-empty string): the record is invalid.",
        32,
        &[entry_line(
            1,
            "custom",
            "x1",
            None,
            r#"{"namespace":"","visible":false,"content":1}"#,
        )],
    );
    // -- Point 3: numbers and strings --
    hand_case(
        "number_integer_beyond_64_bits",
        "An integer beyond the 64-bit range in app state: refused (cairn cannot keep it exactly and never rounds it silently).",
        41,
        &[entry_line(
            1,
            "app_state",
            "s1",
            None,
            r#"{"set":{"n":12345678901234567890123}}"#,
        )],
    );
    hand_case(
        "number_64_bit_integers",
        "Integers at the 64-bit limits are kept exactly; a number with a fraction is a double.",
        42,
        &[entry_line(
            1,
            "app_state",
            "s1",
            None,
            r#"{"set":{"max":18446744073709551615,"min":-9223372036854775808,"float":0.1}}"#,
        )],
    );
    hand_case(
        "number_beyond_double_range",
        "1E400 overflows a double: refused.",
        43,
        &[entry_line(
            1,
            "app_state",
            "s1",
            None,
            r#"{"set":{"n":1E400}}"#,
        )],
    );
    hand_case(
        "string_lone_surrogate",
        "A string with a lone surrogate escape: not Unicode text, refused.",
        44,
        &[entry_line(
            1,
            "custom",
            "x1",
            None,
            r#"{"namespace":"n","visible":true,"content":"\ud800"}"#,
        )],
    );
    hand_case(
        "member_repeated_typed",
        "A member repeated in a typed object (message.role twice): refused.",
        45,
        &[entry_line(
            1,
            "message",
            "m1",
            None,
            r#"{"role":"user","role":"assistant","content":[]}"#,
        )],
    );
    hand_case(
        "member_repeated_untyped",
        "A member repeated in an untyped object (inside app state): refused too, whatever the object.",
        46,
        &[entry_line(
            1,
            "app_state",
            "s1",
            None,
            r#"{"set":{"a":1,"\u0061":2}}"#,
        )],
    );
    // -- Point 4 --
    hand_case(
        "block_type_unknown",
        "A block type this version does not know: the record is invalid (new block types come with a new major format version).",
        51,
        &[entry_line(
            1,
            "message",
            "m1",
            None,
            r#"{"role":"user","content":[{"type":"video","uri":"x"}]}"#,
        )],
    );
    hand_case(
        "data_unknown_member",
        "Unknown members of data objects (and of blocks) are ignored: forward compatibility within a major version.",
        52,
        &[entry_line(
            1,
            "message",
            "m1",
            None,
            r#"{"role":"user","content":[{"type":"text","text":"x","lang":"en"}],"future":{"a":1}}"#,
        )],
    );
    hand_case(
        "journal_record_without_operation",
        "A model_attempted with no op_started before it: open keeps it (the verdict ignores it), fsck reports the broken journal rule of section 5.",
        53,
        &[sealed(&format!(
            r#"{{"seq":1,"ts":"{}","kind":"model_attempted","data":{{"op":"op-9","attempt":1,"entry":"e1","provider":null,"model":null}}"#,
            ts(1)
        ))],
    );
    hand_case(
        "unknown_kinds_ignorable",
        "Records of unknown kinds marked ignorable: an entry (a tree node every projection skips; its child is an ordinary message) and a log-only record.",
        54,
        &[
            sealed(&format!(
                r#"{{"seq":1,"ts":"{}","kind":"x.future","ignorable":true,"id":"f1","parent":null,"data":{{"a":[1]}}"#,
                ts(1)
            )),
            entry_line(2, "message", "m1", Some("f1"), text),
            sealed(&format!(
                r#"{{"seq":3,"ts":"{}","kind":"x.log","ignorable":true,"data":null"#,
                ts(3)
            )),
        ],
    );
    hand_case(
        "agent_trace_between_operation_records",
        "A trace record of the reference agent (RECORDS.md section 3): kind agent.trace, ignorable, log-only, between an operation's records; it changes no verdict, status or context.",
        56,
        &[
            entry_line(
                1,
                "message",
                "u1",
                None,
                r#"{"role":"user","content":[{"type":"text","text":"say hi"}]}"#,
            ),
            sealed(&format!(
                r#"{{"seq":2,"ts":"{}","kind":"op_started","data":{{"op":"op-2","input":"u1"}}"#,
                ts(2)
            )),
            sealed(&format!(
                r#"{{"seq":3,"ts":"{}","kind":"model_attempted","data":{{"op":"op-2","attempt":1,"entry":"a1","provider":null,"model":null}}"#,
                ts(3)
            )),
            sealed(&format!(
                r#"{{"seq":4,"ts":"{}","kind":"agent.trace","ignorable":true,"data":{{"op":"op-2","purpose":"turn","attempt":1,"entry":"a1","retry":0,"duration_ms":12,"headers_ms":5,"request":{{"method":"POST","url":"https://llm.example/v1/chat/completions","headers":[["Authorization","Bearer [redacted]"]],"body":{{"text":"{{}}","bytes":2}}}},"response":{{"status":200,"headers":[["Content-Type","text/event-stream"]],"body":{{"text":"data: [DONE]\n","bytes":13}}}}}}"#,
                ts(4)
            )),
            entry_line(
                5,
                "message",
                "a1",
                Some("u1"),
                r#"{"role":"assistant","content":[{"type":"text","text":"hi"}]}"#,
            ),
            sealed(&format!(
                r#"{{"seq":6,"ts":"{}","kind":"op_finished","data":{{"op":"op-2","outcome":"completed"}}"#,
                ts(6)
            )),
        ],
    );
    hand_case(
        "workspace_snapshot_records",
        "cairn.workspace records (RECORDS.md section 4): log-only, ignorable workspace snapshots a reader that does not know them skips; the context holds the messages only.",
        57,
        &[
            entry_line(1, "message", "m1", None, text),
            sealed(&format!(
                r#"{{"seq":2,"ts":"{}","kind":"cairn.workspace","ignorable":true,"data":{{"at":"m1","phase":"before","call_id":"c1","root":"/w","scope":"tree","files":{{"a.txt":{{"sha256":"2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824","size":5,"mode":420,"mtime_ns":1700000000000000000}},"gone.txt":null}}}}"#,
                ts(2)
            )),
            entry_line(3, "message", "m2", Some("m1"), text),
            sealed(&format!(
                r#"{{"seq":4,"ts":"{}","kind":"cairn.workspace","ignorable":true,"data":{{"at":"m2","phase":"after","call_id":"c1","root":"/w","scope":"tree","files":{{"link":{{"link":"a.txt","mtime_ns":1700000000000000001}}}},"truncated":true}}"#,
                ts(4)
            )),
        ],
    );
    {
        let n = 55;
        let lines = vec![header_line(&format!(
            r#"{{"format":2,"session":"{}","created":"{TS0}","writer":"future/9"}}"#,
            sid(n)
        ))];
        write_case(
            "header_newer_format",
            "A header with a greater major format version: refused, naming the version.",
            false,
            &sid(n),
            &lines,
        );
    }
    write_gap_cases();
}

/// `line` with one byte of its `data` changed, so its checksum fails.
fn flipped(mut line: Vec<u8>) -> Vec<u8> {
    let at = line.len() / 2;
    line[at] ^= 0x01;
    line
}

/// The cases of the decisions a second reader could not make from the
/// text alone: defaults written, what fsck lists after damage, torn tails
/// and headers, `op_started.input`, and a compaction at an unanswered call.
fn write_gap_cases() {
    let text = r#"{"role":"user","content":[{"type":"text","text":"x"}]}"#;
    {
        let g = Gen::new(61, None);
        let reply = Message {
            role: Role::Assistant,
            content: vec![Block::Text { text: "hi".into() }],
            usage: Some(Usage::default()),
            model: None,
            stop_reason: None,
        };
        g.add("a1", Parent::Leaf, EntryBody::Message(reply));
        g.add(
            "x1",
            Parent::Leaf,
            EntryBody::Custom(Custom {
                namespace: "host.note".into(),
                visible: false,
                content: json!(null),
            }),
        );
        g.add(
            "c1",
            g.at("a1"),
            EntryBody::Checkout(Checkout {
                from: None,
                summary: None,
            }),
        );
        write_case(
            "defaults_written_by_cairn",
            "A field whose default is a value is written even at its default (usage input, output and cached 0; visible false; checkout from null); one whose default is absent is omitted (cost, model, stop_reason, summary).",
            true,
            g.session.id(),
            &g.lines(),
        );
    }
    hand_case(
        "damaged_line_children",
        "A damaged line in the middle: open refuses the session there; fsck lists it, then the child of the lost entry (its parent does not appear before it), and not the grandchild (replayed under the child).",
        62,
        &[
            entry_line(1, "message", "u1", None, text),
            flipped(entry_line(2, "message", "a1", Some("u1"), text)),
            entry_line(3, "message", "r1", Some("a1"), text),
            entry_line(4, "message", "r2", Some("r1"), text),
        ],
    );
    let op_line = |seq: u64, kind: &str, data: &str| {
        sealed(&format!(
            r#"{{"seq":{seq},"ts":"{}","kind":"{kind}","data":{data}"#,
            ts(seq)
        ))
    };
    hand_case(
        "op_started_input_unknown",
        "op_started whose input names no entry: a writer refuses it, so fsck lists it, and each later record of that operation as naming no open operation; the open does not check it.",
        63,
        &[
            entry_line(1, "message", "u1", None, text),
            op_line(2, "op_started", r#"{"op":"op-2","input":"zz"}"#),
            op_line(
                3,
                "model_attempted",
                r#"{"op":"op-2","attempt":1,"entry":"a1","provider":null,"model":null}"#,
            ),
            entry_line(
                4,
                "message",
                "a1",
                Some("u1"),
                r#"{"role":"assistant","content":[{"type":"text","text":"hi"}]}"#,
            ),
            op_line(5, "op_finished", r#"{"op":"op-2","outcome":"completed"}"#),
        ],
    );
    {
        let g = Gen::new(64, None);
        g.add("u1", Parent::Leaf, user("hello"));
        let mut lines = g.lines();
        lines.push(flipped(entry_line(2, "message", "a1", Some("u1"), text)));
        let cut = entry_line(3, "message", "a2", Some("a1"), text);
        lines.push(cut[..cut.len() / 2].to_vec());
        write_case(
            "torn_tail_two_lines",
            "Two damaged lines at the end, no intact line after them: one torn tail, which fsck lists line by line; a reader ignores both.",
            false,
            g.session.id(),
            &lines,
        );
    }
    {
        let header = header_line(&header_data(65));
        write_case(
            "torn_header",
            "Only part of the header was written: not a torn tail (there is no intact header to keep) but a session that cannot be opened; fsck reports line 1 as damaged.",
            false,
            &sid(65),
            &[header[..header.len() / 2].to_vec()],
        );
    }
    let call = r#"{"role":"assistant","content":[{"type":"tool_call","call_id":"c1","name":"ls","arguments":{}}]}"#;
    {
        let g = Gen::new(66, None);
        g.add("u1", Parent::Leaf, user("list"));
        let reply: Message = serde_json::from_str(call).expect("message");
        g.add("a1", Parent::Leaf, EntryBody::Message(reply));
        g.add(
            "k1",
            Parent::Leaf,
            EntryBody::Compaction(Compaction {
                summary: "asked to list".into(),
                first_kept: Some(eid("a1")),
                tokens_before: None,
            }),
        );
        write_case(
            "compaction_keeps_unanswered_call_at_leaf",
            "A compaction whose first_kept is the leaf holding an unanswered call: accepted (the call is kept with its entry), and the call stays unanswered in the context.",
            true,
            g.session.id(),
            &g.lines(),
        );
    }
    hand_case(
        "compaction_drops_unanswered_call",
        "A compaction whose first_kept is after an unanswered call: a writer refuses it (the call would be dropped without a result); the open does not check it, fsck does.",
        67,
        &[
            entry_line(1, "message", "u1", None, text),
            entry_line(2, "message", "a1", Some("u1"), call),
            entry_line(3, "message", "u2", Some("a1"), text),
            entry_line(
                4,
                "compaction",
                "k1",
                Some("u2"),
                r#"{"summary":"s","first_kept":"u2"}"#,
            ),
        ],
    );
}
