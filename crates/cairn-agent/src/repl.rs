//! The REPL: requests to the agent, and slash commands to look at and move
//! around the session — `/steps`, `/tree`, `/rewind ENTRY [--files]`, `/fork ENTRY`,
//! `/label ENTRY NAME`, `/state`, `/context`, `/memory`, `/compact`,
//! `/quit`. ENTRY is an entry id, a unique id prefix, a label or a step
//! number (`s0005`: the state right after that step).

use std::io::Write;
use std::sync::Arc;

use anyhow::{Context as _, Result, bail};
use cairn::{Access, EntryId, Session};
use cairn_view::term::{clean, clean_line, excerpt};
use cairn_view::tree::describe;

use crate::agent::Agent;
use crate::prompt::Input;

/// Draws a session's tree for `/tree` and the demo (the CLI passes its own,
/// richer one; without one, [`cairn_view::tree::render`]).
pub type TreePrinter = Arc<dyn Fn(&Session, &mut dyn Write) -> Result<()> + Send + Sync>;

/// The commands, for `/help`.
pub const HELP: &str = "\
Type a request for the agent, or a command:
  /steps               numbered steps: inputs, model calls, tool calls
  /tree                the session's tree (* = active branch)
  /rewind ENTRY        move back to ENTRY or step (s0005) (history and app state rewind together)
  /rewind ENTRY --files   the working directory's files too (--force: overwrite files changed by hand)
  /fork ENTRY          copy the branch up to ENTRY into a new session and continue there
  /label ENTRY NAME    bookmark ENTRY as NAME (usable wherever ENTRY is)
  /state               the app state at this point
  /context             what the model sees
  /memory              the session memory injected after the system prompt
  /compact             summarise older context now
  /quit                leave (Ctrl-D too); Ctrl-C interrupts the agent";

/// Runs the REPL until `/quit` or end of input.
///
/// # Errors
///
/// Append errors from the agent (command errors are printed, not returned);
/// [`Terminated`](crate::interrupt::Terminated) after SIGTERM or SIGHUP.
pub fn run(agent: &mut Agent, tree: Option<&TreePrinter>) -> Result<()> {
    println!("Type a request, or /help. Ctrl-C interrupts the agent; Ctrl-D leaves.");
    let mut interrupted_once = false;
    loop {
        agent.runtime().interrupt.set_idle(true);
        let input = agent.runtime().prompter.read_input("cairn> ");
        agent.runtime().interrupt.set_idle(false);
        agent.runtime().interrupt.check_terminated()?;
        match input {
            Input::Line(line) => {
                interrupted_once = false;
                let line = line.trim();
                if line.is_empty() {
                    continue;
                }
                if let Some(cmd) = line.strip_prefix('/') {
                    match command(agent, cmd, tree) {
                        Ok(true) => return Ok(()),
                        Ok(false) => {}
                        Err(e) => println!("error: {}", clean(&format!("{e:#}"))),
                    }
                    continue;
                }
                agent.prompt(line)?;
                agent.runtime().interrupt.check_terminated()?;
            }
            Input::Interrupted if interrupted_once => return Ok(()),
            Input::Interrupted => {
                interrupted_once = true;
                println!("(Ctrl-C again, Ctrl-D or /quit to leave)");
            }
            Input::Eof => return Ok(()),
        }
    }
}

/// The compaction in force, for people: where it is and what it kept.
fn compaction_line(c: &cairn::ActiveCompaction) -> String {
    let tokens = c
        .tokens_before
        .map(|t| format!(", {t} tokens before it"))
        .unwrap_or_default();
    match &c.first_kept {
        Some(k) => format!(
            "(compacted at entry {}{tokens}: a summary, then the messages from entry {k} on)",
            c.entry
        ),
        None => format!(
            "(compacted at entry {}{tokens}: a summary of everything before it)",
            c.entry
        ),
    }
}

fn entry(agent: &Agent, query: Option<&str>) -> Result<EntryId> {
    let Some(q) = query else {
        bail!(
            "which entry? give an id, an id prefix, a label (see /tree) or a step (s0005, see /steps)"
        )
    };
    Ok(cairn::steps::resolve(agent.session(), q)?)
}

/// Runs one command; `true` means quit.
fn command(agent: &mut Agent, cmd: &str, tree: Option<&TreePrinter>) -> Result<bool> {
    let mut words = cmd.split_whitespace();
    let name = words.next().unwrap_or("");
    let args: Vec<&str> = words.collect();
    let mut out = std::io::stdout().lock();
    match name {
        "quit" | "exit" | "q" => return Ok(true),
        "help" | "h" | "?" => writeln!(out, "{HELP}")?,
        "steps" => {
            for s in agent.session().steps()? {
                let c = cairn_view::describe::step_cells(&s);
                let indent = if s.parent.is_some() { "  " } else { "" };
                writeln!(
                    out,
                    "{} {indent}{:<5} {} [{}] {} {} tok",
                    s.label(),
                    c.kind,
                    excerpt(&c.name, 60),
                    c.status,
                    c.time,
                    c.tokens
                )?;
                for (tag, text) in [("in ", &c.input), ("out", &c.output)] {
                    if !text.is_empty() {
                        writeln!(out, "      {indent}{tag} {}", excerpt(text, 70))?;
                    }
                }
            }
        }
        "tree" => match tree {
            Some(draw) => draw(agent.session(), &mut out)?,
            None => cairn_view::tree::render(agent.session(), &mut out)?,
        },
        "rewind" | "checkout" => {
            if agent.session().resume_operation().is_some() {
                bail!("an operation is still open; it must finish before the session moves");
            }
            let files = args.contains(&"--files");
            let force = args.contains(&"--force");
            let named = args.iter().find(|a| !a.starts_with("--")).copied();
            let target = entry(agent, named)?;
            if files {
                let blobs = cairn_blobs::BlobStore::new(&agent.runtime().env.blob_dir);
                let r = cairn_workspace::checkout_files(
                    agent.store(),
                    agent.session(),
                    &blobs,
                    Some(&target),
                    None,
                    force,
                )?;
                writeln!(
                    out,
                    "files: {} created, {} restored, {} deleted, {} already in place",
                    r.created.len(),
                    r.restored.len(),
                    r.deleted.len(),
                    r.already.len()
                )?;
                for left in &r.unrestorable {
                    writeln!(out, "left as is: {} ({})", clean_line(&left.path), left.why)?;
                }
            } else {
                agent.session().checkout(Some(&target), None)?;
            }
            writeln!(
                out,
                "rewound to {target}; the app state here is {}",
                clean_line(&agent.session().context().app_state().to_string())
            )?;
        }
        "fork" => {
            let target = entry(agent, args.first().copied())?;
            let forked = agent.store().fork(agent.session(), Some(&target), None)?;
            let (old, new) = (agent.session().id().clone(), forked.id().clone());
            drop(forked);
            let session = agent
                .store()
                .open(&new, Access::Write)
                .context("opening the fork")?;
            agent.switch_session(session)?;
            writeln!(
                out,
                "forked {old} at {target} into {new}; now working in {new} (the original is untouched)"
            )?;
        }
        "label" => {
            let target = entry(agent, args.first().copied())?;
            let Some(label) = args.get(1) else {
                bail!("usage: /label ENTRY NAME")
            };
            agent.session().label(label, Some(&target))?;
            writeln!(out, "labelled {target} as {}", clean_line(label))?;
        }
        "state" => {
            let state = serde_json::to_string_pretty(agent.session().context().app_state())?;
            writeln!(out, "{}", clean(&state))?;
        }
        "context" => {
            let ctx = agent.session().context();
            if let Some(c) = ctx.compaction() {
                writeln!(out, "{}", compaction_line(c))?;
            }
            for m in ctx.messages() {
                let body = cairn::EntryBody::Message(m.message()?.clone());
                writeln!(out, "{} {}", m.entry(), describe(&body, 100))?;
            }
        }
        "memory" => match agent.session().memory() {
            Some(m) if !m.is_empty() => write!(out, "{}", clean(&m.render()))?,
            Some(_) => writeln!(out, "(nothing remembered yet)")?,
            None => writeln!(out, "(session memory is off)")?,
        },
        "compact" => {
            drop(out);
            match agent.compact()? {
                Some(e) => println!("compacted: entry {e}"),
                None => println!("nothing was compacted"),
            }
        }
        other => bail!("unknown command /{}: try /help", clean_line(other)),
    }
    Ok(false)
}
