//! `bash`: runs a shell command (a side effect: approval unless `--yes`,
//! never re-run after a crash without a person's decision).
//!
//! The command runs in its own process group with stdin closed, stdout and
//! stderr merged into a file (so any amount of output costs no memory); on
//! timeout, Ctrl-C or a termination signal the whole group is killed and the result says so. The
//! idempotency key is exported as `CAIRN_IDEMPOTENCY_KEY` for scripts that
//! can use one.

use std::fs::File;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use cairn::{Block, EffectClass, ToolOutput};
use serde_json::{Value, json};

use cairn_workspace::Touches;

use super::{CODE_INTERRUPTED, Tool, ToolCall, ToolEnv, capped_file};

/// The environment variable carrying the call's idempotency key.
pub const KEY_VAR: &str = "CAIRN_IDEMPOTENCY_KEY";

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
        let spawned = Command::new("bash")
            .arg("-c")
            .arg(command)
            .current_dir(&call.env.workdir)
            .env(KEY_VAR, call.key)
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(stderr)
            .process_group(0)
            .spawn();
        let mut child = match spawned {
            Ok(c) => c,
            Err(e) => {
                let _ = std::fs::remove_file(&out_path);
                return ToolOutput::error(format!("cannot start bash: {e}"));
            }
        };
        let started = Instant::now();
        call.interrupt.set_running_group(Some(child.id()));
        let end = loop {
            match child.try_wait() {
                Ok(Some(status)) => break End::Exited(status),
                Ok(None) => {}
                Err(e) => {
                    kill_group(&mut child);
                    call.interrupt.set_running_group(None);
                    let _ = std::fs::remove_file(&out_path);
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
        call.interrupt.set_running_group(None);
        let mut content = match capped_file(call.env, &out_path) {
            Ok(c) => c,
            Err(e) => vec![Block::Text {
                text: format!("(the output could not be read: {e})"),
            }],
        };
        let _ = std::fs::remove_file(&out_path);
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
