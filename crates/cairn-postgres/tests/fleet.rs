//! The fleet test: worker processes claim sessions from one Postgres store
//! and run scripted agent operations whose tool charges a ledger keyed by
//! the call's idempotency key, while the test SIGKILLs workers, SIGSTOPs
//! one past its lease (and resumes it: its appends must be refused), and
//! restarts the server once. The worker to pause is always one holding a
//! lease mid-session: the test asks for it (a `hold` file, from the start),
//! the first worker that reaches a step after its first in a session
//! answers (`held`, with its pid) and waits before its next append while
//! the others run, the kill and the restart happen; the test then stops it
//! (see `hold_point`). No step depends on timing. Afterwards every session must open, every
//! acknowledged record be present exactly once, `seq`s be continuous, no
//! session hold records of two writers interleaved, every tool call have a
//! result, and no charge have happened twice. The counts are printed.
//!
//! The short version runs in CI (4 workers, 8 sessions). The long one —
//! 8 workers, 32 sessions — is
//!
//! ```sh
//! CAIRN_FLEET=long cargo test -p cairn-postgres --test fleet -- --nocapture
//! ```
//!
//! (`crates/cairn-postgres/fleet.sh` runs it). The server restart needs
//! `pg_ctlcluster` and the right to use it (root, or the postgres user);
//! without it the run says so and skips only the restart (under CI it
//! fails instead).

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cairn::testkit::build::calls;
use cairn::testkit::child::rerun_ignored;
use cairn::{Access, Backend, EffectClass, Message, NewSession, Outcome, Role, Session, Store};
use cairn::{Policy, SessionId, ToolOutput, ToolRunner, recover};
use cairn_postgres::PostgresBackend;
use cairn_postgres::scratch::Scratch;
use serde_json::{Value, json};

/// How big a run is.
#[derive(Debug, Clone, Copy)]
struct Size {
    workers: usize,
    sessions: usize,
    /// Tool calls per session's operation.
    steps: usize,
    /// The workers' lease, seconds.
    lease: u64,
}

impl Size {
    fn from_env() -> Size {
        match std::env::var("CAIRN_FLEET").as_deref() {
            Ok("long") => Size {
                workers: 8,
                sessions: 32,
                steps: 10,
                lease: 2,
            },
            _ => Size {
                workers: 4,
                sessions: 8,
                steps: 6,
                lease: 2,
            },
        }
    }
}

/// The ledger the workers' tool charges, in the store's schema.
fn ledger_sql(schema: &str) -> String {
    format!(
        "CREATE TABLE {schema}.fleet_charges (
             key text PRIMARY KEY, session text NOT NULL, call_id text NOT NULL,
             amount int NOT NULL, pid int NOT NULL);
         CREATE TABLE {schema}.fleet_executions (key text NOT NULL, pid int NOT NULL);"
    )
}

// ---------------------------------------------------------------- worker

/// The worker's one tool: charge `amount` under the call's idempotency key
/// (a retried or re-run call with the same key charges nothing more).
struct Charger {
    url: String,
    schema: String,
    conn: Option<postgres::Client>,
    session: SessionId,
}

impl Charger {
    fn charge(&mut self, key: &str, call_id: &str, arguments: &Value) -> ToolOutput {
        let amount = i32::try_from(arguments["amount"].as_i64().unwrap_or(0)).unwrap_or(0);
        let pid = i32::try_from(std::process::id()).unwrap_or(0);
        loop {
            let conn = match &mut self.conn {
                Some(c) if !c.is_closed() => c,
                _ => match cairn_postgres::PgUrl::parse(&self.url)
                    .unwrap()
                    .config()
                    .unwrap()
                    .connect(postgres::NoTls)
                {
                    Ok(c) => self.conn.insert(c),
                    Err(_) => {
                        std::thread::sleep(Duration::from_millis(200));
                        continue;
                    }
                },
            };
            let s = &self.schema;
            let charged = conn.transaction().and_then(|mut tx| {
                tx.execute(
                    &format!("INSERT INTO {s}.fleet_executions (key, pid) VALUES ($1, $2)"),
                    &[&key, &pid],
                )?;
                let n = tx.execute(
                    &format!(
                        "INSERT INTO {s}.fleet_charges (key, session, call_id, amount, pid)
                         VALUES ($1, $2, $3, $4, $5) ON CONFLICT (key) DO NOTHING"
                    ),
                    &[&key, &self.session.as_str(), &call_id, &amount, &pid],
                )?;
                tx.commit()?;
                Ok(n)
            });
            // The rest of the tool's work, after the charge: a worker
            // killed here leaves a charged call without a result.
            if charged.is_ok() {
                std::thread::sleep(Duration::from_millis(120));
            }
            match charged {
                Ok(1) => return ToolOutput::text(format!("charged {amount}")),
                Ok(_) => return ToolOutput::text(format!("already charged {amount}")),
                Err(_) => {
                    self.conn = None;
                    std::thread::sleep(Duration::from_millis(200));
                }
            }
        }
    }
}

impl ToolRunner for Charger {
    fn effect(&self, _tool: &str) -> EffectClass {
        EffectClass::Idempotent
    }

    fn run(&mut self, call_id: &str, _tool: &str, arguments: &Value, key: &str) -> ToolOutput {
        self.charge(key, call_id, arguments)
    }
}

fn ack(s: &Session, token: i64) {
    println!("fleet: ack {} {} {token}", s.id(), s.len());
}

/// The worker's side of the hold point (see the module docs): once the test
/// has asked (`<dir>/hold`), the first worker here says so (`<dir>/held`,
/// its pid: made whole under another name, then linked, so only one worker
/// wins and the test never reads half of it) and waits, holding its lease,
/// until the test arms it (`<dir>/arm`, after the server restart). Then it
/// reads through its pool once (which replaces connections the restart
/// broke, so its next append reaches the server and its fence), says
/// `<dir>/armed` and waits for `<dir>/go`: the test stops it in between.
fn hold_point(backend: &PostgresBackend, id: &SessionId) {
    let Some(dir) = std::env::var_os("CAIRN_FLEET_HOLD") else {
        return;
    };
    let dir = Path::new(&dir);
    if !dir.join("hold").exists() || dir.join("held").exists() {
        return;
    }
    let pid = std::process::id();
    let mine = dir.join(format!("held-{pid}"));
    std::fs::write(&mine, pid.to_string()).unwrap();
    if std::fs::hard_link(&mine, dir.join("held")).is_err() {
        return;
    }
    println!("fleet: held");
    let wait_for = |name: &str| {
        while !dir.join(name).exists() {
            std::thread::sleep(Duration::from_millis(10));
        }
    };
    wait_for("arm");
    while backend.lease(id).is_err() {
        std::thread::sleep(Duration::from_millis(50));
    }
    std::fs::write(dir.join("armed"), "").unwrap();
    wait_for("go");
}

/// Recovers a claimed session and runs its operation to the end.
fn work(
    store: &Store,
    backend: &PostgresBackend,
    id: &SessionId,
    size: Size,
    charger: &mut Charger,
) -> Result<(), String> {
    let e = |e: &dyn std::error::Error| cairn::with_causes(e);
    let s = store.open(id, Access::Write).map_err(|x| e(&x))?;
    let token = backend.lease(id).map_err(|x| e(&x))?.map_or(0, |l| l.token);
    charger.session = id.clone();
    let report = recover(&s, Policy::default(), Some(charger)).map_err(|x| e(&x))?;
    if !report.actions.is_empty() {
        ack(&s, token);
    }
    let Some(op) = s.resume_operation() else {
        return Ok(());
    };
    loop {
        let done = s
            .context()
            .messages()
            .iter()
            .filter(|m| m.message().expect("read the message").role == Role::Tool)
            .count();
        if done >= size.steps {
            break;
        }
        if done > 0 {
            // Mid-session, holding the lease.
            hold_point(backend, id);
        }
        let t = op
            .model_attempt(Some("fleet"), Some("scripted"))
            .map_err(|x| e(&x))?;
        let call_id = format!("call-{done}");
        let args = json!({"step": done, "amount": 10});
        op.record_assistant(t, calls("charging", &[(&call_id, "charge", args.clone())]))
            .map_err(|x| e(&x))?;
        ack(&s, token);
        let ticket = op
            .dispatch_tool(&call_id, EffectClass::Idempotent)
            .map_err(|x| e(&x))?;
        ack(&s, token);
        let out = charger.charge(ticket.key(), &call_id, &args);
        op.record_result(ticket, out).map_err(|x| e(&x))?;
        ack(&s, token);
    }
    let t = op
        .model_attempt(Some("fleet"), Some("scripted"))
        .map_err(|x| e(&x))?;
    op.record_assistant(t, Message::text(Role::Assistant, "all charged"))
        .map_err(|x| e(&x))?;
    op.finish(Outcome::Completed, None).map_err(|x| e(&x))?;
    ack(&s, token);
    Ok(())
}

fn open_with_retry(url: &str) -> PostgresBackend {
    loop {
        match PostgresBackend::open(url) {
            Ok(b) => return b,
            Err(_) => std::thread::sleep(Duration::from_millis(200)),
        }
    }
}

/// One worker process: claims sessions until none is left open.
#[test]
#[ignore = "a child of the fleet test"]
fn fleet_worker() {
    let (Ok(url), Ok(schema)) = (
        std::env::var("CAIRN_FLEET_URL"),
        std::env::var("CAIRN_FLEET_SCHEMA"),
    ) else {
        return;
    };
    let size = Size::from_env();
    let backend = Arc::new(open_with_retry(&url));
    let store = Store::with_backend(backend.clone());
    let mut charger = Charger {
        url: url.clone(),
        schema,
        conn: None,
        session: SessionId::generate(),
    };
    loop {
        let id = match backend.claim(&[]) {
            Ok(Some(id)) => id,
            Ok(None) => match backend.summaries() {
                Ok(all)
                    if all.iter().all(|s| {
                        s.status != cairn::Status::Running && s.status != cairn::Status::Interrupted
                    }) =>
                {
                    break;
                }
                _ => {
                    std::thread::sleep(Duration::from_millis(100));
                    continue;
                }
            },
            Err(_) => {
                std::thread::sleep(Duration::from_millis(200));
                continue;
            }
        };
        println!("fleet: claim {id}");
        match work(&store, &backend, &id, size, &mut charger) {
            Ok(()) => println!("fleet: done {id}"),
            Err(why) => println!("fleet: error {id} {}", why.replace('\n', " ")),
        }
    }
    println!("fleet: exit");
}

// ---------------------------------------------------------------- driver

struct Worker {
    child: Child,
    lines: Arc<Mutex<Vec<String>>>,
}

fn spawn(scratch: &Scratch, hold: &Path, url: &str, size: Size) -> Worker {
    let mut child = rerun_ignored("fleet_worker")
        .env("CAIRN_FLEET_HOLD", hold)
        .env("CAIRN_FLEET_URL", url)
        .env("CAIRN_FLEET_SCHEMA", &scratch.schema)
        .env(
            "CAIRN_FLEET",
            if size.workers == 8 { "long" } else { "short" },
        )
        .spawn()
        .unwrap();
    let out = child.stdout.take().unwrap();
    let lines = Arc::new(Mutex::new(Vec::new()));
    let sink = lines.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            if let Some(l) = line.strip_prefix("fleet: ") {
                sink.lock().unwrap().push(l.to_owned());
            }
        }
    });
    Worker { child, lines }
}

fn signal(child: &Child, sig: &str) {
    let ok = Command::new("kill")
        .args([sig, &child.id().to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill {sig} {}", child.id());
}

/// Executions of the tool so far (0 while the server is away).
fn progress(scratch: &Scratch) -> i64 {
    let url = cairn_postgres::PgUrl::parse(&scratch.server).unwrap();
    let Ok(mut c) = url.config().unwrap().connect(postgres::NoTls) else {
        return 0;
    };
    c.query_one(
        &format!("SELECT count(*) FROM {}.fleet_executions", scratch.schema),
        &[],
    )
    .map_or(0, |r| r.get(0))
}

/// Fails (instead of waiting forever) if no worker is left running.
fn assert_running(workers: &mut [Worker], waiting_for: &str) {
    let running = workers
        .iter_mut()
        .filter_map(|w| w.child.try_wait().ok())
        .filter(Option::is_none)
        .count();
    if running == 0 {
        let last: Vec<Vec<String>> = workers
            .iter()
            .map(|w| {
                let lines = w.lines.lock().unwrap();
                lines.iter().rev().take(3).rev().cloned().collect()
            })
            .collect();
        panic!("every worker exited before {waiting_for}; their last lines: {last:?}");
    }
}

/// Waits until the tool ran `at_least` times.
fn wait_for_progress(scratch: &Scratch, workers: &mut [Worker], at_least: i64) {
    while progress(scratch) < at_least {
        assert_running(workers, &format!("the tool ran {at_least} times"));
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A worker still running, other than `paused` (the test fails if none is).
fn running_other_than(workers: &mut [Worker], paused: usize) -> usize {
    (0..workers.len())
        .find(|&i| i != paused && matches!(workers[i].child.try_wait(), Ok(None)))
        .expect("a worker besides the paused one still runs")
}

/// Waits for a worker to hold mid-session (the module docs): its index in
/// `workers`.
fn wait_for_hold(hold: &Path, workers: &mut [Worker]) -> usize {
    let pid: u32 = loop {
        if let Ok(pid) = std::fs::read_to_string(hold.join("held")) {
            break pid.parse().unwrap();
        }
        assert_running(workers, "a worker held mid-session");
        std::thread::sleep(Duration::from_millis(10));
    };
    workers.iter().position(|w| w.child.id() == pid).unwrap()
}

#[cfg_attr(skip_postgres, ignore = "CAIRN_SKIP_POSTGRES=1")]
#[test]
fn a_fleet_with_kills_a_paused_worker_and_a_server_restart_keeps_every_invariant() {
    let Some(scratch) = Scratch::new("fleet") else {
        return;
    };
    let size = Size::from_env();
    let url = format!("{}&cairn_lease_secs={}", scratch.url, size.lease);
    let backend = Arc::new(PostgresBackend::open(&url).unwrap());
    let store = Store::with_backend(backend.clone());
    scratch
        .raw()
        .batch_execute(&ledger_sql(&scratch.schema))
        .unwrap();
    // Every session starts with an operation open and no writer: claimable.
    let mut ids = Vec::new();
    for i in 0..size.sessions {
        let s = store
            .create(NewSession {
                title: Some(format!("fleet {i}")),
                ..NewSession::default()
            })
            .unwrap();
        let op = s
            .start_operation(Message::text(
                Role::User,
                format!("charge {} times", size.steps),
            ))
            .unwrap();
        drop(op);
        ids.push(s.id().clone());
    }
    let total = i64::try_from(size.sessions * size.steps).unwrap();
    // Asked for from the start: the first worker past a session's first
    // step holds there, before its next append, until the test stops it.
    let hold_dir = tempfile::tempdir().unwrap();
    let hold = hold_dir.path();
    std::fs::write(hold.join("hold"), "").unwrap();
    let mut workers: Vec<Worker> = (0..size.workers)
        .map(|_| spawn(&scratch, hold, &url, size))
        .collect();
    let (mut killed, mut stopped, mut restarts) = (0, 0, 0);

    // A worker holds in the middle of a session (its lease renewed by its
    // heartbeat) while the others run on.
    let paused = wait_for_hold(hold, &mut workers);

    // SIGKILL another worker mid-run, and start a replacement.
    wait_for_progress(&scratch, &mut workers, total / 8);
    let victim = running_other_than(&mut workers, paused);
    signal(&workers[victim].child, "-KILL");
    killed += 1;
    workers.push(spawn(&scratch, hold, &url, size));

    // Restart the server once, mid-run.
    wait_for_progress(&scratch, &mut workers, total / 4);
    match cairn_postgres::scratch::restart_local_server() {
        Ok(()) => restarts += 1,
        Err(why) => {
            assert!(
                std::env::var_os("CI").is_none(),
                "the fleet test must restart the server under CI: {why}"
            );
            println!("fleet: no server restart: {why}");
        }
    }

    // SIGSTOP the held worker past its lease; others take its session over.
    std::fs::write(hold.join("arm"), "").unwrap();
    while !hold.join("armed").exists() {
        assert_running(&mut workers, "the held worker was armed");
        std::thread::sleep(Duration::from_millis(10));
    }
    signal(&workers[paused].child, "-STOP");
    stopped += 1;
    let stopped_at = std::time::Instant::now();
    std::fs::write(hold.join("go"), "").unwrap();

    // One more SIGKILL while it is stopped.
    let victim = running_other_than(&mut workers, paused);
    signal(&workers[victim].child, "-KILL");
    killed += 1;
    workers.push(spawn(&scratch, hold, &url, size));

    // Resume it after twice its lease: its next append must be refused.
    let past = Duration::from_secs(size.lease * 2 + 1);
    std::thread::sleep(past.saturating_sub(stopped_at.elapsed()));
    signal(&workers[paused].child, "-CONT");

    for w in &mut workers {
        let _ = w.child.wait();
    }
    std::thread::sleep(Duration::from_millis(200));
    let lines: Vec<String> = workers
        .iter()
        .flat_map(|w| w.lines.lock().unwrap().clone())
        .collect();

    // Every session opens (for writing too: no lease is left behind but
    // by dead workers), its seqs continuous (open checks them).
    let mut records = 0;
    let mut calls_seen = 0;
    let mut raw = scratch.raw();
    let s = &scratch.schema;
    for id in &ids {
        let session = store.open(id, Access::Write).unwrap();
        records += session.len();
        assert!(backend.writer_active(id), "{id}: held by us now");
        drop(session);
        assert_eq!(store.status(id).unwrap(), cairn::Status::Succeeded, "{id}");
        let session = store.open(id, Access::Read).unwrap();
        assert!(
            matches!(
                session.verdict().expect("the verdict"),
                cairn::Verdict::Finished { .. }
            ),
            "{id}: every tool call has a result: {:?}",
            session.verdict().expect("the verdict")
        );
        // Every call on the branch has exactly one result.
        let context = session.context();
        let msgs = context.messages();
        let results = msgs
            .iter()
            .filter(|m| m.message().expect("read the message").role == Role::Tool)
            .count();
        let asked = msgs
            .iter()
            .flat_map(|m| m.message().expect("read the message").content.iter())
            .filter(|b| matches!(b, cairn::Block::ToolCall { .. }))
            .count();
        assert_eq!(results, asked, "{id}");
        assert_eq!(results, size.steps, "{id}");
        calls_seen += results;
        // No two writers interleaved: the writers' tokens never go back.
        let tokens: Vec<i64> = raw
            .query(
                &format!(
                    "SELECT r.writer FROM {s}.records r JOIN {s}.sessions x ON x.sid = r.session
                      WHERE x.id = $1 ORDER BY r.seq"
                ),
                &[&id.as_str()],
            )
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect();
        assert!(
            tokens.windows(2).all(|w| w[0] <= w[1]),
            "{id}: records of two writers interleaved: {tokens:?}"
        );
    }

    // Every acknowledged record is there, exactly once, from its writer.
    let mut acked: BTreeMap<(String, i64), i64> = BTreeMap::new();
    for l in &lines {
        let mut w = l.split(' ');
        if w.next() == Some("ack") {
            let (id, len, token) = (w.next().unwrap(), w.next().unwrap(), w.next().unwrap());
            acked.insert(
                (id.to_owned(), len.parse().unwrap()),
                token.parse().unwrap(),
            );
        }
    }
    for ((id, len), token) in &acked {
        let rows = raw
            .query(
                &format!(
                    "SELECT r.writer FROM {s}.records r JOIN {s}.sessions x ON x.sid = r.session
                      WHERE x.id = $1 AND r.seq = $2"
                ),
                &[&id.as_str(), &(len - 1)],
            )
            .unwrap();
        assert_eq!(
            rows.len(),
            1,
            "{id}: acknowledged record {len} is stored once"
        );
        let writer: i64 = rows[0].get(0);
        assert_eq!(
            writer, *token,
            "{id}: record {len} is its acknowledging writer's"
        );
    }

    // No charge happened twice: one charge per call, keyed by its key.
    let charges: i64 = raw
        .query_one(&format!("SELECT count(*) FROM {s}.fleet_charges"), &[])
        .unwrap()
        .get(0);
    let per_call: Vec<(String, String, i64)> = raw
        .query(
            &format!(
                "SELECT session, call_id, count(*) FROM {s}.fleet_charges
                  GROUP BY session, call_id HAVING count(*) > 1"
            ),
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    assert!(per_call.is_empty(), "calls charged twice: {per_call:?}");
    assert_eq!(charges, i64::try_from(calls_seen).unwrap());
    let executions: i64 = raw
        .query_one(&format!("SELECT count(*) FROM {s}.fleet_executions"), &[])
        .unwrap()
        .get(0);
    let fenced = lines
        .iter()
        .filter(|l| l.starts_with("error") && l.contains("writer lease"))
        .count();
    let errors: HashMap<&str, usize> =
        lines
            .iter()
            .filter(|l| l.starts_with("error"))
            .fold(HashMap::new(), |mut m, l| {
                let kind = if l.contains("writer lease") {
                    "lease lost"
                } else if l.contains("in use") || l.contains("holds") {
                    "in use"
                } else {
                    "connection"
                };
                *m.entry(kind).or_default() += 1;
                m
            });
    println!(
        "fleet: {} workers ({} started), {} sessions, {records} records, {calls_seen} tool calls, \
         {charges} charges, {executions} tool executions ({} absorbed by the idempotency key), \
         {} acknowledgements checked, {killed} SIGKILLs, {stopped} SIGSTOP past the lease, \
         {restarts} server restart(s), {fenced} appends refused to a writer that lost its lease, \
         worker errors by kind {errors:?}",
        size.workers,
        workers.len(),
        ids.len(),
        executions - charges,
        acked.len(),
    );
    let paused_lines = workers[paused].lines.lock().unwrap().clone();
    assert!(
        paused_lines
            .iter()
            .any(|l| l.starts_with("error") && l.contains("writer lease")),
        "the paused worker's next append was refused by its lost lease: {paused_lines:?}"
    );
    let _ = backend.describe();
}
