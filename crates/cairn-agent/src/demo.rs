//! `cairn demo`: an offline, deterministic tour of the agent on cairn,
//! narrated in plain words. A comic-storyboard agent keeps a hero's state
//! consistent across panels while the demo rewinds, crashes and forks it:
//!
//! 1. panel 1: the hero eats a power-up; the agent sets the app state and
//!    calls the paid, idempotent `render_panel` (10 credits, local ledger);
//! 2. panel 2, a side plot: the wrong pill; the state changes, another render;
//! 3. rewind to panel 1: the state is the power-up again;
//! 4. panel 3 on the new branch, run in a child process that is killed
//!    (SIGKILL) after the ledger charged and before the result was recorded;
//! 5. reopen: the verdict is `IndeterminateTool`; the render is re-run with
//!    the same idempotency key and the ledger charges once;
//! 6. the same crash with `bash`, a side effect without a key: recovery does
//!    not re-run it and records `TOOL_OUTCOME_UNKNOWN`;
//! 7. a subagent letters panel 3 in a child session of its own, and the
//!    process is killed after the subagent answered and before the parent
//!    recorded the answer: recovery, from the outside in, finds the
//!    subagent finished and answers the parent's call with its answer,
//!    without running it again;
//! 8. fork from panel 1 into a new session; both trees are drawn.
//!
//! Every claim is checked as the demo goes; a claim that does not hold is
//! an error. The sessions stay in the store for `cairn tree`, `steps`,
//! `export`.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context as _, Result, bail, ensure};
use cairn::{Access, Block, EntryId, NewSession, Session, SessionId, Store, Verdict};
use serde_json::{Value, json};

use crate::agent::{Agent, Runtime};
use crate::child::{CHILD_ENV, CRASH_MARKER, ChildSpec};
use crate::interrupt::Interrupt;
use crate::observer::Printer;
use crate::prompt::Batch;
use crate::provider::scripted::ScriptedProvider;
use crate::repl::TreePrinter;
use crate::store::OpenedStore;
use crate::storyboard::{self, delegating};
use crate::tools::ToolEnv;
use crate::tools::render::Ledger;

pub use crate::storyboard::{SYSTEM_PROMPT, script};

/// Options of the demo.
#[derive(Clone, Default)]
pub struct DemoOptions {
    /// The executable to run crash steps with (default: the current one; its
    /// `main` must call [`crate::child::run_if_requested`] first).
    pub exe: Option<PathBuf>,
    /// Draws trees (the built-in drawing when `None`).
    pub tree_printer: Option<TreePrinter>,
}

impl std::fmt::Debug for DemoOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DemoOptions")
            .field("exe", &self.exe)
            .finish_non_exhaustive()
    }
}

/// What the demo made and found.
#[derive(Debug, Clone, PartialEq)]
pub struct DemoReport {
    /// The storyboard session.
    pub session: SessionId,
    /// Its fork at panel 1.
    pub fork: SessionId,
    /// The directory of the ledger, the script and the rendered panels.
    pub workdir: PathBuf,
    /// The app state after panel 2.
    pub state_after_panel_2: Value,
    /// The app state after the rewind to panel 1.
    pub state_after_rewind: Value,
    /// The rendered panel images left after the rewind to panel 1.
    pub panels_after_rewind: Vec<String>,
    /// The verdict found after the render crash.
    pub verdict_after_crash: String,
    /// Ledger charges for panel 3.
    pub panel_3_charges: usize,
    /// The ledger's final balance.
    pub balance: i64,
    /// The result code recorded for the crashed `bash` call.
    pub side_effect_code: Option<String>,
    /// Lines the crashed `bash` call left in the print queue.
    pub print_queue_lines: usize,
    /// The subagent session that lettered panel 3.
    pub subagent: SessionId,
    /// Model calls the subagent made (it is not run again by recovery).
    pub subagent_model_calls: usize,
    /// Lines the subagent left in `balloons.txt`.
    pub balloon_lines: usize,
}

/// Output captured from the agent's printer, copied to the demo's writer.
#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<u8>>>);

impl Write for Capture {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Capture {
    fn drain(&self, out: &mut dyn Write) -> Result<()> {
        let bytes = std::mem::take(
            &mut *self
                .0
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        out.write_all(&bytes)?;
        Ok(())
    }
}

struct Tour<'a> {
    out: &'a mut dyn Write,
    capture: Capture,
    store: Store,
    /// The storyboard session.
    id: SessionId,
    /// The executable the crash scenes run in a child process.
    exe: PathBuf,
    home: PathBuf,
    blobs: PathBuf,
    workdir: PathBuf,
    script: PathBuf,
    ledger: Ledger,
}

impl Tour<'_> {
    fn step(&mut self, n: u32, title: &str) -> Result<()> {
        writeln!(self.out, "\n{n}. {title}")?;
        Ok(())
    }

    fn say(&mut self, text: &str) -> Result<()> {
        let mut line = String::new();
        for word in text.split(' ') {
            if !line.is_empty() && line.chars().count() + 1 + word.chars().count() > 76 {
                writeln!(self.out, "   {line}")?;
                line.clear();
            }
            if !line.is_empty() {
                line.push(' ');
            }
            line.push_str(word);
        }
        if !line.is_empty() {
            writeln!(self.out, "   {line}")?;
        }
        Ok(())
    }

    fn agent(&self, session: Session) -> Result<Agent> {
        let provider: Arc<dyn crate::provider::Provider> =
            Arc::new(ScriptedProvider::load(&self.script)?);
        let env = ToolEnv::new(&self.workdir, &self.blobs);
        let capture = self.capture.clone();
        let tools = delegating(
            storyboard::tools(Some(self.ledger.path()), &self.workdir),
            &self.store,
            &provider,
            &env,
            Arc::new(move || Box::new(Printer::new(Box::new(capture.clone()), "     │   │ "))),
            None,
        );
        let rt = Runtime {
            provider,
            tools,
            env,
            config: storyboard::config(),
            observer: Box::new(Printer::new(Box::new(self.capture.clone()), "     │ ")),
            prompter: Box::new(Batch),
            interrupt: Interrupt::new(),
            after_tool_effect: None,
        };
        Agent::new(self.store.clone(), session, rt)
    }

    fn ask(&mut self, agent: &mut Agent, request: &str) -> Result<()> {
        writeln!(self.out, "     │ person: {request}")?;
        let end = agent.prompt(request)?;
        self.capture.drain(self.out)?;
        ensure!(
            end.outcome == cairn::Outcome::Completed,
            "the request ended {:?}: {:?}",
            end.outcome,
            end.error
        );
        Ok(())
    }

    fn resume(&mut self, agent: &mut Agent) -> Result<()> {
        agent.resume()?;
        self.capture.drain(self.out)
    }

    fn balance_line(&self) -> Result<String> {
        let l = self.ledger.read()?;
        let charges: Vec<String> = l
            .charges
            .iter()
            .map(|c| format!("panel {} ({})", c.panel, c.credits))
            .collect();
        Ok(format!(
            "the ledger shows a balance of {} credits after charges for {}",
            l.balance,
            charges.join(", ")
        ))
    }

    fn draw(&mut self, session: &Session, printer: Option<&TreePrinter>) -> Result<()> {
        let mut buf = Vec::new();
        match printer {
            Some(p) => p(session, &mut buf)?,
            None => cairn_view::tree::render(session, &mut buf)?,
        }
        for line in String::from_utf8_lossy(&buf).lines() {
            writeln!(self.out, "     {line}")?;
        }
        Ok(())
    }

    /// Runs one request in a child process and kills it (SIGKILL) at its crash point.
    fn crash(&mut self, exe: &Path, session: &SessionId, request: &str, tool: &str) -> Result<()> {
        let spec = ChildSpec {
            home: self.home.clone(),
            session: session.to_string(),
            prompt: request.to_owned(),
            script: self.script.clone(),
            workdir: self.workdir.clone(),
            ledger: Some(self.ledger.path().to_owned()),
            crash_after: Some(tool.to_owned()),
            acks: false,
        };
        writeln!(self.out, "     │ person: {request}")?;
        let mut child = Command::new(exe)
            .env(CHILD_ENV, serde_json::to_string(&spec)?)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("starting {} for the crash step", exe.display()))?;
        let stdout = child.stdout.take().context("no stdout from the child")?;
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if line.starts_with(CRASH_MARKER) {
                    let _ = tx.send(line);
                    break;
                }
            }
        });
        let reached = rx.recv_timeout(Duration::from_secs(60));
        let _ = child.kill();
        let status = child.wait()?;
        let mut stderr = String::new();
        if let Some(mut e) = child.stderr.take() {
            let _ = e.read_to_string(&mut stderr);
        }
        if reached.is_err() {
            bail!(
                "the child process ({}) did not reach its crash point ({status}); its stderr: {}\n\
                 (the executable's main must call cairn_agent::child::run_if_requested() first)",
                exe.display(),
                stderr.trim()
            );
        }
        ensure!(
            status.signal() == Some(9),
            "the child should have died of SIGKILL, not {status}"
        );
        writeln!(
            self.out,
            "     │ … the process is killed with SIGKILL (kill -9) right after `{tool}` did its work"
        )?;
        Ok(())
    }
}

fn tool_result(session: &Session, tool: &str) -> Result<Option<(String, Option<String>)>> {
    let ctx = session.context();
    let mut messages = Vec::with_capacity(ctx.messages().len());
    for m in ctx.messages() {
        messages.push(m.message()?);
    }
    let Some(call_id) = messages.iter().rev().find_map(|m| {
        m.tool_calls()
            .find(|(_, n, _)| *n == tool)
            .map(|(id, _, _)| id.to_owned())
    }) else {
        return Ok(None);
    };
    Ok(messages.iter().find_map(|m| {
        m.content.iter().find_map(|b| match b {
            Block::ToolResult {
                call_id: c,
                content,
                code,
                ..
            } if *c == call_id => Some((crate::provider::result_text(content), code.clone())),
            _ => None,
        })
    }))
}

/// Records in the session what `cairn agent --resume` needs to run it
/// again offline: the scripted provider, its script, the working directory
/// and the tools (the settings `app.rs` reads back).
fn record_provider(session: &Session, script: &Path, workdir: &Path) -> Result<()> {
    use crate::provider::Provider as _;
    let model = ScriptedProvider::load(script)?.model().to_owned();
    let registry = storyboard::tools(Some(Path::new("ledger.json")), workdir);
    let mut tools = registry.names();
    tools.push("delegate");
    let mut values = serde_json::Map::new();
    values.insert("provider".into(), Value::from("scripted"));
    values.insert("script".into(), Value::from(script.display().to_string()));
    values.insert("model".into(), Value::from(model));
    values.insert(
        crate::app::SETTING_WORKDIR.into(),
        Value::from(workdir.display().to_string()),
    );
    values.insert(crate::app::SETTING_TOOLS.into(), Value::from(tools));
    session.append(cairn::EntryBody::Settings(cairn::Settings { values }))?;
    Ok(())
}

/// The names of the panel images in the demo's working directory.
fn panel_files(workdir: &Path) -> Result<Vec<String>> {
    let dir = workdir.join("panels");
    let mut names = Vec::new();
    for e in std::fs::read_dir(&dir).with_context(|| format!("listing {}", dir.display()))? {
        names.push(e?.file_name().to_string_lossy().into_owned());
    }
    names.sort();
    Ok(names)
}

/// Runs the demo in the store `at`, narrating to `out`.
///
/// # Errors
///
/// I/O and store errors; a child process that cannot be run; a claim of the
/// demo that does not hold (a bug).
pub fn run(at: &OpenedStore, out: &mut dyn Write, opts: DemoOptions) -> Result<DemoReport> {
    let home = &at.location;
    let exe = match &opts.exe {
        Some(e) => e.clone(),
        None => std::env::current_exe().context("finding the current executable")?,
    };
    let store = at.store.clone();
    let session = store.create(NewSession {
        title: Some("comic storyboard (cairn demo)".into()),
        app_state: Some(json!({})),
        ..NewSession::default()
    })?;
    let id = session.id().clone();
    let workdir = at.files.join("demo").join(id.as_str());
    std::fs::create_dir_all(&workdir).with_context(|| format!("creating {}", workdir.display()))?;
    // The ledger stands for a remote billing service, not a file of the
    // workspace: snapshots leave it out, so no rewind ever refunds a charge.
    std::fs::write(workdir.join(".gitignore"), "ledger.json\n")
        .with_context(|| format!("writing {}", workdir.join(".gitignore").display()))?;
    let script_path = workdir.join("script.json");
    std::fs::write(&script_path, serde_json::to_vec_pretty(&script())?)?;
    record_provider(&session, &script_path, &workdir)?;
    let ledger = Ledger::create(workdir.join("ledger.json"), 100)?;
    let mut t = Tour {
        out,
        capture: Capture::default(),
        store: store.clone(),
        id: id.clone(),
        exe,
        home: home.clone(),
        blobs: at.blobs.clone(),
        workdir: workdir.clone(),
        script: script_path,
        ledger,
    };

    writeln!(
        t.out,
        "cairn demo: a storyboard agent, a rewind, three crashes, a subagent and a fork — offline"
    )?;
    t.say(&format!(
        "The agent draws a comic panel by panel and must keep the hero's state consistent. Its model is scripted \
         ({}), so the run is the same every time. Everything it does is appended to one session log, {id}, in {}.",
        t.script.display(),
        home.display()
    ))?;

    // 1-3. Panels 1 and 2, and the rewind.
    let (mut agent, panel1) = panel_1(&mut t, session)?;
    let state_after_panel_2 = panel_2(&mut t, &mut agent)?;
    let (panels_after_rewind, state_after_rewind) = rewind(&mut t, &agent, &panel1)?;
    // 4-7. Three crashes, each resumed.
    let (agent, panel_3_charges, balance) = render_crash(&mut t, agent)?;
    let (agent, side_effect_code, print_queue_lines) = bash_crash(&mut t, agent)?;
    let (agent, subagent, subagent_model_calls, balloon_lines) = subagent_crash(&mut t, agent)?;
    // 8. The fork.
    let fork_id = fork(&mut t, &agent, &panel1, opts.tree_printer.as_ref())?;
    let report = DemoReport {
        session: id.clone(),
        fork: fork_id.clone(),
        workdir: workdir.clone(),
        state_after_panel_2,
        state_after_rewind,
        panels_after_rewind,
        verdict_after_crash: "IndeterminateTool".into(),
        panel_3_charges,
        balance,
        side_effect_code,
        print_queue_lines,
        subagent,
        subagent_model_calls,
        balloon_lines,
    };
    drop(agent);

    writeln!(t.out, "\nExplore what the demo made:")?;
    let store = crate::store::store_flag(home);
    for cmd in [
        format!("cairn{store} tree {id}"),
        format!("cairn{store} steps {id}"),
        format!("cairn{store} export {id} --format html > storyboard.html"),
        format!("cairn{store} tree {fork_id}"),
        format!("cairn{store} ls"),
    ] {
        writeln!(t.out, "  {cmd}")?;
    }
    writeln!(
        t.out,
        "The ledger, the script and the rendered panels are in {}.",
        workdir.display()
    )?;
    Ok(report)
}

/// The hero's state after panel 1.
fn power_up() -> Value {
    json!({"buff": "power-up", "skill": "ten-palm strike"})
}

/// Scene 1: panel 1, labelled `panel-1`.
fn panel_1(t: &mut Tour<'_>, session: Session) -> Result<(Agent, EntryId)> {
    // 1. Panel 1.
    t.step(1, "Panel 1: the hero eats a power-up")?;
    let mut agent = t.agent(session)?;
    t.ask(
        &mut agent,
        "Panel 1: at the tournament the hero eats a glowing power-up candy and faces the rival.",
    )?;
    let panel1 = agent
        .session()
        .leaf()
        .context("the session has no entries")?;
    agent.session().label("panel-1", Some(&panel1))?;
    let power_up = power_up();
    let state = agent.session().context().app_state().clone();
    ensure!(
        state == power_up,
        "after panel 1 the state should be {power_up}, not {state}"
    );
    t.say(&format!(
        "App state: {state}. The render cost 10 credits: {}.",
        t.balance_line()?
    ))?;
    t.say(&format!(
        "The reply {panel1} is labelled `panel-1`, a bookmark to come back to."
    ))?;

    Ok((agent, panel1))
}

/// Scene 2: panel 2, a side plot; the state after it.
fn panel_2(t: &mut Tour<'_>, agent: &mut Agent) -> Result<Value> {
    // 2. Panel 2.
    t.step(2, "Panel 2, a side plot: the wrong pill")?;
    t.ask(agent, "Panel 2, a comic side plot: the teacher mixes up the pills and the hero swallows an expired one.")?;
    let state_after_panel_2 = agent.session().context().app_state().clone();
    ensure!(
        state_after_panel_2 == json!({"buff": "exhausted"}),
        "after panel 2 the state should be exhausted, not {state_after_panel_2}"
    );
    t.say(&format!(
        "App state: {state_after_panel_2} (the patch set skill to null, which removes it); {}.",
        t.balance_line()?
    ))?;

    Ok(state_after_panel_2)
}

/// Scene 3: the rewind to panel 1, files included; the panels and the
/// state after it.
fn rewind(t: &mut Tour<'_>, agent: &Agent, panel1: &EntryId) -> Result<(Vec<String>, Value)> {
    // 3. Rewind.
    t.step(3, "Rewind to panel 1")?;
    t.say("The side plot is dropped: a checkout entry moves the leaf back to `panel-1`, and the files with it (in the REPL: `/rewind panel-1 --files`). Nothing is deleted from the log; panel 2 stays there on its own branch, and its image in the blob store.")?;
    let blobs = cairn_blobs::BlobStore::new(&t.blobs);
    let restored = cairn_workspace::checkout_files(
        &t.store,
        agent.session(),
        &blobs,
        Some(panel1),
        None,
        false,
    )
    .context("rewinding the panel files")?;
    let panels_after_rewind = panel_files(&t.workdir)?;
    ensure!(
        panels_after_rewind == ["panel-1.svg"],
        "after the rewind only panel 1's image should be left, not {panels_after_rewind:?}"
    );
    t.say(&format!(
        "Files: {} deleted ({}); the panels directory holds {} again.",
        restored.deleted.len(),
        restored.deleted.join(", "),
        panels_after_rewind.join(", ")
    ))?;
    let state_after_rewind = agent.session().context().app_state().clone();
    ensure!(
        state_after_rewind == power_up(),
        "after the rewind the state should be the power-up again, not {state_after_rewind}"
    );
    t.say(&format!(
        "App state now: {state_after_rewind}. The power-up is back with no extra work: the state is a fold of the branch, and panel 2's patch is not on it."
    ))?;

    Ok((panels_after_rewind, state_after_rewind))
}

/// Scenes 4 and 5: panel 3 in a child process killed after the render
/// charged, then the idempotent re-run; the resumed agent, the panel 3
/// charges and the balance.
fn render_crash(t: &mut Tour<'_>, agent: Agent) -> Result<(Agent, usize, i64)> {
    let (store, id, exe) = (t.store.clone(), t.id.clone(), t.exe.clone());
    // 4. Panel 3, crash.
    t.step(4, "Panel 3 on the new branch — and a crash")?;
    t.say("This request runs in a child process. The render is dispatched (T1, fsynced), the billing service charges, and the process is killed before the result (T2) is written — the moment that makes agents charge twice.")?;
    drop(agent);
    t.crash(&exe, &id, "Panel 3: back at full power, the hero uses the ten-palm strike and the rival flies out of the ring.", "render_panel")?;
    let charged = t
        .ledger
        .read()?
        .charges
        .iter()
        .filter(|c| c.panel == 3)
        .count();
    ensure!(
        charged == 1,
        "the ledger should show the panel 3 charge before recovery, found {charged}"
    );
    t.say(&format!(
        "The charge went through ({}), but the session has no result for it.",
        t.balance_line()?
    ))?;

    // 5. Reopen and recover.
    t.step(5, "Reopen: the verdict, and an idempotent re-run")?;
    let session = store.open(&id, Access::Write)?;
    let verdict = session.verdict()?;
    let Verdict::IndeterminateTool { calls, .. } = &verdict else {
        bail!(
            "after the crash the verdict should be IndeterminateTool, not {}",
            verdict.name()
        );
    };
    let call = calls.first().context("no pending call")?;
    t.say(&format!(
        "Verdict: {} — `{}` was dispatched (T1 is on disk) and has no result (no T2): it may have run. Its effect class is idempotent, so recovery re-runs it with the same idempotency key, {}.",
        verdict.name(),
        call.tool,
        call.key
    ))?;
    let mut agent = t.agent(session)?;
    t.resume(&mut agent)?;
    let ledger = t.ledger.read()?;
    let panel_3_charges = ledger.charges.iter().filter(|c| c.panel == 3).count();
    ensure!(
        panel_3_charges == 1,
        "panel 3 should be charged once, found {panel_3_charges} charges"
    );
    ensure!(
        ledger.balance == 70,
        "the balance should be 70 after three panels, not {}",
        ledger.balance
    );
    t.say(&format!(
        "The billing service recognised the key and charged nothing: {}. One charge for panel 3.",
        t.balance_line()?
    ))?;

    Ok((agent, panel_3_charges, ledger.balance))
}

/// Scene 6: the same crash with `bash`, a side effect without a key; the
/// resumed agent, the result code and the print queue's lines.
fn bash_crash(t: &mut Tour<'_>, agent: Agent) -> Result<(Agent, Option<String>, usize)> {
    let (store, id, exe) = (t.store.clone(), t.id.clone(), t.exe.clone());
    // 6. The same crash with bash.
    t.step(6, "The same crash with a side effect that has no key")?;
    t.say("Now the agent sends the panel to the print shop with `bash`, a side effect with no idempotency key, and the process is killed again after the command ran.")?;
    drop(agent);
    t.crash(&exe, &id, "Send panel 3 to the print shop.", "bash")?;
    let session = store.open(&id, Access::Write)?;
    let verdict = session.verdict()?;
    ensure!(
        matches!(&verdict, Verdict::IndeterminateTool { calls, .. } if calls.iter().any(|c| c.tool == "bash")),
        "the verdict should be IndeterminateTool for bash, not {}",
        verdict.name()
    );
    t.say(&format!(
        "Verdict: {} for `bash`. A shell command cannot honour a key, so recovery does not re-run it (interactively it would ask: re-run, mark unknown, or tell what happened; the demo runs with --on-unknown mark).",
        verdict.name()
    ))?;
    let mut agent = t.agent(session)?;
    t.resume(&mut agent)?;
    let (text, side_effect_code) =
        tool_result(agent.session(), "bash")?.context("the bash call has no result")?;
    ensure!(
        side_effect_code.as_deref() == Some(cairn::TOOL_OUTCOME_UNKNOWN),
        "the bash result should be TOOL_OUTCOME_UNKNOWN, not {side_effect_code:?}: {text}"
    );
    let queue = std::fs::read_to_string(t.workdir.join("print-queue.txt")).unwrap_or_default();
    let print_queue_lines = queue.lines().count();
    ensure!(
        print_queue_lines == 1,
        "the print job should have run exactly once, found {print_queue_lines} lines"
    );
    t.say("The model sees a real result with code TOOL_OUTCOME_UNKNOWN, so the history is valid and honest; the print queue has the job once.")?;

    Ok((agent, side_effect_code, print_queue_lines))
}

/// Scene 7: a subagent letters panel 3, and a crash after it answered;
/// the resumed agent, the subagent, its model calls and the balloon's lines.
fn subagent_crash(t: &mut Tour<'_>, agent: Agent) -> Result<(Agent, SessionId, usize, usize)> {
    let (store, id, exe) = (t.store.clone(), t.id.clone(), t.exe.clone());
    // 7. A subagent, and a crash after it answered.
    t.step(
        7,
        "A subagent letters panel 3 — and a crash after it answered",
    )?;
    t.say("The agent delegates the lettering with its `delegate` tool: a child agent works in a child session of its own (its own journal and tools), linked to the call. The process is killed after the subagent answered and before the parent recorded that answer.")?;
    drop(agent);
    t.crash(
        &exe,
        &id,
        "Ask the letterer for panel 3's speech balloon.",
        "delegate",
    )?;
    let session = store.open(&id, Access::Write)?;
    let verdict = session.verdict()?;
    ensure!(
        matches!(&verdict, Verdict::IndeterminateTool { calls, .. } if calls.iter().any(|c| c.tool == "delegate")),
        "the verdict should be IndeterminateTool for delegate, not {}",
        verdict.name()
    );
    let children = store.children(&id)?;
    let [(child, _)] = children.as_slice() else {
        bail!(
            "the storyboard should have one subagent session, found {}",
            children.len()
        );
    };
    let subagent = child.id.clone();
    let model_calls = |store: &Store| -> Result<usize> {
        let s = store.open(&subagent, Access::Read)?;
        Ok(s.steps()?
            .iter()
            .filter(|s| s.kind == cairn::steps::StepKind::Model)
            .count())
    };
    let before = model_calls(&store)?;
    t.say(&format!(
        "Verdict: {} for `delegate`. Recovery goes from the outside in: `delegate` is idempotent, so cairn's recovery loop re-runs it, and the re-run finds the subagent session {subagent} its call started. That session finished (its own verdict: {}), so its recorded answer is the result; it is not run again.",
        verdict.name(),
        store.open(&subagent, Access::Read)?.verdict()?.name()
    ))?;
    let mut agent = t.agent(session)?;
    t.resume(&mut agent)?;
    let subagent_model_calls = model_calls(&store)?;
    ensure!(
        subagent_model_calls == before,
        "the subagent should not run again: {before} model calls before recovery, {subagent_model_calls} after"
    );
    ensure!(
        store.children(&id)?.len() == 1,
        "recovery must not start a second subagent"
    );
    let (answer, _) =
        tool_result(agent.session(), "delegate")?.context("the delegate call has no result")?;
    ensure!(
        answer.contains("HI-YAH"),
        "the parent's result should carry the subagent's answer, not {answer}"
    );
    let balloons = std::fs::read_to_string(t.workdir.join("balloons.txt")).unwrap_or_default();
    let balloon_lines = balloons.lines().count();
    ensure!(
        balloon_lines == 1,
        "the balloon should be written once, found {balloon_lines} lines"
    );
    t.say(&format!(
        "The parent's call is answered with the subagent's answer; balloons.txt has the balloon once. `cairn steps {id}` shows the subagent's steps under the call, `cairn ls` shows its session under the storyboard."
    ))?;

    Ok((agent, subagent, subagent_model_calls, balloon_lines))
}

/// Scene 8: the fork from panel 1, and both trees drawn; the fork's id.
fn fork(
    t: &mut Tour<'_>,
    agent: &Agent,
    panel1: &EntryId,
    printer: Option<&TreePrinter>,
) -> Result<SessionId> {
    // 8. Fork.
    t.step(8, "Fork from panel 1 into a new session")?;
    let fork = t.store.fork(
        agent.session(),
        Some(panel1),
        Some("comic storyboard — fork at panel 1".into()),
    )?;
    let fork_id = fork.id().clone();
    ensure!(
        *fork.context().app_state() == power_up(),
        "the fork should start powered up"
    );
    t.say(&format!("The fork {fork_id} holds the branch up to panel 1 — state {} — and the original is untouched.", fork.context().app_state()))?;
    writeln!(
        t.out,
        "\n   The storyboard session {} (* marks the active branch):",
        t.id
    )?;
    t.draw(agent.session(), printer)?;
    writeln!(t.out, "\n   The fork {fork_id}:")?;
    t.draw(&fork, printer)?;
    drop(fork);
    Ok(fork_id)
}
