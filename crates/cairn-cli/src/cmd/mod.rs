//! The commands, one module per group, and the dispatch from parsed
//! arguments to them.

mod append;
mod copy;
mod demo;
mod edit;
mod export;
mod fsck;
mod gc;
mod import;
mod list;
mod log;
mod ops;
mod rm;
mod serve;
mod show;
mod steps;
mod tree;
mod workspace;

use anyhow::{Result, bail};

use crate::args::{Cli, Command, SessionArg};
use crate::target::Ctx;
use crate::term::Look;

/// How a command that ran to its end came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// As asked (exit 0).
    Ok,
    /// The thing asked for is not so, e.g. fsck found damage (exit 1).
    NotSo,
}

/// Runs the parsed command line.
///
/// # Errors
///
/// Usage and I/O errors, and whatever the library refuses (exit 2).
pub fn run(cli: Cli) -> Result<Status> {
    let ctx = Ctx {
        store_dir: cli.store,
        look: Look::detect(cli.color),
    };
    match cli.command {
        Command::New { title, state } => edit::new(&ctx, title, state.as_deref()),
        Command::Append { target, durability } => append::run(&ctx, &target, durability),
        Command::Ls { all, flat, json } => list::run(&ctx, all, flat, json),
        Command::Show {
            target,
            json,
            memory,
        } => show::show(&ctx, &target, json, memory),
        Command::Context { target, json } => show::context(&ctx, &target, json),
        Command::Tree {
            target,
            ascii,
            depth,
            json,
        } => tree::run(&ctx, &target, ascii, depth, json),
        Command::Log {
            target,
            from,
            trace,
            json,
        } => log::run(&ctx, &target, from, trace, json),
        Command::Checkout {
            target,
            rest,
            summary,
            files: true,
            force,
        } => workspace::checkout(&ctx, &target, &rest, summary, force),
        Command::Checkout {
            target,
            rest,
            summary,
            files: false,
            force: _,
        } => edit::checkout(&ctx, &target, &rest, summary),
        Command::Diff { target, rest, json } => workspace::diff(&ctx, &target, &rest, json),
        Command::Fork {
            target,
            rest,
            title,
        } => edit::fork(&ctx, &target, &rest, title),
        Command::Label {
            target,
            rest,
            delete,
            json,
        } => edit::label(&ctx, &target, &rest, delete, json),
        Command::Rm { target, yes } => rm::run(&ctx, &target, yes),
        Command::Fsck {
            target,
            salvage,
            json,
        } => {
            let every = every_session(&target)?;
            if every && salvage.is_some() {
                bail!("--all and --salvage do not go together: salvage one session at a time");
            }
            fsck::run(&ctx, &target, every, salvage.as_deref(), json)
        }
        Command::Export {
            target,
            format,
            output,
        } => export::run(&ctx, &target, format, output.as_deref()),
        Command::Import {
            from,
            strict,
            watch,
            json,
            paths,
        } => import::run(&ctx, from, strict, watch, json, &paths),
        Command::Demo { journal: true } => demo::run(&ctx),
        Command::Demo { journal: false } => demo::agent(&ctx),
        Command::Agent(a) => {
            let mut opts = a.into_options(ctx.opened()?);
            opts.tree_printer = Some(demo::tree_printer(ctx.look));
            cairn_agent::run(opts)?;
            Ok(Status::Ok)
        }
        Command::Steps {
            target,
            rest,
            count,
            depth,
            json,
        } => steps::run(
            &ctx,
            &steps::Request {
                target: &target,
                rest: &rest,
                last: count,
                depth,
                json,
            },
        ),
        Command::Recover {
            target,
            policy,
            on_running,
            json,
        } if every_session(&target)? => {
            let Some(policy) = policy else {
                bail!("recover --all needs --policy: nobody can be asked about every session");
            };
            ops::recover_all(&ctx, policy, on_running, json)
        }
        Command::Recover {
            target,
            policy,
            on_running,
            json,
        } => ops::recover(&ctx, &target, policy, on_running, json),
        Command::Memory { target, json } => ops::memory(&ctx, &target, json),
        Command::Copy { from, to } => copy::run(&ctx, &from, &to),
        Command::Gc { grace_secs, json } => gc::run(&ctx, grace_secs, json),
        Command::Serve(args) => serve::run(&ctx, args),
    }
}

/// Whether `fsck`/`recover` were asked for every session (`--all` without
/// `--last`), which names no session.
///
/// # Errors
///
/// A usage error for `--all` with a session.
fn every_session(target: &SessionArg) -> Result<bool> {
    let every = target.all && !target.last;
    if every && target.session.is_some() {
        bail!("--all names every session: leave out SESSION (or use --last --all for the newest)");
    }
    Ok(every)
}
