//! The file tools change files safely: a write SIGKILLed at any moment
//! leaves the old content or the new, never a mix; an edit of a file the
//! person changed since the session read it is refused and the file left
//! as the person left it — and that check survives an agent restart,
//! because what the session last saw is read back from its branch.

// Test helpers panic on a failed step; that is how a test fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use cairn::testkit::Rng;
use cairn::{SessionId, Store};
use cairn_agent::tools::replace::replace_file;
use serde_json::{Value, json};

/// Set in the re-executed test binary: the file [`writer_child`] rewrites.
const WRITER_ENV: &str = "CAIRN_TEST_TORN_WRITER";

/// The two contents the writer alternates: one byte repeated, two lengths.
const VERSIONS: [(u8, usize); 2] = [(b'a', 3 << 20), (b'b', 5 << 20)];

/// Not a test on its own: the child process the torn-write test kills. It
/// replaces the file with each version in turn, forever.
#[test]
fn writer_child() {
    let Ok(path) = std::env::var(WRITER_ENV) else {
        return;
    };
    let path = PathBuf::from(path);
    let contents: Vec<Vec<u8>> = VERSIONS.iter().map(|(b, n)| vec![*b; *n]).collect();
    loop {
        for c in &contents {
            replace_file(&path, c, &mut |_| Ok(())).unwrap();
        }
    }
}

fn is_whole_version(bytes: &[u8]) -> bool {
    VERSIONS
        .iter()
        .any(|(b, n)| bytes.len() == *n && bytes.iter().all(|x| x == b))
}

#[test]
fn a_write_killed_at_any_moment_leaves_the_old_or_the_new_file() {
    let iterations: u64 = std::env::var("CAIRN_TORN_ITERATIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(30);
    let (mut rng, seed) = Rng::from_env_or_os("CAIRN_TORN_SEED");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("big.txt");
    let (b, n) = VERSIONS[0];
    std::fs::write(&path, vec![b; n]).unwrap();
    let mut mid_write = 0;
    for i in 0..iterations {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args(["writer_child", "--exact", "--nocapture", "--test-threads=1"])
            .env(WRITER_ENV, &path)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(rng.below(200)));
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        let bytes = std::fs::read(&path).unwrap();
        assert!(
            is_whole_version(&bytes),
            "iteration {i} (seed {seed}): the file holds {} bytes that are neither version",
            bytes.len()
        );
        // A temporary file left by the kill: the write was cut mid-way.
        for e in std::fs::read_dir(dir.path()).unwrap() {
            let e = e.unwrap();
            if e.path() != path {
                mid_write += 1;
                std::fs::remove_file(e.path()).unwrap();
            }
        }
    }
    eprintln!("seed {seed}: {iterations} kills, {mid_write} of them mid-write");
}

fn edit_script() -> Value {
    json!({"turns": [
        {"match": "read", "replies": [
            {"text": "Reading.", "tool_calls": [{"name": "read_file", "arguments": {"path": "a.txt"}}]},
            {"text": "Read."}]},
        {"match": "force", "replies": [
            {"text": "Editing anyway.", "tool_calls": [{"name": "edit_file", "arguments":
                {"path": "a.txt", "old_string": "one", "new_string": "two", "overwrite": true}}]},
            {"text": "Edited."}]},
        {"match": "edit", "replies": [
            {"text": "Editing.", "tool_calls": [{"name": "edit_file", "arguments":
                {"path": "a.txt", "old_string": "one", "new_string": "two"}}]},
            {"text": "Edited."}]}]})
}

struct Agent {
    _tmp: tempfile::TempDir,
    home: PathBuf,
    work: PathBuf,
    script: PathBuf,
}

impl Agent {
    fn new() -> Agent {
        let tmp = tempfile::tempdir().unwrap();
        let home = tmp.path().join("home");
        let work = tmp.path().join("work");
        std::fs::create_dir_all(&work).unwrap();
        let script = tmp.path().join("script.json");
        std::fs::write(&script, edit_script().to_string()).unwrap();
        Agent {
            home,
            work,
            script,
            _tmp: tmp,
        }
    }

    /// One agent process: `prompt`, resuming `session` when given.
    fn run(&self, prompt: &str, session: Option<&SessionId>) -> SessionId {
        let mut cmd = support::agent_command(&self.home, &self.work, &self.script);
        cmd.args(["-p", prompt]);
        if let Some(s) = session {
            cmd.arg("--resume").arg(s.to_string());
        }
        let out = cmd.output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let sessions = Store::open_dir(&self.home).list().unwrap();
        assert_eq!(sessions.len(), 1);
        sessions[0].id.clone()
    }

    fn file(&self) -> PathBuf {
        self.work.join("a.txt")
    }

    /// The result of the session's last call.
    fn last_result(&self, id: &SessionId) -> (bool, Option<String>, String) {
        let s = Store::open_dir(&self.home)
            .open(id, cairn::Access::Read)
            .unwrap();
        let call = support::call_ids(&s).last().unwrap().clone();
        support::result_of(&s, &call).unwrap()
    }
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap()
}

#[test]
fn an_edit_after_an_outside_change_is_refused_even_after_a_restart() {
    let a = Agent::new();
    std::fs::write(a.file(), "one\n").unwrap();
    let id = a.run("read the file", None);
    // The person changes the file while no agent runs.
    std::fs::write(a.file(), "one, and the person's line\n").unwrap();
    // A new agent process: what the session read comes from its log.
    a.run("edit the file", Some(&id));
    let (is_error, _, text) = a.last_result(&id);
    assert!(is_error, "{text}");
    assert!(
        text.contains("a.txt changed since you last read it; read it again before writing"),
        "{text}"
    );
    assert_eq!(
        read(&a.file()),
        "one, and the person's line\n",
        "the file is untouched"
    );
    // Read again, then the edit goes through.
    a.run("read the file", Some(&id));
    a.run("edit the file", Some(&id));
    let (is_error, _, text) = a.last_result(&id);
    assert!(!is_error, "{text}");
    assert_eq!(read(&a.file()), "two, and the person's line\n");
}

#[test]
fn an_edit_of_a_file_unchanged_since_it_was_read_or_told_to_overwrite_goes_through() {
    let a = Agent::new();
    std::fs::write(a.file(), "one\n").unwrap();
    std::fs::set_permissions(
        a.file(),
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();
    let id = a.run("read the file", None);
    a.run("edit the file", Some(&id));
    assert_eq!(read(&a.file()), "two\n");
    let mode = std::fs::metadata(a.file()).unwrap();
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&mode.permissions()) & 0o777,
        0o600,
        "the file keeps its mode"
    );
    // Changed outside after the agent's own write: refused, unless told.
    std::fs::write(a.file(), "one again\n").unwrap();
    a.run("edit the file", Some(&id));
    assert_eq!(read(&a.file()), "one again\n");
    a.run("force the edit", Some(&id));
    assert_eq!(read(&a.file()), "two again\n");
}
