//! The bounded load test on loopback: 32 clients each appending to its own
//! session and 32 SSE readers each following one, for a while. No request
//! may fail, every acknowledged record must be in the log with the id it was
//! acknowledged with, and every reader must receive every record exactly
//! once and in order.
//!
//! `cargo test` runs it for 3 seconds; the run is
//! `CAIRN_LOAD_SECONDS=30 cargo test --release -p cairn-server --test load -- --nocapture`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use serde_json::{Value, json};
use support::{Srv, options, user};

const CLIENTS: usize = 32;
const END: &str = "end of the load test";

/// One appender's session, its acknowledgements (seq, id) and latencies (ms).
type Client = (String, Vec<(u64, String)>, Vec<f64>);

fn seconds() -> f64 {
    std::env::var("CAIRN_LOAD_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3.0)
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

#[test]
fn thirty_two_appenders_and_thirty_two_readers_lose_nothing_and_repeat_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let srv = Arc::new(Srv::start_at(
        dir.path(),
        cairn_server::Options {
            poll: Duration::from_millis(250),
            ..options()
        },
        Router::new(),
    ));
    let ids: Vec<String> = (0..CLIENTS)
        .map(|i| srv.new_session(&format!("load {i}")))
        .collect();
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();

    // Each reader follows one session until the end marker appended
    // after the appenders stop.
    let readers: Vec<_> = ids
        .iter()
        .map(|id| {
            let mut events = srv.tail(&format!("/sessions/{id}/stream"), None);
            std::thread::spawn(move || {
                let mut got: Vec<(u64, Value)> = Vec::new();
                loop {
                    let (seq, rec) = events.record();
                    let end = rec["data"]["content"][0]["text"] == json!(END);
                    got.push((seq, rec));
                    if end {
                        return got;
                    }
                }
            })
        })
        .collect();

    let appenders: Vec<_> = ids
        .iter()
        .enumerate()
        .map(|(i, id)| {
            let srv = Arc::clone(&srv);
            let stop = Arc::clone(&stop);
            let id = id.clone();
            std::thread::spawn(move || {
                let mut acks: Vec<(u64, String)> = Vec::new();
                let mut latencies = Vec::new();
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let t = Instant::now();
                    let (st, v) = srv.append(&id, json!([user(&format!("client {i} record {n}"))]));
                    latencies.push(t.elapsed().as_secs_f64() * 1e3);
                    assert_eq!(st, 200, "append failed: {v}");
                    let a = &v["appended"][0];
                    acks.push((
                        a["seq"].as_u64().unwrap(),
                        a["id"].as_str().unwrap().to_owned(),
                    ));
                    n += 1;
                }
                (id, acks, latencies)
            })
        })
        .collect();

    std::thread::sleep(Duration::from_secs_f64(seconds()));
    stop.store(true, Ordering::Relaxed);
    let results: Vec<Client> = appenders.into_iter().map(|h| h.join().unwrap()).collect();
    let elapsed = started.elapsed().as_secs_f64();
    let ends: Vec<u64> = ids
        .iter()
        .map(|id| {
            let (st, v) = srv.append(id, json!([user(END)]));
            assert_eq!(st, 200, "{v}");
            v["appended"][0]["seq"].as_u64().unwrap()
        })
        .collect();
    let received: Vec<Vec<(u64, Value)>> = readers.into_iter().map(|h| h.join().unwrap()).collect();

    let mut all_latencies = Vec::new();
    let mut total = 0usize;
    for (((id, acks, latencies), got), end) in results.iter().zip(&received).zip(ends) {
        assert!(!acks.is_empty(), "client of {id} appended nothing");
        total += acks.len();
        all_latencies.extend_from_slice(latencies);
        // Every acknowledged record is in the log, under the id acknowledged.
        let (st, h) = srv.get(&format!(
            "/sessions/{id}/history?from=1&to={}&limit=10000",
            end - 1
        ));
        assert_eq!(st, 200);
        assert_eq!(h["next"], Value::Null, "more than one page of history");
        let logged: Vec<(u64, String)> = h["records"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                (
                    r["seq"].as_u64().unwrap(),
                    r["id"].as_str().unwrap().to_owned(),
                )
            })
            .collect();
        assert_eq!(
            &logged, acks,
            "session {id}: the log is not what was acknowledged"
        );
        // The reader got records 0..=last, each once, in order, as logged.
        let seqs: Vec<u64> = got.iter().map(|(s, _)| *s).collect();
        let want: Vec<u64> = (0..=end).collect();
        assert_eq!(seqs, want, "session {id}: the reader's seqs");
        for ((seq, rec), (aseq, aid)) in got.iter().skip(1).zip(acks) {
            assert_eq!((seq, rec["id"].as_str().unwrap()), (aseq, aid.as_str()));
        }
    }
    all_latencies.sort_by(f64::total_cmp);
    println!(
        "load: {CLIENTS} appenders + {CLIENTS} SSE readers for {:.1} s: {total} records appended and each received exactly once ({:.0} records/s); append latency p50 {:.2} ms, p99 {:.2} ms",
        elapsed,
        total as f64 / elapsed,
        percentile(&all_latencies, 0.50),
        percentile(&all_latencies, 0.99),
    );
}
