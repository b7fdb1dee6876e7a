//! Simulated power loss (`docs/RELIABILITY.md`): random workloads — appends under
//! every durability mode, group commit from several threads, checkouts,
//! labels, compactions, forks, operations through the Operation API (T1/T2),
//! reopens, read-only opens, listings — run on [`SimFs`], a disk that loses,
//! tears and reorders unsynced writes and forgets unsynced directory entries.
//! At a random point the disk crashes; the store is reopened and checked
//! against the model of what was acknowledged:
//!
//! - every session whose creation was acknowledged still exists;
//! - every record acknowledged as durable is on disk, byte for byte;
//! - what a writer keeps is a byte prefix of what was written (no hole);
//! - bytes past it are reported as a torn tail, cut and saved beside the file;
//! - a reader sees the same records and changes nothing;
//! - the context equals `Context::fold` over the records read back, and the
//!   recovery verdict agrees with an independent reading of the records;
//! - every session opens without a person: damage with intact records after
//!   it is a hole in unsynced data (reordered writes), cut as a torn tail
//!   like any other (`docs/FORMAT.md`, "Torn tail"), never a refusal, and
//!   `fsck` agrees;
//! - a fork that never returned is there whole or not at all.
//!
//! `CAIRN_CRASH_POINTS` sets the number of crash points (default 2000),
//! `CAIRN_CRASH_SEED` the base seed. Every failure names its seed.

#![allow(clippy::expect_used, clippy::unwrap_used)]

mod support;

use std::path::{Path, PathBuf};

use cairn::{Access, SessionId};

use support::simfs::{CrashMode, Rng};
use support::workload::{
    self, Halt, World, check_context, check_verdict, end_of_lines, sessions_dir,
};

#[derive(Debug, Clone)]
struct Config {
    points: u64,
    seed: u64,
    /// Crashes per trial (each followed by recovery and more workload).
    rounds: u32,
    steps: usize,
    /// Planted bug: the disk acknowledges syncs and makes nothing durable.
    lying_disk: bool,
    /// Planted bug: the model counts Buffered acknowledgements as durable.
    trust_buffered: bool,
    /// The sessions directory exists (durably) before the first session.
    sessions_dir_exists: bool,
    /// Run only the trial of this seed (`CAIRN_CRASH_ONLY`, as printed on failure).
    only: Option<u64>,
}

impl Config {
    fn ci() -> Config {
        let points = std::env::var("CAIRN_CRASH_POINTS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(2000);
        let seed = std::env::var("CAIRN_CRASH_SEED")
            .ok()
            .and_then(|v| u64::from_str_radix(v.trim_start_matches("0x"), 16).ok())
            .unwrap_or(0xCA1_2026);
        Config {
            points,
            seed,
            rounds: 3,
            steps: 30,
            lying_disk: false,
            trust_buffered: false,
            sessions_dir_exists: true,
            only: std::env::var("CAIRN_CRASH_ONLY")
                .ok()
                .and_then(|v| u64::from_str_radix(v.trim_start_matches("0x"), 16).ok()),
        }
    }
}

#[derive(Debug, Default)]
struct CrashStats {
    points: u64,
    power_loss: u64,
    lose_all: u64,
    keep_all: u64,
    reordered_images: u64,
    sessions_checked: u64,
    records_kept: u64,
    durable_records_checked: u64,
    torn_tails_cut: u64,
    torn_bytes: u64,
    /// Torn tails that began with a hole and had intact records after it
    /// (reordered unsynced writes; cut, never refused).
    holes_cut: u64,
    /// Forks found after a crash that never returned: always whole.
    unacknowledged_whole_forks: u64,
    unacknowledged_sessions_vanished: u64,
    operations_recovered: u64,
    workload: workload::Stats,
}

fn run(cfg: &Config) -> Result<CrashStats, String> {
    let mut st = CrashStats::default();
    let mut trial: u64 = 0;
    while st.points < cfg.points {
        let seed = match cfg.only {
            Some(only) => only,
            None => cfg
                .seed
                .wrapping_add(trial.wrapping_mul(0x9E37_79B9_7F4A_7C15)),
        };
        trial += 1;
        let mut w = World::new(seed);
        if cfg.sessions_dir_exists {
            w.fs.mkdir_durable(&sessions_dir());
        }
        w.fs.lie_on_sync(cfg.lying_disk);
        w.trust_buffered = cfg.trust_buffered;
        w.note_forks = true;
        let mut rng = Rng::new(seed ^ 0x00C0_FFEE);
        for round in 0..cfg.rounds {
            let mode = match rng.below(10) {
                0 => CrashMode::LoseAll,
                1 => CrashMode::KeepAll,
                _ => CrashMode::PowerLoss,
            };
            let crash_seed = rng.next_u64();
            let ctx = format!(
                "seed {seed:#x} (CAIRN_CRASH_ONLY={seed:x}; CAIRN_CRASH_SEED={:x}, trial {}) round {round} {mode:?}",
                cfg.seed,
                trial - 1
            );
            w.fs.crash_after(rng.range(1, 160), mode, crash_seed);
            match w.run(cfg.steps) {
                // (A crash inside an operation whose failure the library
                // absorbs by design — the catalog write of a listing — leaves
                // the disk halted; `crash_now` then keeps that crash.)
                Ok(()) => w.fs.crash_now(mode, crash_seed),
                Err(Halt::Crashed) => {}
                Err(Halt::Failed(f)) => {
                    return Err(format!(
                        "{ctx}: {} failed on a healthy disk: {}",
                        f.what, f.message
                    ));
                }
                Err(Halt::Violation(v)) => return Err(format!("{ctx}: {v}")),
            }
            st.points += 1;
            match mode {
                CrashMode::PowerLoss => st.power_loss += 1,
                CrashMode::LoseAll => st.lose_all += 1,
                CrashMode::KeepAll => st.keep_all += 1,
            }
            if w.fs.writes_past_end() > 0 {
                return Err(format!(
                    "{ctx}: cairn wrote past the end of a file, leaving a hole"
                ));
            }
            check_after_crash(&mut w, &mut st).map_err(|e| format!("{ctx}: {e}"))?;
            if st.points >= cfg.points {
                break;
            }
        }
        let ws = &w.stats;
        st.workload.steps += ws.steps;
        st.workload.acks += ws.acks;
        st.workload.rejected += ws.rejected;
        st.workload.operations += ws.operations;
        st.workload.dispatches += ws.dispatches;
        st.workload.forks += ws.forks;
        st.workload.group_bursts += ws.group_bursts;
        st.workload.reopens += ws.reopens;
    }
    Ok(st)
}

fn session_files(w: &World) -> Vec<PathBuf> {
    let dir = sessions_dir();
    w.fs.files()
        .into_iter()
        .filter(|p| {
            p.parent() == Some(dir.as_path()) && p.extension().is_some_and(|e| e == "jsonl")
        })
        .collect()
}

fn id_of(path: &Path) -> SessionId {
    let stem = path
        .file_stem()
        .and_then(|s| s.to_str())
        .expect("a file name");
    SessionId::parse(stem).expect("a session file name")
}

/// Reboots the simulated disk and checks every session file on it.
fn check_after_crash(w: &mut World, st: &mut CrashStats) -> Result<(), String> {
    w.drop_handles();
    let report = w.fs.last_crash().ok_or("the disk did not crash")?;
    if report.reordered {
        st.reordered_images += 1;
    }
    w.fs.reboot();
    let files = session_files(w);
    for t in &w.sessions {
        if !t.retired && !files.contains(&t.path) {
            return Err(format!(
                "session {} was acknowledged as created and vanished",
                t.path.display()
            ));
        }
    }
    for path in files {
        let id = id_of(&path);
        let image = w.fs.read(&path).expect("a listed file");
        let Some(visible) = report.visible.get(&path) else {
            return Err(format!(
                "{} appeared after the crash from nowhere",
                path.display()
            ));
        };
        let ti = w.by_path(&path);
        if ti.is_some_and(|i| w.sessions[i].retired) {
            continue;
        }
        let durable = ti.map_or(0, |i| w.sessions[i].durable);
        // 1. The disk kept what was acknowledged as durable, byte for byte.
        let need = end_of_lines(visible, durable).ok_or_else(|| {
            format!(
                "{}: {durable} records acknowledged, fewer were ever written",
                path.display()
            )
        })?;
        if image.len() < need || image[..need] != visible[..need] {
            return Err(format!(
                "{}: the crash lost acknowledged records: {durable} records ({need} bytes) were durable, the disk holds {} bytes that differ",
                path.display(),
                image.len()
            ));
        }
        st.durable_records_checked += durable;
        // 2. A reader opens what a writer would keep and changes nothing.
        let reader = w.store.open(&id, Access::Read);
        if w.fs.read(&path).as_deref() != Some(&image[..]) {
            return Err(format!(
                "{}: a read-only open changed the file",
                path.display()
            ));
        }
        // 3. fsck agrees with the open: a torn tail (a hole included) is
        // never reported as damage. (Run on holes only: fsck reads all.)
        if damage_then_intact(&image) {
            let report = cairn::fsck::check(&**w.store.backend(), &id)
                .map_err(|e| format!("{}: fsck failed: {e}", path.display()))?;
            if report.is_damaged() {
                return Err(format!(
                    "{}: fsck reports damage where the open finds a torn tail: {:?}",
                    path.display(),
                    report.problems
                ));
            }
        }
        // 4. A writer cuts a torn tail, and only that.
        match w.store.open(&id, Access::Write) {
            Ok(s) => {
                let after = w.fs.read(&path).expect("still there");
                if !visible.starts_with(&after) || !image.starts_with(&after) {
                    return Err(format!(
                        "{}: the reopened file ({} bytes) is not a prefix of what was written",
                        path.display(),
                        after.len()
                    ));
                }
                let lines = support::line_spans(&after).len() as u64;
                if lines != s.len() || after.last().is_some_and(|b| *b != b'\n') {
                    return Err(format!(
                        "{}: {} records opened from {lines} complete lines",
                        path.display(),
                        s.len()
                    ));
                }
                if s.len() < durable {
                    return Err(format!(
                        "{}: {} records after reopen, {durable} were durable",
                        path.display(),
                        s.len()
                    ));
                }
                let torn = s.open_report().torn.clone();
                match (&torn, image.len() > after.len()) {
                    (None, false) => {}
                    (Some(t), true) => {
                        let tail = &image[after.len()..];
                        let saved = t.saved_to.as_ref().and_then(|p| w.fs.read(Path::new(p)));
                        if !t.cut
                            || t.offset != after.len() as u64
                            || t.len != tail.len() as u64
                            || saved.as_deref() != Some(tail)
                        {
                            return Err(format!(
                                "{}: the torn tail was misreported or not saved: {t:?}",
                                path.display()
                            ));
                        }
                        st.torn_tails_cut += 1;
                        st.torn_bytes += t.len;
                        if tail
                            .split_inclusive(|b| *b == b'\n')
                            .skip(1)
                            .any(|l| cairn::frame::check(l).is_ok())
                        {
                            st.holes_cut += 1;
                        }
                    }
                    (t, _) => {
                        return Err(format!(
                            "{}: {} bytes were dropped but the torn tail reported is {t:?}",
                            path.display(),
                            image.len() - after.len()
                        ));
                    }
                }
                match &reader {
                    Ok(r)
                        if r.len() == s.len()
                            && r.open_report().torn.as_ref().is_none_or(|t| !t.cut) => {}
                    Ok(r) => {
                        return Err(format!(
                            "{}: a reader saw {} records, the writer {}",
                            path.display(),
                            r.len(),
                            s.len()
                        ));
                    }
                    Err(e) => {
                        return Err(format!(
                            "{}: a reader could not open it: {e}",
                            path.display()
                        ));
                    }
                }
                check_context(&s)?;
                check_verdict(&s)?;
                st.sessions_checked += 1;
                st.records_kept += s.len();
                if ti.is_none()
                    && let Some(from) = &s.header().lineage.forked_from
                {
                    // A fork that never returned is there whole or not at all.
                    match &w.forking {
                        Some((source, whole)) if *source == from.session && s.len() == *whole => {
                            st.unacknowledged_whole_forks += 1;
                        }
                        other => {
                            return Err(format!(
                                "{}: a partial fork: {} records, of a fork in progress {other:?}",
                                path.display(),
                                s.len()
                            ));
                        }
                    }
                }
                let n = s.len();
                let handle = std::sync::Arc::new(s);
                match ti {
                    Some(i) => {
                        let t = &mut w.sessions[i];
                        t.acked = n;
                        t.durable = n;
                        t.handle = Some(handle);
                    }
                    None => w.sessions.push(workload::Tracked {
                        id: id.clone(),
                        path: path.clone(),
                        acked: n,
                        durable: n,
                        handle: Some(handle),
                        retired: false,
                    }),
                }
            }
            Err(e) => {
                return Err(format!(
                    "{}: reopening after the crash failed: {e}",
                    path.display()
                ));
            }
        }
    }
    for t in &w.sessions {
        if t.handle.is_none() && !t.retired && t.durable == 0 {
            st.unacknowledged_sessions_vanished += 1;
        }
    }
    // Listing after a crash shows every session that opens, with its records.
    let list = w
        .store
        .list()
        .map_err(|e| format!("listing after the crash failed: {e}"))?;
    for t in &w.sessions {
        if let Some(s) = &t.handle
            && !list.iter().any(|x| x.id == t.id && x.records == s.len())
        {
            return Err(format!("the listing after the crash misreports {}", t.id));
        }
    }
    w.forking = None;
    // Resolve interrupted operations so the workload can go on.
    for i in 0..w.sessions.len() {
        if w.sessions[i]
            .handle
            .as_ref()
            .is_some_and(|s| s.resume_operation().is_some())
        {
            st.operations_recovered += 1;
            match w.close_operation(i) {
                Ok(()) => {}
                Err(Halt::Violation(v)) => return Err(v),
                Err(Halt::Failed(f)) => {
                    return Err(format!("{} after the crash: {}", f.what, f.message));
                }
                Err(Halt::Crashed) => return Err("crashed while no crash was armed".into()),
            }
        }
    }
    Ok(())
}

#[test]
fn acknowledged_records_survive_thousands_of_simulated_power_losses() {
    let cfg = Config::ci();
    let st = match run(&cfg) {
        Ok(st) => st,
        Err(e) => panic!("{e}"),
    };
    println!(
        "sim_crash: crash points covered: {} (power loss {}, lose-all {}, keep-all {}; {} images with reordered writes); \
         sessions checked {}, records kept {}, durable records verified {}, acknowledged records lost 0; \
         torn tails cut {} ({} bytes), {} of them holes with intact records after (reordered writes); sessions that need a person to open 0; \
         partial creates 0, partial forks 0, unacknowledged whole forks {}; \
         operations recovered {}; workload steps {}, acks {}, T1 {}, group bursts {}, forks {}, reopens {}, rejected {}",
        st.points,
        st.power_loss,
        st.lose_all,
        st.keep_all,
        st.reordered_images,
        st.sessions_checked,
        st.records_kept,
        st.durable_records_checked,
        st.torn_tails_cut,
        st.torn_bytes,
        st.holes_cut,
        st.unacknowledged_whole_forks,
        st.operations_recovered,
        st.workload.steps,
        st.workload.acks,
        st.workload.dispatches,
        st.workload.group_bursts,
        st.workload.forks,
        st.workload.reopens,
        st.workload.rejected,
    );
    assert!(st.points >= cfg.points);
    assert!(
        st.torn_tails_cut > 0,
        "the crashes never produced a torn tail: the simulation is too gentle"
    );
}

#[test]
fn the_crash_checker_catches_a_disk_that_ignores_fsync() {
    let cfg = Config {
        points: 300,
        lying_disk: true,
        ..Config::ci()
    };
    let err =
        run(&cfg).expect_err("a disk whose fsync does nothing must lose acknowledged records");
    assert!(
        err.contains("lost acknowledged records") || err.contains("vanished"),
        "{err}"
    );
}

#[test]
fn the_crash_checker_catches_a_model_that_trusts_buffered_acknowledgements() {
    let cfg = Config {
        points: 300,
        trust_buffered: true,
        ..Config::ci()
    };
    let err = run(&cfg)
        .expect_err("Buffered records are not durable before sync(): the checker must notice");
    assert!(err.contains("lost acknowledged records"), "{err}");
}

/// `FileBackend::create` makes the new session file and its directory entry
/// durable (`sync_data`, `sync_dir(sessions)`), but when the sessions
/// directory itself was just created, nothing syncs *its* entry in the store
/// home: a power loss can take the directory — and the first session of a
/// new store with it — although `create` returned.
#[test]
fn regression_the_first_session_of_a_new_store_vanished_with_its_never_synced_sessions_directory() {
    let w = World::new(1);
    // The home exists durably; `sessions/` does not exist yet.
    let s = w
        .store
        .create(cairn::NewSession::default())
        .expect("create");
    let id = s.id().clone();
    drop(s);
    w.fs.crash_now(CrashMode::LoseAll, 1);
    w.fs.reboot();
    if let Err(e) = w.store.open(&id, Access::Read) {
        panic!("a session whose create returned is gone after a power loss: {e}");
    }
}

#[test]
fn the_simulated_disk_keeps_synced_data_and_loses_unsynced_data_and_names() {
    use cairn::vfs::{OpenMode, Vfs};
    let fs = support::simfs::SimFs::new();
    let dir = Path::new("/d");
    fs.mkdir_durable(dir);
    let a = fs
        .open(&dir.join("a"), OpenMode::CreateNew)
        .expect("create a");
    a.write_all_at(b"synced", 0).expect("write");
    a.sync_data().expect("sync");
    fs.sync_dir(dir).expect("sync dir");
    a.write_all_at(b" lost", 6).expect("write");
    let b = fs
        .open(&dir.join("b"), OpenMode::CreateNew)
        .expect("create b");
    b.write_all_at(b"data synced, name not", 0).expect("write");
    b.sync_data().expect("sync");
    drop((a, b));
    fs.crash_now(CrashMode::LoseAll, 1);
    assert!(
        fs.open(&dir.join("a"), OpenMode::Read).is_err(),
        "nothing works until reboot"
    );
    fs.reboot();
    assert_eq!(fs.read(&dir.join("a")).as_deref(), Some(&b"synced"[..]));
    assert_eq!(
        fs.read(&dir.join("b")),
        None,
        "a name whose directory was not synced is gone"
    );
}

/// Whether `image` has a damaged line with an intact line after it.
fn damage_then_intact(image: &[u8]) -> bool {
    let mut lines = image.split_inclusive(|b| *b == b'\n');
    lines.any(|l| cairn::frame::check(l).is_err()) && lines.any(|l| cairn::frame::check(l).is_ok())
}

/// A world of `seed` holding one new session, and that session.
fn world_with_a_session(seed: u64) -> (World, cairn::Session) {
    let w = World::new(seed);
    w.fs.mkdir_durable(&sessions_dir());
    let s = w
        .store
        .create(cairn::NewSession::default())
        .expect("create");
    (w, s)
}

fn append_user(s: &cairn::Session, text: &str) {
    s.append(cairn::EntryBody::Message(cairn::Message::text(
        cairn::Role::User,
        text,
    )))
    .expect("append");
}

#[test]
fn regression_reordered_writes_left_a_hole_that_refused_to_open_until_a_person_ran_salvage() {
    let mut holes = 0;
    for seed in 0..300u64 {
        let (w, s) = world_with_a_session(seed);
        let (id, path) = (s.id().clone(), PathBuf::from(s.location()));
        append_user(&s, "acknowledged as durable");
        let durable = s.len();
        s.set_durability(cairn::Durability::Buffered);
        for i in 0..8 {
            append_user(
                &s,
                &format!("buffered {i}: only a later sync() would make this durable"),
            );
        }
        drop(s);
        let written = w.fs.read(&path).expect("written");
        w.fs.crash_now(CrashMode::PowerLoss, seed);
        w.fs.reboot();
        let image = w.fs.read(&path).expect("the session survives");
        if !damage_then_intact(&image) {
            continue;
        }
        holes += 1;
        let reader = match w.store.open(&id, Access::Read) {
            Ok(r) => r,
            Err(e) => panic!("seed {seed}: a reader refused a hole in unsynced data: {e}"),
        };
        let writer = match w.store.open(&id, Access::Write) {
            Ok(s) => s,
            Err(e) => panic!("seed {seed}: a writer refused a hole in unsynced data: {e}"),
        };
        assert!(
            writer.len() >= durable,
            "seed {seed}: a durable record was cut"
        );
        assert_eq!(reader.len(), writer.len(), "seed {seed}");
        let t = writer.open_report().torn.clone().expect("a torn tail");
        let after = w.fs.read(&path).expect("still there");
        let saved = t.saved_to.as_ref().and_then(|p| w.fs.read(Path::new(p)));
        assert!(
            t.cut
                && t.offset == after.len() as u64
                && saved.as_deref() == Some(&image[after.len()..])
                && written.starts_with(&after),
            "seed {seed}: {t:?}"
        );
    }
    assert!(
        holes > 0,
        "no crash left a hole: the simulation is too gentle"
    );
}

#[test]
fn regression_a_crash_mid_fork_left_a_valid_looking_prefix_of_the_fork() {
    for mode in [CrashMode::KeepAll, CrashMode::PowerLoss] {
        for k in 1u64.. {
            let (w, s) = world_with_a_session(k);
            for i in 0..12 {
                append_user(&s, &format!("message {i}"));
            }
            let whole = s.len();
            w.fs.crash_after(k, mode, k);
            let forked = w.store.fork(&s, s.leaf().as_ref(), None);
            let crashed = w.fs.halted();
            drop((s, forked));
            if !crashed {
                w.fs.disarm();
                break;
            }
            w.fs.reboot();
            for p in w.fs.files() {
                let Some(id) = p
                    .file_name()
                    .and_then(|n| n.to_str())
                    .and_then(|n| n.strip_suffix(".jsonl"))
                    .and_then(|n| SessionId::parse(n).ok())
                else {
                    continue;
                };
                let f = match w.store.open(&id, Access::Write) {
                    Ok(f) => f,
                    Err(e) => panic!("{mode:?} crash at operation {k} of the fork: {e}"),
                };
                if f.header().lineage.forked_from.is_some() {
                    assert_eq!(
                        f.len(),
                        whole,
                        "{mode:?} crash at operation {k} of the fork left a partial fork"
                    );
                }
            }
        }
    }
}

/// What an open shows, to compare an open through the index with one without.
fn shown(
    s: &cairn::Session,
) -> (
    u64,
    Option<cairn::EntryId>,
    Vec<cairn::EntryId>,
    Vec<String>,
) {
    let texts = s
        .context()
        .messages()
        .iter()
        .map(|m| m.message().expect("read the message").plain_text())
        .collect();
    (s.len(), s.leaf(), s.branch(), texts)
}

#[test]
fn an_index_never_makes_an_open_accept_records_a_power_loss_took() {
    // Sessions long enough to be indexed (1,024 records parsed, or appended
    // and synced before the writer closes), a power loss in the middle of
    // writing the index on odd seeds, then unsynced
    // appends after the index and a power loss: every open through whatever
    // index survived shows exactly what an open without it shows, and never
    // a record the log does not hold.
    let (mut used, mut lost_index_writes) = (0, 0);
    for seed in 0..24u64 {
        let (w, s) = world_with_a_session(seed);
        let (id, path) = (s.id().clone(), PathBuf::from(s.location()));
        let index = path.with_extension("idx");
        let mut rng = Rng::new(seed ^ 0x1DE5);
        s.set_durability(cairn::Durability::Buffered);
        for i in 0..1030 {
            append_user(&s, &format!("before the index {i}"));
        }
        // On half the seeds every record is made durable, so the writer
        // writes the index as it closes (else the next writer's open does).
        let at_close = seed % 4 >= 2;
        if at_close {
            s.sync().expect("sync");
        }
        if seed % 2 == 1 {
            w.fs.crash_after(rng.range(1, 8), CrashMode::PowerLoss, seed);
        }
        drop(s);
        // A writer's long open makes the log durable, then writes the index
        // (unless the close already did).
        if !w.fs.halted() {
            drop(w.store.open(&id, Access::Write));
        }
        if w.fs.halted() {
            lost_index_writes += 1;
            w.fs.reboot();
        } else {
            w.fs.disarm();
        }
        if let Ok(s) = w.store.open(&id, Access::Write) {
            s.set_durability(cairn::Durability::Buffered);
            for i in 0..rng.range(1, 40) {
                append_user(&s, &format!("after the index {i}, never synced"));
            }
            drop(s);
        }
        w.fs.crash_now(CrashMode::PowerLoss, seed ^ 0xC4);
        w.fs.reboot();
        let image = w.fs.read(&path).expect("the session survives");
        let intact = image
            .split_inclusive(|b| *b == b'\n')
            .take_while(|l| cairn::frame::check(l).is_ok())
            .count() as u64;
        let through = w
            .store
            .open(&id, Access::Read)
            .unwrap_or_else(|e| panic!("seed {seed}: open through the index: {e}"));
        if through
            .open_report()
            .index
            .as_deref()
            .is_some_and(|n| n.starts_with("index used"))
        {
            used += 1;
        }
        assert_eq!(
            through.len(),
            intact,
            "seed {seed}: the open shows records the log does not hold intact ({:?})",
            through.open_report().index
        );
        check_context(&through).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        let _ = w.fs.vfs().remove_file(&index);
        let without = w
            .store
            .open(&id, Access::Read)
            .expect("open without the index");
        assert_eq!(shown(&through), shown(&without), "seed {seed}");
    }
    assert!(used > 0, "no open used an index: the test tests nothing");
    assert!(lost_index_writes > 0, "no crash hit an index write");
}
