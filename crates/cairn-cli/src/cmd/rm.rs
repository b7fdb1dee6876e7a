//! `cairn rm`: removes a session, asking first on a terminal unless `--yes`.
//! Without a terminal and without `--yes` it refuses: a script must say so.

use std::io::{BufRead, IsTerminal, Write};

use anyhow::{Result, bail};
use cairn::Access;

use super::Status;
use crate::args::SessionArg;
use crate::target::{self, Ctx};
use cairn_view::describe::flat;

/// Runs `cairn rm`.
///
/// # Errors
///
/// Unknown session, no terminal to ask on without `--yes`, session in use,
/// I/O errors.
pub fn run(ctx: &Ctx, arg: &SessionArg, yes: bool) -> Result<Status> {
    let spec = target::spec(arg)?;
    let (store, id) = target::locate(ctx, &spec)?;
    if !yes {
        if !std::io::stdin().is_terminal() {
            bail!(
                "refusing to remove session {id} without confirmation: stdin is not a terminal; pass --yes"
            );
        }
        let about = match store.open(&id, Access::Read) {
            Ok(s) => {
                let title = s
                    .title()
                    .map(|t| format!(" {:?}", flat(&t)))
                    .unwrap_or_default();
                format!(
                    "{title} ({} entries, updated {})",
                    s.entry_count(),
                    s.updated()
                )
            }
            Err(_) => " (unreadable)".to_owned(),
        };
        let mut err = std::io::stderr().lock();
        write!(
            err,
            "remove session {id}{about}? This cannot be undone. [y/N] "
        )?;
        err.flush()?;
        let mut answer = String::new();
        std::io::stdin().lock().read_line(&mut answer)?;
        if !matches!(answer.trim(), "y" | "Y" | "yes" | "YES" | "Yes") {
            writeln!(err, "kept {id}")?;
            return Ok(Status::Ok);
        }
    }
    store.remove(&id)?;
    let mut out = ctx.out();
    out.line(&format!("removed {id}"))?;
    Ok(Status::Ok)
}
