//! `cairn demo`: a guided, offline tour of the journal, narrated in plain
//! words. It makes a real session in the store (a comic storyboard), branches
//! it, rewinds it, stages a crash that tears the last line (on SQLite: a
//! writer that stops, its records committed whole), reopens it, and forks
//! it — checking each claim it makes as it goes.

use std::path::Path;

use anyhow::{Context as _, Result, bail, ensure};
use cairn::{
    Access, AppStateChange, Appended, Block, EntryBody, EntryId, Message, NewSession, Role,
    Session, Store,
};
use serde_json::json;

use super::Status;
use super::tree::{UNICODE, draw};
use crate::target::Ctx;
use crate::term::{Look, Out, Style, wrap};
use cairn_view::describe::{compact, entry_line};
use cairn_view::tree::TreeView;

/// Runs the demo.
///
/// # Errors
///
/// I/O errors, or a claim of the demo that does not hold (a bug).
pub fn run(ctx: &Ctx) -> Result<Status> {
    let home = ctx.home()?;
    let store = ctx.store()?;
    let mut out = ctx.out();
    let mut tour = Tour { out: &mut out };
    tour.heading(&format!(
        "cairn demo: a tour of the journal, in the store {}",
        home.display()
    ))?;
    tour.say(
        "Every session is an append-only log. What the model sees, the app state, settings and \
         labels are all computed from it, so nothing is ever rewritten in place.",
    )?;

    let (s, panel1) = panel_1(&mut tour, &store)?;
    let panel3 = side_plot_and_rewind(&mut tour, &s, &panel1)?;
    // 5. A crash.
    let s = match cairn_stores::Location::parse(&home) {
        cairn_stores::Location::Dir(_) => crash_on_file(&mut tour, &store, s, &panel3)?,
        cairn_stores::Location::Sqlite(_) => crash_on_sqlite(&mut tour, &store, s, &panel3)?,
        cairn_stores::Location::Postgres(_) => crash_on_postgres(&mut tour, &store, s, &panel3)?,
    };

    fork_and_explore(&mut tour, &store, &s, &panel1, &home)?;
    Ok(Status::Ok)
}

/// The hero's state at `panel-1`.
fn power_up() -> serde_json::Value {
    json!({"buff": "power-up", "skill": "ten-palm strike"})
}

/// Step 1: a session, a tool call and app state; the session and the
/// entry labelled `panel-1`.
fn panel_1(tour: &mut Tour<'_, '_>, store: &Store) -> Result<(Session, EntryId)> {
    // 1. Panel 1.
    tour.step(1, "A session, a tool call and app state")?;
    let s = store.create(NewSession {
        title: Some("comic storyboard".into()),
        app_state: Some(json!({})),
        ..NewSession::default()
    })?;
    tour.say(&format!(
        "Created the session {} (\"comic storyboard\").",
        s.id()
    ))?;
    tour.append(
        &s,
        user("Draw panel 1: the hero eats a glowing mushroom and powers up."),
    )?;
    tour.append(
        &s,
        EntryBody::Message(Message {
            role: Role::Assistant,
            content: vec![
                Block::Text {
                    text: "Rendering panel 1.".into(),
                },
                Block::ToolCall {
                    call_id: "call-1".into(),
                    name: "render_panel".into(),
                    arguments: json!({"panel": 1, "scene": "hero eats a glowing mushroom"}),
                },
            ],
            usage: None,
            model: Some("demo-model".into()),
            stop_reason: Some("tool_use".into()),
        }),
    )?;
    tour.append(
        &s,
        EntryBody::Message(Message {
            role: Role::Tool,
            content: vec![Block::ToolResult {
                call_id: "call-1".into(),
                content: vec![Block::Text {
                    text: "panel-1.png rendered (1024x1024)".into(),
                }],
                is_error: false,
                code: None,
            }],
            usage: None,
            model: None,
            stop_reason: None,
        }),
    )?;
    let power_up = power_up();
    let panel1 = tour.append(
        &s,
        EntryBody::AppState(AppStateChange::Set(power_up.clone())),
    )?;
    s.label("panel-1", Some(&panel1))?;
    tour.say(&format!(
        "Labelled entry {panel1} `panel-1`: a bookmark to come back to."
    ))?;

    Ok((s, panel1))
}

/// Steps 2 to 4: a side plot, the rewind to `panel-1` and panel 3 on the
/// new branch; panel 3's entry.
fn side_plot_and_rewind(tour: &mut Tour<'_, '_>, s: &Session, panel1: &EntryId) -> Result<EntryId> {
    // 2. Panel 2, a side plot.
    tour.step(2, "Panel 2: a side plot changes the state")?;
    tour.append(
        s,
        user("Panel 2, a side plot: the hero duels the rival and is worn out."),
    )?;
    tour.append(
        s,
        text(
            Role::Assistant,
            "Panel 2: the duel. The hero wins, but only just.",
        ),
    )?;
    tour.append(
        s,
        EntryBody::AppState(AppStateChange::Patch(
            json!({"buff": "exhausted", "skill": null}),
        )),
    )?;
    tour.say(&format!(
        "App state now: {}",
        compact(s.context().app_state())
    ))?;

    // 3. Rewind.
    tour.step(3, "Rewind to panel-1")?;
    tour.say(
        "We drop the side plot: `cairn rewind SESSION panel-1` appends a checkout entry that \
         moves the leaf back. Nothing is deleted; panel 2 stays in the log.",
    )?;
    s.checkout(
        Some(panel1),
        Some("Panel 2's duel was drafted and dropped.".into()),
    )?;
    let state = s.context().app_state().clone();
    tour.say(&format!("App state now: {}", compact(&state)))?;
    ensure!(
        state == power_up(),
        "the state after the rewind should be the power-up, not {state}"
    );
    tour.say("The power-up is back: the state is the fold of the branch, and panel 2 is off it.")?;

    // 4. Panel 3 on the new branch.
    tour.step(4, "Panel 3 on the new branch")?;
    tour.append(s, user("Panel 3: powered up, the hero climbs the tower."))?;
    let panel3 = tour.append(
        s,
        text(
            Role::Assistant,
            "Panel 3: the climb, ten-palm strike at the ready.",
        ),
    )?;
    tour.say(&format!(
        "The context has {} messages; panel 2 is not among them.",
        s.context().messages().len()
    ))?;

    Ok(panel3)
}

/// Step 6: the fork at `panel-1`, both trees drawn, and what to explore.
fn fork_and_explore(
    tour: &mut Tour<'_, '_>,
    store: &Store,
    s: &Session,
    panel1: &EntryId,
    home: &Path,
) -> Result<()> {
    let id = s.id();
    // 6. Fork.
    tour.step(6, "Fork panel-1 into a new session")?;
    let fork = store.fork(s, Some(panel1), Some("comic storyboard, take two".into()))?;
    tour.say(&format!(
        "`cairn fork SESSION panel-1` copied the branch up to panel-1 into {}.",
        fork.id()
    ))?;
    tour.say(&format!(
        "Its state: {}",
        compact(fork.context().app_state())
    ))?;
    tour.out.nl()?;
    for session in [s, &fork] {
        let title = session.title().unwrap_or_default();
        tour.out.spans(&[
            (Style::Bold, &format!("{} ", session.id())),
            (Style::Plain, &format!("{title:?}")),
        ])?;
        draw(tour.out, session, &TreeView::load(session), UNICODE)?;
        tour.out.nl()?;
    }

    let store_flag = cairn_agent::store::store_flag(home);
    tour.heading("Explore what it made:")?;
    for cmd in [
        format!("cairn{store_flag} tree {id}"),
        format!("cairn{store_flag} show {id}"),
        format!("cairn{store_flag} log {id}"),
        format!("cairn{store_flag} export {id} --format html -o storyboard.html"),
        format!("cairn{store_flag} tree {}", fork.id()),
    ] {
        tour.out
            .spans(&[(Style::Plain, "  "), (Style::Active, &cmd)])?;
    }
    Ok(())
}

/// Step 5 on a directory store: a torn last line, cut on reopening.
fn crash_on_file(
    tour: &mut Tour<'_, '_>,
    store: &Store,
    s: Session,
    panel3: &EntryId,
) -> Result<Session> {
    tour.step(5, "A crash tears the last line")?;
    let records = s.len();
    tour.append(&s, user("Panel 4: the hero reaches the top and"))?;
    let location = s.location().to_owned();
    let id = s.id().clone();
    drop(s);
    let torn = tear_last_line(Path::new(&location))?;
    tour.say(&format!(
        "To stage a crash, the demo wrote panel 4 and then cut its line in half ({torn} bytes \
         kept): what the disk holds when power fails while a line is being written. Such a \
         record was never acknowledged: cairn acknowledges a record only once its line is \
         complete and synced."
    ))?;
    let s = store.open(&id, Access::Write)?;
    let Some(t) = s.open_report().torn.clone() else {
        bail!("reopening should have found the torn line");
    };
    let saved = t.saved_to.as_deref().map_or("nowhere".into(), file_name);
    tour.say(&format!(
        "Reopened for writing, cairn found {} torn bytes at offset {} ({}); it cut them from the \
         log and saved them beside it as {saved}.",
        t.len, t.offset, t.problem
    ))?;
    nothing_lost(tour, s, records, panel3)
}

/// Step 5 on a SQLite store: an append is one transaction, so a crash
/// leaves a record whole or absent, and there is no tail to cut.
fn crash_on_sqlite(
    tour: &mut Tour<'_, '_>,
    store: &Store,
    s: Session,
    panel3: &EntryId,
) -> Result<Session> {
    tour.step(5, "A crash on SQLite")?;
    crash_on_database(
        tour,
        store,
        s,
        panel3,
        "On a SQLite store each append is one transaction whose commit syncs the write-ahead \
         log before it is acknowledged. A crash mid-append rolls the transaction back: a record \
         is stored whole or not at all, so there is no torn line to cut. The demo closes the \
         session and reopens it for writing.",
    )
}

/// Step 5 on a Postgres store: an append is one statement, so one
/// transaction; a crash (of the writer, or of the server) leaves a record
/// whole or absent.
fn crash_on_postgres(
    tour: &mut Tour<'_, '_>,
    store: &Store,
    s: Session,
    panel3: &EntryId,
) -> Result<Session> {
    tour.step(5, "A crash on Postgres")?;
    crash_on_database(
        tour,
        store,
        s,
        panel3,
        "On a Postgres store each append is one statement, so one transaction, committed with \
         synchronous_commit on before it is acknowledged, and fenced by the writer's lease. A \
         crash mid-append (of the worker, or of the server) rolls it back: a record is stored \
         whole or not at all, so there is no torn line to cut. The demo closes the session \
         and reopens it for writing.",
    )
}

/// The rest of step 5 on a transactional store: close, say `why`, reopen
/// for writing, and check nothing acknowledged was lost.
fn crash_on_database(
    tour: &mut Tour<'_, '_>,
    store: &Store,
    s: Session,
    panel3: &EntryId,
    why: &str,
) -> Result<Session> {
    let records = s.len();
    let id = s.id().clone();
    drop(s);
    tour.say(why)?;
    let s = store.open(&id, Access::Write)?;
    ensure!(
        s.open_report().torn.is_none(),
        "a transactional store has no torn tail"
    );
    nothing_lost(tour, s, records, panel3)
}

/// Checks and says that the reopened session holds every acknowledged record.
fn nothing_lost(
    tour: &mut Tour<'_, '_>,
    s: Session,
    records: u64,
    panel3: &EntryId,
) -> Result<Session> {
    ensure!(
        s.len() == records,
        "every acknowledged record should be there: {} of {records}",
        s.len()
    );
    ensure!(
        s.leaf().as_ref() == Some(panel3),
        "the leaf should be panel 3's reply"
    );
    tour.say(&format!(
        "All {records} acknowledged records are there and the leaf is panel 3's reply ({panel3}): nothing lost."
    ))?;
    Ok(s)
}

struct Tour<'a, 'w> {
    out: &'a mut Out<'w>,
}

impl Tour<'_, '_> {
    fn heading(&mut self, text: &str) -> std::io::Result<()> {
        self.out.spans(&[(Style::Bold, text)])
    }

    fn step(&mut self, n: u32, title: &str) -> std::io::Result<()> {
        self.out.nl()?;
        self.out.spans(&[(Style::Bold, &format!("{n}. {title}"))])
    }

    /// A paragraph of narration, wrapped to the output width.
    fn say(&mut self, text: &str) -> std::io::Result<()> {
        for line in wrap(text, self.out.look.width.saturating_sub(4)) {
            self.out.line(&format!("   {line}"))?;
        }
        Ok(())
    }

    /// Appends an entry at the leaf and shows it in one line.
    fn append(&mut self, s: &Session, body: EntryBody) -> Result<EntryId> {
        let d = entry_line(&body);
        let Appended { seq, id } = s.append(body)?;
        let id = id.context("an entry append returns the entry's id")?;
        self.out.spans(&[
            (Style::Dim, &format!("   + #{seq} {id} ")),
            (d.style, &d.tag),
            (Style::Plain, &format!(" {}", crate::term::fit(&d.text, 52))),
        ])?;
        Ok(id)
    }
}

fn user(t: &str) -> EntryBody {
    text(Role::User, t)
}

fn text(role: Role, t: &str) -> EntryBody {
    EntryBody::Message(Message::text(role, t))
}

/// Cuts the file in the middle of its last line; returns the bytes kept of it.
fn tear_last_line(path: &Path) -> Result<u64> {
    let bytes = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    let body = bytes.strip_suffix(b"\n").unwrap_or(&bytes);
    let start = body.iter().rposition(|b| *b == b'\n').map_or(0, |p| p + 1);
    let kept = (bytes.len() - start) / 2;
    let f = std::fs::OpenOptions::new().write(true).open(path)?;
    f.set_len((start + kept) as u64)?;
    f.sync_all()?;
    Ok(kept as u64)
}

fn file_name(path: &str) -> String {
    Path::new(path)
        .file_name()
        .map_or_else(|| path.to_owned(), |n| n.to_string_lossy().into_owned())
}

/// Draws a session's tree as `cairn tree` does, for the agent's `/tree` and
/// its demo.
pub fn tree_printer(look: Look) -> cairn_agent::repl::TreePrinter {
    std::sync::Arc::new(move |session: &Session, w: &mut dyn std::io::Write| {
        let mut out = Out::new(w, look);
        draw(&mut out, session, &TreeView::load(session), UNICODE)?;
        out.flush()?;
        Ok(())
    })
}

/// Runs `cairn demo`: the reference agent's storyboard tour.
///
/// # Errors
///
/// I/O errors, or a claim of the demo that does not hold (a bug).
pub fn agent(ctx: &Ctx) -> Result<Status> {
    let at = ctx.opened()?;
    let opts = cairn_agent::DemoOptions {
        exe: None,
        tree_printer: Some(tree_printer(ctx.look)),
    };
    let mut stdout = std::io::stdout().lock();
    cairn_agent::demo::run(&at, &mut stdout, opts)?;
    Ok(Status::Ok)
}
