//! The random workload and the reference model shared by the crash and
//! fault-injection harnesses (`tests/sim_crash.rs`, `tests/fault_injection.rs`).
//!
//! A [`World`] is a store of session files on a [`SimFs`], the sessions the
//! workload has open, and, per session, the model: how many records were
//! acknowledged (in any mode) and how many were acknowledged as *durable*:
//! a `Sync` or `Group` append that returned, `Buffered` records followed by
//! a `sync()` that returned, a T1 (`dispatch_tool`) or T2 (`record_result`)
//! that returned, a session `create` or `fork` that returned. Everything the
//! workload does is drawn from a seeded [`Rng`].

#![allow(dead_code, clippy::expect_used, clippy::unwrap_used)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use cairn::Verdict;
use cairn::testkit::build::user;
use cairn::{
    AppStateChange, AppendError, Appended, Block, Body, Context, Durability, EffectClass, Entry,
    EntryBody, FileBackend, Message, NewSession, OpRecord, Outcome, Policy, Role, Session,
    SessionId, Store, ToolOutput, ToolRunner, Usage,
};
use cairn::{Compaction, Custom, Settings};
use serde_json::{Value, json};

use super::line_spans;
use super::simfs::{Rng, SimFs};

/// The store home on the simulated disk.
pub const HOME: &str = "/sim/home";

/// The sessions directory on the simulated disk.
pub fn sessions_dir() -> PathBuf {
    Path::new(HOME).join("sessions")
}

/// Why the workload stopped early.
#[derive(Debug)]
pub enum Halt {
    /// The simulated disk crashed.
    Crashed,
    /// An operation failed while the disk was healthy or with an injected
    /// fault: the error, and the session it concerned (if any).
    Failed(Failure),
    /// The model and the library disagree.
    Violation(String),
}

/// An error a caller got.
#[derive(Debug, Clone)]
pub struct Failure {
    /// What the workload was doing.
    pub what: String,
    /// The error's message.
    pub message: String,
    /// The session index, when the error came from a session handle.
    pub session: Option<usize>,
    /// Whether it is an append error that must poison the handle
    /// (`AppendError::Io` or `AppendError::Poisoned`).
    pub poisons: bool,
}

/// One session of the model.
#[derive(Debug)]
pub struct Tracked {
    /// Its id.
    pub id: SessionId,
    /// Its file.
    pub path: PathBuf,
    /// Records (header included) acknowledged in any mode.
    pub acked: u64,
    /// Records acknowledged as durable.
    pub durable: u64,
    /// The open writer handle.
    pub handle: Option<Arc<Session>>,
    /// Left out of the workload (refused at open in a documented way).
    pub retired: bool,
}

/// Counters printed at the end of a run.
#[derive(Debug, Default, Clone)]
pub struct Stats {
    /// Workload steps run.
    pub steps: u64,
    /// Records acknowledged.
    pub acks: u64,
    /// Appends refused by an invariant (nothing written).
    pub rejected: u64,
    /// Operations (agent-loop runs) started.
    pub operations: u64,
    /// T1 records acknowledged.
    pub dispatches: u64,
    /// Forks made.
    pub forks: u64,
    /// Group-commit bursts.
    pub group_bursts: u64,
    /// Reopens (workload steps).
    pub reopens: u64,
}

/// The workload's state.
pub struct World {
    /// The simulated disk.
    pub fs: SimFs,
    /// The store over it.
    pub store: Store,
    /// The sessions, in creation order.
    pub sessions: Vec<Tracked>,
    /// The workload's generator.
    pub rng: Rng,
    /// Planted model bug: count `Buffered` acknowledgements as durable.
    pub trust_buffered: bool,
    /// Counters.
    pub stats: Stats,
    /// Whether to note each fork in progress in `forking` (the crash
    /// harness; the fault harness does not, since it reads the source again).
    pub note_forks: bool,
    /// The fork in progress, if any: its source and how many records the
    /// finished fork holds (a fork is all or nothing, even at a crash).
    pub forking: Option<(SessionId, u64)>,
    next_call: u64,
}

/// A tool runner for recovery: read-only `read`, side-effect `charge`.
pub struct Runner;

impl ToolRunner for Runner {
    fn effect(&self, tool: &str) -> EffectClass {
        effect_of(tool)
    }
    fn run(&mut self, call_id: &str, tool: &str, _arguments: &Value, key: &str) -> ToolOutput {
        ToolOutput::text(format!("{tool} {call_id} ran again with key {key}"))
    }
}

fn effect_of(tool: &str) -> EffectClass {
    match tool {
        "read" => EffectClass::ReadOnly,
        "fetch" => EffectClass::Idempotent,
        _ => EffectClass::SideEffect,
    }
}

impl World {
    /// A world on a fresh simulated disk whose store home exists durably.
    pub fn new(seed: u64) -> World {
        let fs = SimFs::new();
        fs.mkdir_durable(Path::new(HOME));
        fs.seed(seed ^ 0xF5);
        World::on(fs, seed)
    }

    /// A world on an existing simulated disk.
    pub fn on(fs: SimFs, seed: u64) -> World {
        let store = Store::with_backend(Arc::new(FileBackend::with_vfs(sessions_dir(), fs.vfs())));
        World {
            fs,
            store,
            sessions: Vec::new(),
            rng: Rng::new(seed),
            trust_buffered: false,
            stats: Stats::default(),
            note_forks: false,
            forking: None,
            next_call: 0,
        }
    }

    /// The index of the session stored at `path`.
    pub fn by_path(&self, path: &Path) -> Option<usize> {
        self.sessions.iter().position(|t| t.path == path)
    }

    /// Drops every handle (as a dying process does).
    pub fn drop_handles(&mut self) {
        for t in &mut self.sessions {
            t.handle = None;
        }
    }

    fn live(&self) -> Vec<usize> {
        (0..self.sessions.len())
            .filter(|&i| self.sessions[i].handle.is_some() && !self.sessions[i].retired)
            .collect()
    }

    fn handle(&self, si: usize) -> Arc<Session> {
        Arc::clone(self.sessions[si].handle.as_ref().expect("an open session"))
    }

    // -- results ---------------------------------------------------------

    fn failed(
        &self,
        what: &str,
        e: &dyn std::error::Error,
        session: Option<usize>,
        poisons: bool,
    ) -> Halt {
        if self.fs.halted() {
            return Halt::Crashed;
        }
        // The message and its causes, as a person sees them (`cairn` prints the chain).
        let mut message = e.to_string();
        let mut cause = e.source();
        while let Some(c) = cause {
            message = format!("{message}: {c}");
            cause = c.source();
        }
        Halt::Failed(Failure {
            what: what.to_owned(),
            message,
            session,
            poisons,
        })
    }

    /// An append result: `Ok(None)` when an invariant refused it (nothing written).
    fn app<T>(
        &mut self,
        r: Result<T, AppendError>,
        si: usize,
        what: &str,
    ) -> Result<Option<T>, Halt> {
        match r {
            Ok(v) => Ok(Some(v)),
            Err(AppendError::Invalid(_)) if !self.fs.halted() => {
                self.stats.rejected += 1;
                Ok(None)
            }
            Err(e) => {
                let poisons = matches!(e, AppendError::Io { .. } | AppendError::Poisoned { .. });
                Err(self.failed(what, &e, Some(si), poisons))
            }
        }
    }

    fn res<T, E: std::error::Error>(
        &self,
        r: Result<T, E>,
        si: Option<usize>,
        what: &str,
    ) -> Result<T, Halt> {
        r.map_err(|e| self.failed(what, &e, si, false))
    }

    /// Notes that records `< upto` were acknowledged under `d`.
    fn ack(&mut self, si: usize, upto: u64, d: Durability) {
        let durable = d != Durability::Buffered || self.trust_buffered;
        let t = &mut self.sessions[si];
        if upto > t.acked {
            self.stats.acks += upto - t.acked;
            t.acked = upto;
        }
        if durable {
            t.durable = t.durable.max(upto);
        }
    }

    fn ack_appended(&mut self, si: usize, a: &Appended, d: Durability) {
        self.ack(si, a.seq + 1, d);
    }

    // -- the workload ------------------------------------------------------

    /// Runs `n` random steps.
    ///
    /// # Errors
    ///
    /// The first [`Halt`].
    pub fn run(&mut self, n: usize) -> Result<(), Halt> {
        for _ in 0..n {
            self.step()?;
        }
        Ok(())
    }

    /// One random step.
    ///
    /// # Errors
    ///
    /// A [`Halt`].
    pub fn step(&mut self) -> Result<(), Halt> {
        self.stats.steps += 1;
        let live = self.live();
        if live.is_empty() || (self.sessions.len() < 4 && self.rng.chance(1, 25)) {
            return self.create();
        }
        let si = live[self.rng.index(live.len())];
        let pick = self.rng.below(100);
        self.step_on(si, pick)
    }

    fn step_on(&mut self, si: usize, pick: u64) -> Result<(), Halt> {
        match pick {
            0..=29 => self.append_message(si),
            30..=34 => self.set_durability(si),
            35..=42 => self.buffered_burst(si),
            43..=48 => self.group_burst(si),
            49..=54 => self.checkout(si),
            55..=59 => self.label(si),
            60..=65 => self.state_or_settings(si),
            66..=67 => self.compaction(si),
            68..=81 => self.operation(si),
            82..=84 => self.fork(si),
            85..=90 => self.reopen(si),
            91..=94 => self.read_only(si),
            _ => self.list(),
        }
    }

    /// Creates a session.
    ///
    /// # Errors
    ///
    /// A [`Halt`].
    pub fn create(&mut self) -> Result<(), Halt> {
        let opts = NewSession {
            title: Some(format!("sim {}", self.sessions.len())),
            cwd: Some("/sim".into()),
            app_state: Some(json!({"n": 0})),
            ..NewSession::default()
        };
        let r = self.store.create(opts);
        let s = self.res(r, None, "create a session")?;
        let path = PathBuf::from(s.location());
        self.stats.acks += 1;
        self.sessions.push(Tracked {
            id: s.id().clone(),
            path,
            acked: 1,
            durable: 1,
            handle: Some(Arc::new(s)),
            retired: false,
        });
        Ok(())
    }

    fn append_body(&mut self, si: usize, body: EntryBody, what: &str) -> Result<(), Halt> {
        let s = self.handle(si);
        let d = s.durability();
        let r = s.append(body);
        if let Some(a) = self.app(r, si, what)? {
            self.ack_appended(si, &a, d);
        }
        Ok(())
    }

    fn append_message(&mut self, si: usize) -> Result<(), Halt> {
        let n = self.rng.below(1000);
        let len = self.rng.range(1, 3) * 40;
        let text: String = format!("message {n} ").repeat(len as usize / 12 + 1);
        let role = if self.rng.chance(1, 2) {
            Role::User
        } else {
            Role::Assistant
        };
        self.append_body(
            si,
            EntryBody::Message(Message::text(role, text)),
            "append a message",
        )
    }

    fn pick_durability(&mut self) -> Durability {
        match self.rng.below(3) {
            0 => Durability::Sync,
            1 => Durability::Group,
            _ => Durability::Buffered,
        }
    }

    fn set_durability(&mut self, si: usize) -> Result<(), Halt> {
        let d = self.pick_durability();
        self.handle(si).set_durability(d);
        Ok(())
    }

    fn buffered_burst(&mut self, si: usize) -> Result<(), Halt> {
        let s = self.handle(si);
        let before = s.durability();
        s.set_durability(Durability::Buffered);
        for i in 0..self.rng.range(2, 6) {
            let r = s.append(user(&format!("buffered {i}")));
            if let Some(a) = self.app(r, si, "append (buffered)")? {
                self.ack_appended(si, &a, Durability::Buffered);
            }
        }
        s.set_durability(before);
        if self.rng.chance(4, 5) {
            let upto = s.len();
            let r = s.sync();
            if self.app(r, si, "sync")?.is_some() {
                self.ack(si, upto, Durability::Sync);
            }
        }
        Ok(())
    }

    fn group_burst(&mut self, si: usize) -> Result<(), Halt> {
        self.stats.group_bursts += 1;
        let s = self.handle(si);
        let before = s.durability();
        s.set_durability(Durability::Group);
        let threads = self.rng.range(2, 4) as usize;
        let each = self.rng.range(1, 4) as usize;
        let results: Vec<Result<Appended, AppendError>> = std::thread::scope(|sc| {
            let hs: Vec<_> = (0..threads)
                .map(|t| {
                    let s = &s;
                    sc.spawn(move || {
                        let mut out = Vec::new();
                        for i in 0..each {
                            let r = s.append(user(&format!("group {t}.{i}")));
                            let stop = r.is_err();
                            out.push(r);
                            if stop {
                                break;
                            }
                        }
                        out
                    })
                })
                .collect();
            hs.into_iter()
                .flat_map(|h| h.join().expect("an appending thread"))
                .collect()
        });
        s.set_durability(before);
        let mut first_err = None;
        for r in results {
            match r {
                Ok(a) => self.ack_appended(si, &a, Durability::Group),
                Err(e) => {
                    if first_err.is_none() {
                        first_err = Some(e);
                    }
                }
            }
        }
        if let Some(e) = first_err {
            self.app::<()>(Err(e), si, "append (group commit)")?;
        }
        Ok(())
    }

    fn random_entry(&mut self, s: &Session) -> Option<cairn::EntryId> {
        let nodes = s.nodes();
        if nodes.is_empty() {
            return None;
        }
        Some(nodes[self.rng.index(nodes.len())].id.clone())
    }

    fn checkout(&mut self, si: usize) -> Result<(), Halt> {
        let s = self.handle(si);
        let target = if self.rng.chance(1, 8) {
            None
        } else {
            self.random_entry(&s)
        };
        let summary = self.rng.chance(1, 3).then(|| "left a branch".to_owned());
        let d = s.durability();
        let r = s.checkout(target.as_ref(), summary);
        if let Some(Some(a)) = self.app(r, si, "checkout")? {
            self.ack_appended(si, &a, d);
        }
        Ok(())
    }

    fn label(&mut self, si: usize) -> Result<(), Halt> {
        let s = self.handle(si);
        let name = ["alpha", "beta", "gamma"][self.rng.index(3)];
        let target = if s.labels().contains_key(name) && self.rng.chance(1, 3) {
            None
        } else {
            match self.random_entry(&s) {
                Some(t) => Some(t),
                None => return Ok(()),
            }
        };
        let d = s.durability();
        let r = s.label(name, target.as_ref());
        if let Some(a) = self.app(r, si, "label")? {
            self.ack_appended(si, &a, d);
        }
        Ok(())
    }

    fn state_or_settings(&mut self, si: usize) -> Result<(), Halt> {
        let n = self.rng.below(100);
        let body = match self.rng.below(4) {
            0 => EntryBody::AppState(AppStateChange::Set(json!({"n": n, "set": true}))),
            1 => EntryBody::AppState(AppStateChange::Patch(json!({"n": n, "k": null}))),
            2 => {
                let mut values = serde_json::Map::new();
                values.insert("model".into(), json!(format!("m{n}")));
                EntryBody::Settings(Settings { values })
            }
            _ => EntryBody::Custom(Custom {
                namespace: "sim".into(),
                visible: self.rng.chance(1, 2),
                content: json!({"n": n}),
            }),
        };
        self.append_body(si, body, "append state, settings or custom")
    }

    fn compaction(&mut self, si: usize) -> Result<(), Halt> {
        let s = self.handle(si);
        let branch = s.branch();
        let first_kept = if branch.is_empty() || self.rng.chance(1, 4) {
            None
        } else {
            Some(branch[self.rng.index(branch.len())].clone())
        };
        let body = EntryBody::Compaction(Compaction {
            summary: "the story so far".into(),
            first_kept,
            tokens_before: Some(1000),
        });
        self.append_body(si, body, "compaction")
    }

    /// Resolves an open operation (recovery, then `finish`).
    pub fn close_operation(&mut self, si: usize) -> Result<(), Halt> {
        let s = self.handle(si);
        if s.resume_operation().is_none() {
            return Ok(());
        }
        let mut runner = Runner;
        let policy = Policy {
            rerun_safe: self.rng.chance(1, 2),
            ..Policy::default()
        };
        let r = cairn::recover(&s, policy, Some(&mut runner)).map_err(|e| match e {
            cairn::RecoveryError::Append(a) => a,
            other => panic!("recovery by policy cannot stop: {other}"),
        });
        self.app(r, si, "recover")?;
        if let Some(op) = s.resume_operation() {
            let r = op.finish(Outcome::Aborted, Some("closed by the simulation".into()));
            self.app(r, si, "finish (aborted)")?;
        }
        // Recovery's own appends are partly synced: count them as
        // acknowledged, not as durable.
        self.ack(si, s.len(), Durability::Buffered);
        Ok(())
    }

    fn operation(&mut self, si: usize) -> Result<(), Halt> {
        self.close_operation(si)?;
        let s = self.handle(si);
        let d = s.durability();
        let stop = self.rng.range(1, 9);
        self.stats.operations += 1;
        let r = s.start_operation(Message::text(Role::User, "do the task"));
        let Some(op) = self.app(r, si, "start_operation")? else {
            return Ok(());
        };
        self.ack(si, s.len(), d);
        if stop == 1 {
            return Ok(());
        }
        let r = op.model_attempt(Some("sim"), Some("sim-model"));
        let Some(ticket) = self.app(r, si, "model_attempt")? else {
            return Ok(());
        };
        self.ack(si, s.len(), d);
        if stop == 2 {
            return Ok(());
        }
        let calls = self.rng.below(3);
        let mut content = vec![Block::Text {
            text: "on it".into(),
        }];
        let mut ids = Vec::new();
        for _ in 0..calls {
            self.next_call += 1;
            let call_id = format!("call{}", self.next_call);
            let tool = ["read", "fetch", "charge"][self.rng.index(3)];
            content.push(Block::ToolCall {
                call_id: call_id.clone(),
                name: tool.into(),
                arguments: json!({"n": self.next_call}),
            });
            ids.push((call_id, tool));
        }
        let msg = Message {
            role: Role::Assistant,
            content,
            usage: None,
            model: Some("sim-model".into()),
            stop_reason: Some(if calls > 0 { "tool_use" } else { "end_turn" }.into()),
        };
        let entry = ticket.entry().clone();
        let r = op.record_assistant(ticket, msg);
        if self.app(r, si, "record_assistant")?.is_none() {
            return Ok(());
        }
        self.ack(si, s.len(), d);
        if stop == 3 {
            return Ok(());
        }
        for (call_id, tool) in &ids {
            let r = op.dispatch_tool(call_id, effect_of(tool));
            let Some(t) = self.app(r, si, "dispatch_tool (T1)")? else {
                return Ok(());
            };
            self.stats.dispatches += 1;
            // T1 is synced whatever the session's durability.
            self.ack(si, s.len(), Durability::Sync);
            if stop == 4 {
                return Ok(());
            }
            let r = op.record_result(t, ToolOutput::text(format!("{tool} done")));
            if self.app(r, si, "record_result (T2)")?.is_none() {
                return Ok(());
            }
            self.ack(si, s.len(), Durability::Sync);
            if stop == 5 {
                return Ok(());
            }
        }
        let r = op.settle_usage(
            &entry,
            Usage {
                input: 10,
                output: 5,
                cached: 0,
                cost: None,
            },
            Some(7),
        );
        self.app(r, si, "settle_usage")?;
        self.ack(si, s.len(), d);
        if stop == 6 {
            return Ok(());
        }
        let r = op.finish(Outcome::Completed, None);
        self.app(r, si, "finish")?;
        self.ack(si, s.len(), d);
        Ok(())
    }

    fn fork(&mut self, si: usize) -> Result<(), Halt> {
        if self.sessions.len() >= 6 {
            return Ok(());
        }
        self.stats.forks += 1;
        let s = self.handle(si);
        let at = self.random_entry(&s);
        if self.note_forks {
            // What the finished fork holds: the same fork made in memory.
            let whole = Store::with_backend(Arc::new(cairn::MemoryBackend::new()))
                .fork(&s, at.as_ref(), None)
                .map_or(0, |f| f.len());
            self.forking = Some((s.id().clone(), whole));
        }
        let r = self.store.fork(&s, at.as_ref(), None);
        // A fork where a tool call has no result is refused, writing nothing.
        if let Err(cairn::StoreError::Append(AppendError::Invalid(
            cairn::Invalid::UnansweredCalls { .. },
        ))) = &r
        {
            self.stats.rejected += 1;
            return Ok(());
        }
        let f = self.res(r, Some(si), "fork")?;
        self.forking = None;
        let n = f.len();
        self.stats.acks += n;
        self.sessions.push(Tracked {
            id: f.id().clone(),
            path: PathBuf::from(f.location()),
            acked: n,
            durable: n,
            handle: Some(Arc::new(f)),
            retired: false,
        });
        Ok(())
    }

    fn reopen(&mut self, si: usize) -> Result<(), Halt> {
        self.stats.reopens += 1;
        self.sessions[si].handle = None;
        let id = self.sessions[si].id.clone();
        let r = self.store.open(&id, cairn::Access::Write);
        let s = self.res(r, Some(si), "reopen")?;
        if s.len() < self.sessions[si].acked {
            return Err(Halt::Violation(format!(
                "reopening {} without a crash found {} records, {} were acknowledged",
                s.location(),
                s.len(),
                self.sessions[si].acked
            )));
        }
        if let Some(t) = &s.open_report().torn {
            return Err(Halt::Violation(format!(
                "reopening without a crash cut a torn tail: {t:?}"
            )));
        }
        let d = self.pick_durability();
        s.set_durability(d);
        self.sessions[si].handle = Some(Arc::new(s));
        Ok(())
    }

    fn read_only(&mut self, si: usize) -> Result<(), Halt> {
        let s = self.handle(si);
        let r = self.store.open(&self.sessions[si].id, cairn::Access::Read);
        let r = self.res(r, Some(si), "open read-only")?;
        if r.len() != s.len() || *r.context() != *s.context() {
            return Err(Halt::Violation(format!(
                "a reader of {} sees {} records and another context than the writer ({} records)",
                s.location(),
                r.len(),
                s.len()
            )));
        }
        Ok(())
    }

    fn list(&mut self) -> Result<(), Halt> {
        let r = self.store.list();
        let list = self.res(r, None, "list")?;
        // With a fault injected, a session the listing could not read is
        // listed as unreadable (by design, rather than hiding the others).
        let faulted = !self.fs.fired().is_empty();
        for t in &self.sessions {
            let Some(s) = &t.handle else { continue };
            match list.iter().find(|x| x.id == t.id) {
                Some(x) if faulted && x.records == 0 => {}
                Some(x) if x.records == s.len() => {}
                other => {
                    return Err(Halt::Violation(format!(
                        "the listing shows {:?} records for {}, the writer has {}",
                        other.map(|x| x.records),
                        t.id,
                        s.len()
                    )));
                }
            }
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------
// Checks shared by the harnesses
// ---------------------------------------------------------------------------

/// The byte offset just past the first `n` complete lines of `bytes`.
pub fn end_of_lines(bytes: &[u8], n: u64) -> Option<usize> {
    if n == 0 {
        return Some(0);
    }
    line_spans(bytes).get(n as usize - 1).map(|r| r.end)
}

/// The session's context equals `Context::fold` over the entries read back.
///
/// # Errors
///
/// A description of the difference.
pub fn check_context(s: &Session) -> Result<(), String> {
    let mut entries: Vec<Entry> = Vec::new();
    for seq in 1..s.len() {
        match s.record(seq) {
            Ok(r) => {
                if let Body::Entry(e) = r.body {
                    entries.push(e);
                }
            }
            Err(e) => {
                return Err(format!(
                    "record {seq} of {} does not read back: {e}",
                    s.location()
                ));
            }
        }
    }
    let folded = Context::fold(&s.header().app_state, &entries, s.leaf().as_ref());
    if folded != *s.context() {
        return Err(format!(
            "the context of {} differs from Context::fold over its {} entries",
            s.location(),
            entries.len()
        ));
    }
    Ok(())
}

/// The verdict is `IndeterminateTool` exactly when a dispatched call's
/// result entry is missing (an independent reading of the records).
///
/// # Errors
///
/// A description of the disagreement.
pub fn check_verdict(s: &Session) -> Result<(), String> {
    let mut ids = BTreeSet::new();
    let mut results = Vec::new();
    for seq in 1..s.len() {
        let r = s.record(seq).map_err(|e| e.to_string())?;
        match r.body {
            Body::Entry(e) => {
                ids.insert(e.id.to_string());
            }
            Body::Op(OpRecord::OpStarted(_)) => results.clear(),
            Body::Op(OpRecord::ToolDispatched(t)) => {
                results.push((t.call_id.clone(), t.result_entry.to_string()))
            }
            Body::Op(_) | Body::Header(_) => {}
        }
    }
    // Only calls still on the branch without a result are pending.
    let open = cairn::unanswered_calls(&s.context()).unwrap();
    let expected = results
        .iter()
        .any(|(c, r)| !ids.contains(r) && open.iter().any(|o| &o.call_id == c));
    let actual = matches!(
        s.verdict().expect("the verdict"),
        Verdict::IndeterminateTool { .. }
    );
    if expected != actual {
        return Err(format!(
            "{}: a dispatched call without its result is {expected} in the records, but the verdict is {:?}",
            s.location(),
            s.verdict().expect("the verdict").name()
        ));
    }
    Ok(())
}
