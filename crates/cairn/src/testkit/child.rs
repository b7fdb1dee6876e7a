//! Child processes for tests: the running test binary started again to run
//! one ignored test, which a parent test then drives through its standard
//! input and output, and kills (crash and locking tests); and the check that
//! a command a test ran (the CLI, the agent) succeeded.

use std::process::{Command, Output, Stdio};

/// The output of a command that ran to the end, checked to be a success.
///
/// # Panics
///
/// When the command failed, with its standard error as the message.
pub fn succeeded(out: Output) -> Output {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// A command that runs the ignored test `name` of the current test binary,
/// alone and with its output shown, its standard input and output piped and
/// its standard error discarded. The child learns what to do from
/// environment variables the caller adds; the ignored test returns at once
/// when they are absent, so that running the ignored tests does nothing.
///
/// # Panics
///
/// If the path of the running binary is unknown.
pub fn rerun_ignored(name: &str) -> Command {
    let exe = match std::env::current_exe() {
        Ok(exe) => exe,
        Err(e) => panic!("the path of the test binary: {e}"),
    };
    let mut cmd = Command::new(exe);
    cmd.args([
        "--exact",
        name,
        "--ignored",
        "--nocapture",
        "--test-threads=1",
    ])
    .stdin(Stdio::piped())
    .stdout(Stdio::piped())
    .stderr(Stdio::null());
    cmd
}
