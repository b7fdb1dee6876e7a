//! `cairn-agent`: the reference agent as a standalone binary — the same as
//! `cairn agent` (see `cairn-agent --help`), plus the hidden child-process
//! entry the demo and the crash tests use. `cairn-agent demo` runs the demo.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "cairn-agent",
    version,
    about = "The reference agent on cairn (same as `cairn agent`)."
)]
struct Cli {
    /// The store: a directory, or sqlite:PATH for a SQLite database
    /// (default: $CAIRN_HOME, else ~/.local/share/cairn).
    #[arg(long, global = true, value_name = "DIR")]
    store: Option<PathBuf>,
    #[command(subcommand)]
    command: Option<Cmd>,
    #[command(flatten)]
    agent: cairn_agent::AgentArgs,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// The offline demo: a storyboard agent, a rewind, two crashes and a fork.
    Demo,
}

fn main() -> ExitCode {
    if let Some(code) = cairn_agent::child::run_if_requested() {
        return code;
    }
    let cli = Cli::parse();
    let Some(home) = cli.store.or_else(cairn::Store::default_home) else {
        eprintln!("error: no store: pass --store DIR or set CAIRN_HOME");
        return ExitCode::from(2);
    };
    let result = match cli.command {
        Some(Cmd::Demo) => cairn_agent::demo::run(
            &home,
            &mut std::io::stdout().lock(),
            cairn_agent::DemoOptions::default(),
        )
        .map(drop),
        None => cairn_agent::run(cli.agent.into_options(home)),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            if let Some(t) = e.downcast_ref::<cairn_agent::interrupt::Terminated>() {
                eprintln!("{t}");
                return ExitCode::from(t.exit_code());
            }
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}
