//! Writes the seed corpora of the fuzz targets (`fuzz/`) from sessions that
//! cairn itself writes: whole session files (with the id the `open_session`
//! target expects), their lines, torn and damaged variants, and `cairn
//! append` input lines. Run by `.ci/reliability.sh fuzz-smoke` when the
//! seeds are missing:
//!
//! ```sh
//! CAIRN_FUZZ_CORPUS=fuzz/corpus cargo test -p cairn --test fuzz_seeds -- --ignored
//! ```

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::fs;
use std::path::Path;

use cairn::testkit::build::{calls, user};
use cairn::{
    AppStateChange, Block, EffectClass, EntryBody, Message, NewSession, Outcome, Role, SessionId,
    Store, ToolOutput,
};
use serde_json::json;

/// The id the `open_session` target installs its input under.
const ID: &str = "01kfzzz0000000000000000000";

fn session_bytes(home: &Path, n: usize) -> Vec<u8> {
    let store = Store::open_dir(home);
    let id = SessionId::parse(ID).expect("id");
    let s = store
        .create(NewSession {
            id: Some(id),
            title: Some("seed".into()),
            app_state: Some(json!({"todo": []})),
            ..NewSession::default()
        })
        .expect("create");
    let first = s.append(user("list the files")).expect("append");
    if n > 0 {
        let op = s
            .start_operation(Message::text(Role::User, "read a.txt"))
            .expect("op");
        let t = op.model_attempt(Some("p"), Some("m")).expect("attempt");
        let mut call = calls("", &[("c1", "read", json!({"path": "a.txt"}))]);
        call.content[0] = Block::Thinking {
            thinking: "hm".into(),
            signature: None,
        };
        call.model = Some("m".into());
        op.record_assistant(t, call).expect("assistant");
        let ticket = op.dispatch_tool("c1", EffectClass::ReadOnly).expect("T1");
        op.record_result(ticket, ToolOutput::text("hello"))
            .expect("T2");
        op.finish(Outcome::Completed, None).expect("finish");
    }
    if n > 1 {
        s.append(EntryBody::AppState(AppStateChange::Patch(
            json!({"todo": ["b"]}),
        )))
        .expect("state");
        s.label("start", first.id.as_ref()).expect("label");
        s.checkout(first.id.as_ref(), Some("back".into()))
            .expect("checkout");
        s.append(EntryBody::Compaction(cairn::Compaction {
            summary: "s".into(),
            first_kept: None,
            tokens_before: Some(9),
        }))
        .expect("compaction");
    }
    let path = s.location().to_owned();
    drop(s);
    fs::read(path).expect("read")
}

#[test]
#[ignore = "writes the fuzz seed corpora; run by .ci/reliability.sh fuzz-smoke"]
fn write_fuzz_seed_corpora() {
    let Ok(out) = std::env::var("CAIRN_FUZZ_CORPUS") else {
        return;
    };
    let out = Path::new(&out);
    let write = |target: &str, name: &str, bytes: &[u8]| {
        let dir = out.join(target);
        fs::create_dir_all(&dir).expect("mkdir");
        fs::write(dir.join(format!("seed-{name}")), bytes).expect("write seed");
    };
    for n in 0..3 {
        let home = tempfile::tempdir().expect("tempdir");
        let bytes = session_bytes(home.path(), n);
        write("open_session", &format!("session{n}"), &bytes);
        let mut torn = bytes.clone();
        torn.truncate(bytes.len() - 7);
        write("open_session", &format!("torn{n}"), &torn);
        let mut flipped = bytes.clone();
        let mid = bytes.len() / 2;
        flipped[mid] ^= 0x10;
        write("open_session", &format!("flipped{n}"), &flipped);
        for (i, line) in bytes.split_inclusive(|b| *b == b'\n').enumerate() {
            write("decode_line", &format!("s{n}-line{i}"), line);
        }
    }
    let inputs = [
        r#"{"kind":"message","data":{"role":"user","content":[{"type":"text","text":"hi"}]}}"#,
        r#"{"kind":"message","id":"q1","data":{"role":"assistant","content":[{"type":"tool_call","call_id":"c1","name":"ls","arguments":{}}]}}"#,
        r#"{"kind":"app_state","data":{"patch":{"mood":"curious"}}}"#,
        r#"{"kind":"checkout","parent":null,"data":{"from":null}}"#,
        r#"{"kind":"label","data":{"name":"x","target":null}}"#,
        r#"{"kind":"x.future","ignorable":true,"data":{"a":1}}"#,
        r#"{"kind":"op_started","data":{"op":"op-1","input":null}}"#,
        r#"{"kind":"custom","parent":"q1","data":{"namespace":"n","visible":true,"content":"c"}}"#,
    ];
    write("append_input", "all", inputs.join("\n").as_bytes());
    for (i, l) in inputs.iter().enumerate() {
        write("append_input", &format!("line{i}"), l.as_bytes());
    }
    // The projection target takes arbitrary bytes; a few to start from.
    for i in 0u8..4 {
        let bytes: Vec<u8> = (0u8..64)
            .map(|j| j.wrapping_mul(37).wrapping_add(i * 11))
            .collect();
        write("projection", &format!("bytes{i}"), &bytes);
    }
}
