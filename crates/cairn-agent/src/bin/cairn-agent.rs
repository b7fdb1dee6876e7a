//! `cairn-agent`: the reference agent as a standalone binary — the same as
//! `cairn agent` (see `cairn-agent --help`), plus the hidden child-process
//! entry the demo and the crash tests use. `cairn-agent demo` runs the demo.
//!
//! It opens only a directory store, which the core opens without a
//! database driver; a SQLite or Postgres location is refused with a
//! pointer to `cairn agent`, which opens every kind.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use cairn_agent::OpenedStore;
use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "cairn-agent",
    version,
    about = "The reference agent on cairn (same as `cairn agent`)."
)]
struct Cli {
    /// The store: a directory (default: $CAIRN_HOME, else
    /// ~/.local/share/cairn). For a SQLite or Postgres store, run `cairn agent`.
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

/// Opens the directory store at `location`; refuses a location that names
/// a database (`sqlite:PATH`, `postgres://…`), which only `cairn` opens.
fn open_dir(location: &Path) -> anyhow::Result<OpenedStore> {
    let text = location.to_string_lossy();
    if text.starts_with("sqlite:") || text.contains("://") {
        anyhow::bail!(
            "{text} names a database store, and the standalone cairn-agent opens only a directory \
             store (it links no database driver): run `cairn agent --store {text}` instead"
        );
    }
    Ok(OpenedStore::dir(location))
}

fn main() -> ExitCode {
    if let Some(code) = cairn_agent::child::run_if_requested(open_dir) {
        return code;
    }
    let cli = Cli::parse();
    let Some(home) = cli.store.or_else(cairn::Store::default_home) else {
        eprintln!("error: no store: pass --store DIR or set CAIRN_HOME");
        return ExitCode::from(2);
    };
    let result = open_dir(&home).and_then(|at| match cli.command {
        Some(Cmd::Demo) => cairn_agent::demo::run(
            &at,
            &mut std::io::stdout().lock(),
            cairn_agent::DemoOptions::default(),
        )
        .map(drop),
        None => cairn_agent::run(cli.agent.into_options(at)),
    });
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_database_location_is_refused_with_a_pointer_to_cairn_agent() {
        for location in ["sqlite:/x/a.db", "postgres://h/db", "postgresql://h/db"] {
            let e = open_dir(Path::new(location)).unwrap_err().to_string();
            assert!(
                e.contains(&format!("run `cairn agent --store {location}`")),
                "{e}"
            );
        }
        let home = open_dir(Path::new("/x/home")).unwrap();
        assert_eq!(
            (home.files.as_path(), home.blobs.as_path()),
            (Path::new("/x/home"), Path::new("/x/home/blobs"))
        );
    }
}
