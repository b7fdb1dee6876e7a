//! The `cairn` command-line tool: argument parsing, output and exit codes.
//! The logic lives in the `cairn` library; this binary is glue.
//!
//! Exit codes: 0 ok; 1 the thing asked for is not so (fsck found damage);
//! 2 usage or I/O error; 128 + N after signal N stopped `cairn agent`
//! (SIGTERM, SIGHUP). A broken pipe exits quietly with 0.

mod args;
mod cmd;
mod report;
mod target;
mod term;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    // The demo runs its crash steps as child processes of this executable.
    if let Some(code) = cairn_agent::child::run_if_requested(target::open_for_agent) {
        return code;
    }
    let cli = args::Cli::parse();
    match cmd::run(cli) {
        Ok(cmd::Status::Ok) => ExitCode::SUCCESS,
        Ok(cmd::Status::NotSo) => ExitCode::from(1),
        Err(e) if report::is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            if let Some(t) = e.downcast_ref::<cairn_agent::interrupt::Terminated>() {
                eprintln!("{t}");
                return ExitCode::from(t.exit_code());
            }
            report::print_error(&e);
            ExitCode::from(2)
        }
    }
}
