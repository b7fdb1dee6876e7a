//! Append latency over HTTP: one client appending one record per request
//! to `cairn serve` on loopback (keep-alive connection), against the
//! library's own `Session::append` in the same directory, under `Sync` (what
//! a durable client sees) and `Buffered` (no fsync: the HTTP layer's own
//! cost — request, JSON both ways, the blocking pool). The two sides
//! alternate append by append; the figures are the p50 and p99 of each.

use std::net::SocketAddr;
use std::time::Instant;

use anyhow::{Context as _, Result, anyhow};
use cairn::{Durability, EntryBody, Message, NewSession, Role, Store};

use super::Bench;
use crate::measure::percentile;
use crate::report::{Figure, Unit};

const KEYS: [&str; 4] = [
    "serve_append_sync_p50",
    "serve_append_sync_p99",
    "serve_append_buffered_p50",
    "serve_append_buffered_p99",
];
const TOKEN: &str = "cairn-bench-serve-token";

pub fn run(b: &Bench) -> Result<Vec<Figure>> {
    let dir = b.sub("serve")?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let http_home = dir.join("http");
    let options = cairn_server::Options {
        listen: SocketAddr::from(([127, 0, 0, 1], 0)),
        token: Some(TOKEN.into()),
        ..cairn_server::Options::default()
    };
    let server = rt.block_on(cairn_server::Server::bind(
        Store::open_dir(&http_home),
        &http_home,
        options,
    ))?;
    let base = format!("http://{}", server.addr());
    rt.spawn(server.run());
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let session = create(&agent, &base)?;
    let direct = Store::open_dir(dir.join("direct")).create(NewSession::default())?;

    let mut figures = Vec::new();
    for mode in [Durability::Sync, Durability::Buffered] {
        direct.set_durability(mode);
        // One HTTP append, one library append, the order swapped each time,
        // so both see the same disk: back-to-back fdatasyncs on ext4 wait
        // for the previous journal commit, which a gap between requests
        // would hide from one side only.
        let mut http = Vec::new();
        let mut lib = Vec::new();
        for i in 0..b.sizes.serve_appends {
            let body = format!(
                r#"{{"durability":"{}","records":[{{"kind":"message","data":{{"role":"user","content":[{{"type":"text","text":"record {i}"}}]}}}}]}}"#,
                mode.as_str()
            );
            let mut http_side = || -> Result<()> {
                let t = Instant::now();
                append(&agent, &base, &session, &body)?;
                http.push(t.elapsed().as_secs_f64() * 1e6);
                Ok(())
            };
            let mut lib_side = || -> Result<()> {
                let m = Message::text(Role::User, format!("record {i}"));
                let t = Instant::now();
                direct.append(EntryBody::Message(m))?;
                lib.push(t.elapsed().as_secs_f64() * 1e6);
                Ok(())
            };
            if i % 2 == 0 {
                http_side()?;
                lib_side()?;
            } else {
                lib_side()?;
                http_side()?;
            }
        }
        let note = format!(
            "{} one-record appends per side, HTTP and library alternating; {} durability; one client on a keep-alive loopback connection",
            http.len(),
            mode.as_str()
        );
        let name = mode.as_str();
        for (q, key, label) in [
            (0.50, KEYS[figures.len()], "p50"),
            (0.99, KEYS[figures.len() + 1], "p99"),
        ] {
            figures.push(
                Figure::new(
                    key,
                    format!("HTTP append ({name}), {label} latency"),
                    Unit::Micros,
                    percentile(http.clone(), q),
                    format!("Session::append ({name}), {label}"),
                    percentile(lib.clone(), q),
                    None,
                )
                .note(note.clone()),
            );
        }
    }
    rt.shutdown_background();
    Ok(figures)
}

fn create(agent: &ureq::Agent, base: &str) -> Result<String> {
    let mut r = agent
        .post(&format!("{base}/sessions"))
        .header("Authorization", &format!("Bearer {TOKEN}"))
        .header("Content-Type", "application/json")
        .send("{}")?;
    let text = r.body_mut().read_to_string()?;
    let v: serde_json::Value = serde_json::from_str(&text)?;
    v["id"]
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| anyhow!("cairn serve did not create a session: {text}"))
}

fn append(agent: &ureq::Agent, base: &str, session: &str, body: &str) -> Result<()> {
    let mut r = agent
        .post(&format!("{base}/sessions/{session}/records"))
        .header("Authorization", &format!("Bearer {TOKEN}"))
        .header("Content-Type", "application/json")
        .send(body)?;
    let status = r.status();
    let text = r
        .body_mut()
        .read_to_string()
        .context("reading the answer")?;
    if status != 200 {
        return Err(anyhow!("append over HTTP failed ({status}): {text}"));
    }
    Ok(())
}
