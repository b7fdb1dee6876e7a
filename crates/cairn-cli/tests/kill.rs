//! Crash test: 10,000 records piped through `cairn append`, the process
//! killed with SIGKILL part-way; every acknowledged record must be in the
//! session, which must open cleanly for writing.

// Test helpers panic on a failed step; that is how a test fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};

use cairn::{Access, Body, SessionId};
use serde_json::Value;
use support::{Home, msg};

const RECORDS: usize = 10_000;
const KILL_AFTER: usize = 3_000;

fn kill_part_way(durability: &str) {
    let home = Home::new();
    let id = home.new_session("crash");
    let mut child = Command::new(env!("CARGO_BIN_EXE_cairn"))
        .arg("--store")
        .arg(home.path())
        .args(["append", &id, "--durability", durability])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let feeder = std::thread::spawn(move || {
        for i in 0..RECORDS {
            let line = format!(
                "{}\n",
                msg(
                    "user",
                    &format!("m{i}"),
                    &format!("record {i} {}", "x".repeat(i % 300))
                )
            );
            if stdin.write_all(line.as_bytes()).is_err() {
                return i; // the reader died
            }
        }
        RECORDS
    });
    let mut acks: Vec<(u64, String)> = Vec::new();
    let mut killed = false;
    for line in BufReader::new(child.stdout.take().unwrap()).lines() {
        let Ok(line) = line else { break };
        let v: Value = serde_json::from_str(&line).unwrap();
        acks.push((
            v["seq"].as_u64().unwrap(),
            v["id"].as_str().unwrap().to_owned(),
        ));
        if acks.len() == KILL_AFTER && !killed {
            child.kill().unwrap(); // SIGKILL; acks already in the pipe are still read below
            killed = true;
        }
    }
    let status = child.wait().unwrap();
    feeder.join().unwrap();
    assert!(
        killed,
        "the writer should not have finished all {RECORDS} records before being killed"
    );
    assert!(!status.success());
    assert!(
        acks.len() >= KILL_AFTER && acks.len() < RECORDS,
        "{} acks",
        acks.len()
    );

    let session = home
        .store()
        .open(&SessionId::parse(&id).unwrap(), Access::Write)
        .unwrap();
    for (seq, eid) in &acks {
        let Body::Entry(e) = session.record(*seq).unwrap().body else {
            panic!("record {seq} is not an entry");
        };
        assert_eq!(
            e.id.as_str(),
            eid,
            "acknowledged record {seq} is in the session"
        );
    }
    // Nothing unacknowledged sneaks in out of order: every entry is m0, m1, … in seq order.
    let nodes = session.nodes();
    assert!(nodes.len() >= acks.len());
    for (i, n) in nodes.iter().enumerate() {
        assert_eq!(n.id.as_str(), format!("m{i}"));
    }
    drop(session);
    let report = cairn::fsck::check_file(&home.file(&id)).unwrap();
    assert!(report.is_clean(), "{report:?}");
}

#[test]
fn sigkill_during_sync_append_loses_no_acknowledged_record() {
    kill_part_way("sync");
}

#[test]
fn sigkill_during_buffered_append_loses_no_acknowledged_record() {
    kill_part_way("buffered");
}
