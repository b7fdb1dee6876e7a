//! Shared test support: an in-process mock of an OpenAI-compatible server,
//! and a harness that builds agents over a temporary store.

// Each test binary uses its own subset of these helpers; helpers are test
// code, which clippy's `allow-*-in-tests` settings do not reach.
#![allow(dead_code, missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use cairn::{Block, EntryBody, NewSession, Role, Session, Store};
use cairn_agent::agent::{Agent, AgentConfig, OnUnknown, Runtime};
use cairn_agent::compaction::CompactionPolicy;
use cairn_agent::interrupt::Interrupt;
use cairn_agent::observer::{Event, Observer};
use cairn_agent::prompt::Canned;
use cairn_agent::provider::Provider;
use cairn_agent::provider::retry::RetryPolicy;
use cairn_agent::provider::scripted::ScriptedProvider;
use cairn_agent::tools::{Registry, ToolEnv};
use serde_json::{Value, json};

/// What the mock server answers to one request.
#[derive(Debug, Clone)]
pub enum Reply {
    /// An event stream: `data:` events, then `[DONE]` unless cut.
    Sse {
        events: Vec<Value>,
        done: bool,
        cut_after: Option<usize>,
        chunked: bool,
    },
    /// A status with a JSON body.
    Json {
        status: u16,
        body: Value,
        headers: Vec<(String, String)>,
    },
    /// Accept the connection and close it without answering.
    Hangup,
    /// Accept, read the request, then say nothing for this long.
    Stall(Duration),
}

impl Reply {
    pub fn sse(events: Vec<Value>) -> Reply {
        Reply::Sse {
            events,
            done: true,
            cut_after: None,
            chunked: false,
        }
    }
}

/// A recorded request.
#[derive(Debug, Clone)]
pub struct Request {
    pub head: String,
    pub body: Value,
}

pub struct MockServer {
    pub url: String,
    pub requests: Arc<Mutex<Vec<Request>>>,
    handle: Option<JoinHandle<()>>,
}

impl MockServer {
    /// Serves `replies`, one per connection, in order, then stops (it also
    /// stops by itself after 20 s).
    pub fn start(replies: Vec<Reply>) -> MockServer {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let url = format!("http://{}/v1", listener.local_addr().unwrap());
        let requests = Arc::new(Mutex::new(Vec::new()));
        let seen = Arc::clone(&requests);
        let handle = std::thread::spawn(move || {
            let deadline = Instant::now() + Duration::from_secs(20);
            for reply in replies {
                let stream = loop {
                    match listener.accept() {
                        Ok((s, _)) => break s,
                        Err(e)
                            if e.kind() == std::io::ErrorKind::WouldBlock
                                && Instant::now() < deadline =>
                        {
                            std::thread::sleep(Duration::from_millis(5));
                        }
                        Err(_) => return,
                    }
                };
                stream.set_nonblocking(false).unwrap();
                stream
                    .set_read_timeout(Some(Duration::from_secs(5)))
                    .unwrap();
                if let Some(req) = read_request(&stream) {
                    seen.lock().unwrap().push(req);
                }
                serve(stream, reply);
            }
        });
        MockServer {
            url,
            requests,
            handle: Some(handle),
        }
    }

    pub fn requests(&self) -> Vec<Request> {
        self.requests.lock().unwrap().clone()
    }
}

impl Drop for MockServer {
    fn drop(&mut self) {
        // Bounded: the server stops after its replies or its deadline.
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

fn read_request(stream: &TcpStream) -> Option<Request> {
    let mut r = BufReader::new(stream);
    let mut head = String::new();
    loop {
        let mut line = String::new();
        if r.read_line(&mut line).ok()? == 0 {
            return None;
        }
        if line == "\r\n" {
            break;
        }
        head.push_str(&line);
    }
    let len = head
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("content-length:")
                .map(|v| v.trim().parse::<usize>().unwrap_or(0))
        })
        .unwrap_or(0);
    let mut body = vec![0; len];
    r.read_exact(&mut body).ok()?;
    Some(Request {
        head,
        body: serde_json::from_slice(&body).unwrap_or(Value::Null),
    })
}

fn serve(mut s: TcpStream, reply: Reply) {
    match reply {
        Reply::Hangup => {
            let _ = s.shutdown(Shutdown::Both);
        }
        Reply::Stall(d) => {
            std::thread::sleep(d);
            let _ = s.shutdown(Shutdown::Both);
        }
        Reply::Json {
            status,
            body,
            headers,
        } => {
            let body = body.to_string();
            let mut head = format!(
                "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n",
                body.len()
            );
            for (k, v) in headers {
                head.push_str(&format!("{k}: {v}\r\n"));
            }
            let _ = write!(s, "{head}\r\n{body}");
        }
        Reply::Sse {
            events,
            done,
            cut_after,
            chunked,
        } => {
            let enc = if chunked {
                "Transfer-Encoding: chunked\r\n"
            } else {
                ""
            };
            let _ = write!(
                s,
                "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n{enc}Connection: close\r\n\r\n"
            );
            let mut payloads: Vec<String> = events
                .iter()
                .map(|e| match e {
                    Value::String(raw) => format!("data: {raw}\n\n"),
                    other => format!("data: {other}\n\n"),
                })
                .collect();
            if done {
                payloads.push("data: [DONE]\n\n".into());
            }
            for (i, p) in payloads.iter().enumerate() {
                if cut_after == Some(i) {
                    let _ = s.flush();
                    let _ = s.shutdown(Shutdown::Both);
                    return;
                }
                let _ = if chunked {
                    write!(s, "{:x}\r\n{p}\r\n", p.len())
                } else {
                    write!(s, "{p}")
                };
                let _ = s.flush();
                std::thread::sleep(Duration::from_millis(2));
            }
            if chunked {
                let _ = write!(s, "0\r\n\r\n");
            }
            let _ = s.flush();
        }
    }
}

/// A text delta chunk.
pub fn text(t: &str) -> Value {
    json!({"id": "x", "object": "chat.completion.chunk", "model": "mock-model", "choices": [{"index": 0, "delta": {"content": t}, "finish_reason": null}]})
}

/// A tool-call delta chunk.
pub fn call(index: u64, id: Option<&str>, name: Option<&str>, args: &str) -> Value {
    let mut function = json!({"arguments": args});
    if let Some(n) = name {
        function["name"] = json!(n);
    }
    let mut c = json!({"index": index, "function": function});
    if let Some(i) = id {
        c["id"] = json!(i);
        c["type"] = json!("function");
    }
    json!({"choices": [{"index": 0, "delta": {"tool_calls": [c]}, "finish_reason": null}]})
}

/// A finish chunk.
pub fn finish(reason: &str) -> Value {
    json!({"choices": [{"index": 0, "delta": {}, "finish_reason": reason}]})
}

/// A usage chunk.
pub fn usage(input: u64, output: u64) -> Value {
    json!({"choices": [], "usage": {"prompt_tokens": input, "completion_tokens": output, "total_tokens": input + output}})
}

/// Records events as short strings.
#[derive(Clone, Default)]
pub struct Recorder(pub Arc<Mutex<Vec<String>>>);

impl Recorder {
    pub fn lines(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }

    /// The lines that start with `prefix` (an event kind: "retry", "call", …).
    pub fn starting_with(&self, prefix: &str) -> Vec<String> {
        let mut lines = self.lines();
        lines.retain(|l| l.starts_with(prefix));
        lines
    }
}

impl Observer for Recorder {
    fn event(&mut self, e: &Event<'_>) {
        let line = match e {
            Event::Verdict(v) => format!("verdict {}", v.name()),
            Event::Recovery(r) => format!("recovery {r}"),
            Event::Retry { error, .. } => format!("retry {error}"),
            Event::ToolCall { summary, .. } => format!("call {summary}"),
            Event::Dispatched { tool, .. } => format!("dispatched {tool}"),
            Event::ToolResult { tool, output, .. } => format!(
                "result {tool} error={} code={:?}",
                output.is_error, output.code
            ),
            Event::Denied { tool, reason, .. } => format!("denied {tool}: {reason}"),
            Event::Compacted { .. } => "compacted".into(),
            Event::Finished { outcome, error, .. } => format!("finished {outcome:?} {error:?}"),
            Event::Notice(n) => format!("notice {n}"),
            _ => return,
        };
        self.0.lock().unwrap().push(line);
    }
}

/// A temporary store and working directory.
pub struct Harness {
    pub dir: tempfile::TempDir,
    pub home: PathBuf,
    pub work: PathBuf,
    pub store: Store,
    pub recorder: Recorder,
    pub interrupt: Interrupt,
}

impl Harness {
    pub fn new() -> Harness {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("home");
        let work = dir.path().join("work");
        std::fs::create_dir_all(&work).unwrap();
        let store = Store::open_dir(&home);
        Harness {
            dir,
            home,
            work,
            store,
            recorder: Recorder::default(),
            interrupt: Interrupt::new(),
        }
    }

    pub fn runtime(&self, provider: Arc<dyn Provider>, prompter: Canned) -> Runtime {
        Runtime {
            provider,
            tools: Registry::standard(),
            env: ToolEnv::new(&self.work, self.home.join("blobs")),
            config: AgentConfig {
                auto_approve: false,
                on_unknown: OnUnknown::Ask,
                retry: RetryPolicy {
                    max_retries: 3,
                    base_delay: Duration::from_millis(5),
                    max_delay: Duration::from_millis(20),
                },
                compaction: CompactionPolicy {
                    budget_tokens: None,
                    keep_recent_tokens: 0,
                },
                ..AgentConfig::default()
            },
            observer: Box::new(self.recorder.clone()),
            prompter: Box::new(prompter),
            interrupt: self.interrupt.clone(),
            after_tool_effect: None,
        }
    }

    pub fn scripted(script: Value) -> Arc<dyn Provider> {
        Arc::new(ScriptedProvider::parse(&script.to_string()).unwrap())
    }

    pub fn new_session(&self) -> Session {
        self.store.create(NewSession::default()).unwrap()
    }

    pub fn agent(&self, session: Session, rt: Runtime) -> Agent {
        Agent::new(self.store.clone(), session, rt).unwrap()
    }
}

/// Every tool call on the branch has a result.
pub fn every_call_answered(session: &Session) -> Result<(), String> {
    let ctx = session.context();
    let mut open: Vec<String> = Vec::new();
    for m in ctx.messages() {
        for (id, _, _) in m.message().expect("read the message").tool_calls() {
            open.push(id.to_owned());
        }
        for id in m.message().expect("read the message").tool_results() {
            open.retain(|o| o != id);
        }
    }
    if open.is_empty() {
        Ok(())
    } else {
        Err(format!("unanswered calls: {open:?}"))
    }
}

/// The result block answering `call_id` on the branch.
pub fn result_of(session: &Session, call_id: &str) -> Option<(bool, Option<String>, String)> {
    let ctx = session.context();
    ctx.messages().iter().find_map(|m| {
        m.message()
            .expect("read the message")
            .content
            .iter()
            .find_map(|b| match b {
                Block::ToolResult {
                    call_id: c,
                    content,
                    is_error,
                    code,
                } if c == call_id => Some((
                    *is_error,
                    code.clone(),
                    cairn_agent::provider::result_text(content),
                )),
                _ => None,
            })
    })
}

/// The kinds of the session's operation records, in order.
/// The ids of the tool calls in the session's context, in order.
pub fn call_ids(session: &Session) -> Vec<String> {
    let mut ids = Vec::new();
    for m in session.context().messages() {
        ids.extend(
            m.message()
                .expect("read the message")
                .tool_calls()
                .map(|(id, _, _)| id.to_owned()),
        );
    }
    ids
}

/// The text of the last assistant message on the branch.
pub fn last_text(session: &Session) -> String {
    last_assistant(session)
        .expect("an assistant message on the branch")
        .plain_text()
}

pub fn op_kinds(session: &Session) -> Vec<String> {
    session.op_records().into_iter().map(|(_, k)| k).collect()
}

/// The last assistant message on the branch.
pub fn last_assistant(session: &Session) -> Option<cairn::Message> {
    let ctx = session.context();
    ctx.messages()
        .iter()
        .rev()
        .map(|m| m.message().expect("read the message").clone())
        .find(|m| m.role == Role::Assistant)
}

/// Entries of a kind on the branch.
pub fn branch_bodies(session: &Session) -> Vec<EntryBody> {
    session
        .branch_entries(session.leaf().as_ref())
        .unwrap()
        .into_iter()
        .map(|(e, _)| e.body)
        .collect()
}

/// The `cairn-agent` binary on a store, a working directory and a script,
/// approving side effects, without compaction, stdin closed.
pub fn agent_command(
    home: &std::path::Path,
    work: &std::path::Path,
    script: &std::path::Path,
) -> std::process::Command {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_cairn-agent"));
    cmd.arg("--store")
        .arg(home)
        .arg("--workdir")
        .arg(work)
        .arg("--script")
        .arg(script)
        .args(["--yes", "--compact-at", "0"])
        .env_remove("CAIRN_AGENT_CHILD")
        .stdin(std::process::Stdio::null());
    cmd
}
