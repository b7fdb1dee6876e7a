//! `bash`: runs a shell command (a side effect: approval unless `--yes`,
//! never re-run after a crash without a person's decision).
//!
//! The command runs in its own process group with stdin closed, stdout and
//! stderr merged into a file (so any amount of output costs no memory); on
//! timeout, Ctrl-C or a termination signal the whole group is killed and the result says so. The
//! idempotency key is exported as `CAIRN_IDEMPOTENCY_KEY` for scripts that
//! can use one.
//!
//! **Fenced** ([`crate::fence`]): `bash` is started held — a small wrapper
//! shell reads one line from a pipe before it runs the command — and the
//! process's identity (pid, group, start time, boot, host) is appended to
//! the session and synced before the line is written. So a command runs
//! only once its process is on record; if the agent dies first, the pipe
//! closes and the wrapper exits without running it. The wrapper writes the
//! command's exit status to a file beside the output, so a resume that
//! waited for a command the dead agent left running knows how it ended.
//!
//! The group dies with the agent wherever the agent sees itself go: at the
//! end of the tool, on a panic (a guard kills the group), and on Ctrl-C,
//! SIGTERM or SIGHUP ([`crate::interrupt`] kills the running group before
//! exiting). A SIGKILL of the agent is not seen: the group keeps running
//! (`PR_SET_PDEATHSIG` would have to be set in the child between `fork`
//! and `exec`, which needs `unsafe` code this workspace forbids), and the
//! next resume finds it through its record and waits for it or stops it.

use std::fs::File;
use std::io::Write;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use cairn::{Block, EffectClass, ToolOutput};
use serde_json::{Value, json};

use cairn_workspace::Touches;

use super::{CODE_INTERRUPTED, Tool, ToolCall, ToolEnv, capped_file};
use crate::fence::{self, ProcessId, Started};

/// The environment variable carrying the call's idempotency key.
pub const KEY_VAR: &str = "CAIRN_IDEMPOTENCY_KEY";

/// The wrapper `bash` runs first (`$1`: the command, `$2`: the status
/// file): it waits for the `go` line (the process's record is durable),
/// runs the command with stdin closed, and writes its exit status.
const WRAPPER: &str = r#"IFS= read -r go && [ "$go" = go ] || exit 125
bash -c "$1" </dev/null
s=$?
printf '%s\n' "$s" > "$2"
exit "$s""#;

/// Kills the process group it holds when dropped while armed: a tool
/// unwinding from a panic leaves nothing running.
struct GroupGuard(Option<u32>);

impl GroupGuard {
    fn disarm(&mut self) {
        self.0 = None;
    }
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        if let Some(pgid) = self.0 {
            crate::interrupt::kill_group(pgid);
        }
    }
}

/// The `bash` tool.
#[derive(Debug, Clone, Copy)]
pub struct Bash;

enum End {
    Exited(std::process::ExitStatus),
    TimedOut(Duration),
    Interrupted(Duration),
}

impl Tool for Bash {
    fn name(&self) -> &str {
        "bash"
    }
    fn description(&self) -> &str {
        "Run a shell command with bash -c in the working directory. stdout and stderr are merged; long output is capped. Has side effects: the person may be asked to approve it."
    }
    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "command": {"type": "string", "minLength": 1},
                "timeout_secs": {"type": "integer", "minimum": 1, "maximum": 3600}
            },
            "required": ["command"],
            "additionalProperties": false
        })
    }
    fn effect(&self) -> EffectClass {
        EffectClass::SideEffect
    }
    fn touches(&self, _args: &Value, _env: &ToolEnv) -> Option<Touches> {
        Some(Touches::Tree)
    }
    fn summary(&self, args: &Value) -> String {
        let cmd = args.get("command").and_then(Value::as_str).unwrap_or("");
        format!("bash: {}", cairn_view::term::excerpt(cmd, 120))
    }
    fn run(&self, call: &ToolCall<'_>) -> ToolOutput {
        let command = call.str("command").unwrap_or_default();
        let timeout = call
            .int("timeout_secs")
            .map_or(call.env.timeout, |s| Duration::from_secs(s.max(1) as u64));
        if let Err(e) = std::fs::create_dir_all(&call.env.blob_dir) {
            return ToolOutput::error(format!(
                "cannot create {}: {e}",
                call.env.blob_dir.display()
            ));
        }
        let out_path = call.env.blob_dir.join(format!(
            ".bash-{}-{}.out",
            std::process::id(),
            call.call_id.replace(['/', '\\'], "_")
        ));
        let files = File::create(&out_path).and_then(|f| Ok((f.try_clone()?, f)));
        let (stdout, stderr) = match files {
            Ok(f) => f,
            Err(e) => {
                return ToolOutput::error(format!(
                    "cannot create the output file {}: {e}",
                    out_path.display()
                ));
            }
        };
        let status_path = out_path.with_extension("status");
        let _ = std::fs::remove_file(&status_path);
        let remove_files = || {
            let _ = std::fs::remove_file(&out_path);
            let _ = std::fs::remove_file(&status_path);
        };
        let spawned = Command::new("bash")
            .arg("-c")
            .arg(WRAPPER)
            .arg("cairn-bash")
            .arg(command)
            .arg(&status_path)
            .current_dir(&call.env.workdir)
            .env(KEY_VAR, call.key)
            .stdin(Stdio::piped())
            .stdout(stdout)
            .stderr(stderr)
            .process_group(0)
            .spawn();
        let mut child = match spawned {
            Ok(c) => c,
            Err(e) => {
                remove_files();
                return ToolOutput::error(format!("cannot start bash: {e}"));
            }
        };
        let mut guard = GroupGuard(Some(child.id()));
        call.interrupt.set_running_group(Some(child.id()));
        let record = Started {
            call_id: call.call_id.to_owned(),
            tool: self.name().to_owned(),
            key: call.key.to_owned(),
            command: command.to_owned(),
            process: ProcessId::of(child.id(), child.id()),
            started_ms: fence::now_ms(),
            timeout_ms: u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX),
            output: std::path::absolute(&out_path).ok(),
            status_file: std::path::absolute(&status_path).ok(),
        };
        // The process is held until its record is durable: then let it go.
        let go = fence::record_started(call.session, &record)
            .map_err(|e| cairn::with_causes(&e))
            .and_then(|()| {
                let mut stdin = child.stdin.take().ok_or("no pipe to the command")?;
                stdin.write_all(b"go\n").map_err(|e| e.to_string())
            });
        if let Err(why) = go {
            kill_group(&mut child);
            call.interrupt.set_running_group(None);
            remove_files();
            return ToolOutput::error(format!(
                "Not run: its process could not be recorded and let go, so it was stopped before the command started ({why})."
            ));
        }
        let started = Instant::now();
        let end = loop {
            match child.try_wait() {
                Ok(Some(status)) => break End::Exited(status),
                Ok(None) => {}
                Err(e) => {
                    kill_group(&mut child);
                    call.interrupt.set_running_group(None);
                    remove_files();
                    return ToolOutput::error(format!("lost track of the command: {e}"));
                }
            }
            let elapsed = started.elapsed();
            if call.interrupt.is_set() {
                kill_group(&mut child);
                break End::Interrupted(elapsed);
            }
            if elapsed >= timeout {
                kill_group(&mut child);
                break End::TimedOut(elapsed);
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        guard.disarm();
        call.interrupt.set_running_group(None);
        let mut content = match capped_file(call.env, &out_path) {
            Ok(c) => c,
            Err(e) => vec![Block::Text {
                text: format!("(the output could not be read: {e})"),
            }],
        };
        remove_files();
        if content
            .iter()
            .all(|b| matches!(b, Block::Text { text } if text.is_empty()))
        {
            content = vec![Block::Text {
                text: "(no output)".into(),
            }];
        }
        let (status, is_error, code) = match end {
            End::Exited(s) => match s.code() {
                Some(0) => ("exit code 0".to_owned(), false, None),
                Some(c) => (format!("exit code {c}"), true, None),
                None => ("killed by a signal".to_owned(), true, None),
            },
            End::TimedOut(d) => (
                format!(
                    "timed out after {:.1}s: the command was stopped",
                    d.as_secs_f64()
                ),
                true,
                None,
            ),
            End::Interrupted(d) => (
                format!(
                    "interrupted by {} after {:.1}s: the command was stopped before it finished; its effects so far remain",
                    call.interrupt.cause(),
                    d.as_secs_f64()
                ),
                true,
                Some(CODE_INTERRUPTED.to_owned()),
            ),
        };
        content.push(Block::Text {
            text: format!("[{status}]"),
        });
        ToolOutput {
            content,
            is_error,
            code,
        }
    }
}

fn kill_group(child: &mut std::process::Child) {
    crate::interrupt::kill_group(child.id());
    let _ = child.kill();
    let _ = child.wait();
}
