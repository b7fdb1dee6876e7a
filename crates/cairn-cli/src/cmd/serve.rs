//! `cairn serve`: the store over HTTP (`cairn_server`), on a tokio runtime
//! of its own; the command blocks until the process is stopped.

use std::time::Duration;

use anyhow::{Context as _, Result};

use super::Status;
use crate::args::ServeArgs;
use crate::target::Ctx;

/// Runs `cairn serve`.
///
/// # Errors
///
/// The store cannot be opened, the token is invalid or cannot be kept, the
/// address cannot be bound.
pub fn run(ctx: &Ctx, args: ServeArgs) -> Result<Status> {
    let home = ctx.home()?;
    let store = ctx.store()?;
    let files = cairn_stores::files_dir(&home);
    let options = cairn_server::Options {
        listen: args.listen,
        token: args.token,
        hold: Duration::from_millis(args.hold_ms),
        max_body: args.max_body,
        ..cairn_server::Options::default()
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the server's runtime")?;
    rt.block_on(async move {
        let server = cairn_server::Server::bind(store, &files, options).await?;
        let addr = server.addr();
        if !addr.ip().is_loopback() {
            eprintln!("cairn serve: listening on {addr}, which is not loopback: anyone who can reach it and has the token can read and write the store");
        }
        match server.token_file() {
            Some(p) => eprintln!("cairn serve: the token is in {}", p.display()),
            None => eprintln!("cairn serve: clients send the token given by --token or CAIRN_TOKEN"),
        }
        // The address on stdout, alone, for scripts that start the server.
        println!("http://{addr}/");
        server.run().await
    })?;
    Ok(Status::Ok)
}
