//! A server on loopback for the tests (its own runtime on a thread, a
//! temporary store), and a blocking client that returns every answer —
//! errors included — as a status and a JSON value.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

pub mod schema;

use std::io::{BufRead, BufReader, Read};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use axum::Router;
use cairn_server::{AppState, Options, Server};
use serde_json::{Value, json};

/// A running server and a client for it.
pub struct Srv {
    pub addr: SocketAddr,
    pub token: String,
    pub home: PathBuf,
    _dir: Option<tempfile::TempDir>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
    agent: ureq::Agent,
    /// The served document, every answer is checked against.
    conformance: Option<schema::Conformance>,
}

pub fn options() -> Options {
    Options {
        listen: SocketAddr::from(([127, 0, 0, 1], 0)),
        hold: Duration::from_millis(200),
        poll: Duration::from_millis(20),
        ..Options::default()
    }
}

impl Srv {
    /// A server over a fresh directory store.
    pub fn start() -> Srv {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().to_owned();
        let mut s = Srv::start_at(&home, options(), Router::new());
        s._dir = Some(dir);
        s
    }

    /// A server over the store at `home` (a directory or sqlite:PATH).
    pub fn start_at(home: &Path, opts: Options, extra: Router<AppState>) -> Srv {
        let (tx, rx) = std::sync::mpsc::channel();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let home2 = home.to_owned();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let store = cairn_stores::open_store(&home2).unwrap();
                let files = cairn_stores::files_dir(&home2);
                let server = Server::bind_with(store, &files, opts, extra).await.unwrap();
                tx.send((server.addr(), server.token().to_owned())).unwrap();
                let stop = async move {
                    let _ = stop_rx.await;
                };
                // Open streams are dropped with the runtime.
                tokio::select! {
                    r = server.run() => r.unwrap(),
                    () = stop => {}
                }
            });
            rt.shutdown_background();
        });
        let (addr, token) = rx.recv().unwrap();
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .max_redirects(0)
            .build()
            .into();
        let mut srv = Srv {
            addr,
            token,
            home: home.to_owned(),
            _dir: None,
            stop: Some(stop_tx),
            thread: Some(thread),
            agent,
            conformance: None,
        };
        let (st, doc) = srv.get("/openapi.json");
        assert_eq!(st, 200, "{doc}");
        srv.conformance = Some(schema::Conformance::new(doc));
        srv
    }

    /// The checker of every answer against the served document.
    pub fn conformance(&self) -> &schema::Conformance {
        self.conformance
            .as_ref()
            .expect("set when the server started")
    }

    /// Panics when the answer is not what the served document says.
    #[track_caller]
    fn conform(&self, method: &str, path: &str, answer: (u16, Value)) -> (u16, Value) {
        if let Some(c) = &self.conformance
            && let Err(e) = c.check(method, path, answer.0, &answer.1)
        {
            panic!("{e}");
        }
        answer
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    fn auth(&self) -> String {
        format!("Bearer {}", self.token)
    }

    /// GET with the token; the answer is checked against the document.
    pub fn get(&self, path: &str) -> (u16, Value) {
        let r = self
            .agent
            .get(&self.url(path))
            .header("Authorization", &self.auth())
            .call()
            .unwrap();
        self.conform("GET", path, answer(r))
    }

    /// POST a JSON body with the token.
    pub fn post(&self, path: &str, body: &Value) -> (u16, Value) {
        self.post_raw(path, "application/json", &body.to_string())
    }

    /// POST raw bytes with a content type, with the token.
    pub fn post_raw(&self, path: &str, content_type: &str, body: &str) -> (u16, Value) {
        let r = self
            .agent
            .post(&self.url(path))
            .header("Authorization", &self.auth())
            .header("Content-Type", content_type)
            .send(body)
            .unwrap();
        self.conform("POST", path, answer(r))
    }

    /// DELETE with the token.
    pub fn delete(&self, path: &str) -> (u16, Value) {
        let r = self
            .agent
            .delete(&self.url(path))
            .header("Authorization", &self.auth())
            .call()
            .unwrap();
        self.conform("DELETE", path, answer(r))
    }

    /// A raw request through the same agent (headers of the caller's own).
    pub fn agent(&self) -> &ureq::Agent {
        &self.agent
    }

    /// Creates a session; returns its id.
    pub fn new_session(&self, title: &str) -> String {
        let (st, v) = self.post("/sessions", &json!({"title": title}));
        assert_eq!(st, 201, "{v}");
        v["id"].as_str().unwrap().to_owned()
    }

    /// Appends records; returns the answer.
    pub fn append(&self, id: &str, records: Value) -> (u16, Value) {
        self.post(
            &format!("/sessions/{id}/records"),
            &json!({"records": records}),
        )
    }

    /// Opens a live tail (with `Last-Event-ID` when given).
    pub fn tail(&self, path: &str, last_event_id: Option<u64>) -> Events {
        let mut req = self
            .agent
            .get(&self.url(path))
            .header("Authorization", &self.auth());
        if let Some(n) = last_event_id {
            req = req.header("Last-Event-ID", &n.to_string());
        }
        let r = req.call().unwrap();
        assert_eq!(r.status().as_u16(), 200);
        Events {
            reader: BufReader::new(Box::new(r.into_body().into_reader())),
        }
    }
}

impl Drop for Srv {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The status and the body as JSON (`null` when empty, a string when not
/// JSON).
pub fn answer(mut r: ureq::http::Response<ureq::Body>) -> (u16, Value) {
    let status = r.status().as_u16();
    let text = r.body_mut().read_to_string().unwrap_or_default();
    let v = if text.is_empty() {
        Value::Null
    } else {
        serde_json::from_str(&text).unwrap_or(Value::String(text))
    };
    (status, v)
}

/// One Server-Sent Event.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    pub id: Option<String>,
    pub event: String,
    pub data: String,
}

/// A stream of events being read.
pub struct Events {
    reader: BufReader<Box<dyn Read + Send>>,
}

impl Events {
    /// The next event (comments and keep-alives skipped).
    pub fn next(&mut self) -> Event {
        let mut ev = Event {
            id: None,
            event: "message".into(),
            data: String::new(),
        };
        let mut any = false;
        loop {
            let mut line = String::new();
            let n = self.reader.read_line(&mut line).unwrap();
            assert!(n > 0, "the stream ended");
            let line = line.trim_end_matches(['\n', '\r']);
            if line.is_empty() {
                if any {
                    return ev;
                }
                continue;
            }
            if line.starts_with(':') {
                continue;
            }
            any = true;
            let (field, value) = line.split_once(':').unwrap_or((line, ""));
            let value = value.strip_prefix(' ').unwrap_or(value);
            match field {
                "id" => ev.id = Some(value.to_owned()),
                "event" => ev.event = value.to_owned(),
                "data" => ev.data.push_str(value),
                _ => {}
            }
        }
    }

    /// The next `record` event's seq and record.
    pub fn record(&mut self) -> (u64, Value) {
        loop {
            let ev = self.next();
            if ev.event == "record" {
                let v: Value = serde_json::from_str(&ev.data).unwrap();
                let seq: u64 = ev.id.unwrap().parse().unwrap();
                assert_eq!(v["seq"], json!(seq), "the event id is the record's seq");
                return (seq, v);
            }
        }
    }
}

/// A user message record.
pub fn user(text: &str) -> Value {
    json!({"kind": "message", "data": {"role": "user", "content": [{"type": "text", "text": text}]}})
}

/// An input message (for starting an operation).
pub fn user_message(text: &str) -> Value {
    json!({"role": "user", "content": [{"type": "text", "text": text}]})
}

/// One string field of every object of an array.
pub fn fields<'v>(array: &'v Value, field: &str) -> Vec<&'v str> {
    array
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v[field].as_str().unwrap())
        .collect()
}
