//! `cairn copy`: every session from one store to another (directory,
//! `sqlite:PATH` or `postgres://…`), byte for byte, verified by reopening each copy.

use std::path::Path;

use anyhow::{Result, bail};

use super::Status;
use crate::target::{Ctx, open_store};

/// Runs `cairn copy`.
///
/// # Errors
///
/// Opening either store or listing the source; sessions that failed to
/// copy are listed and make the command fail (exit 2) after the others are
/// copied.
pub fn run(ctx: &Ctx, from: &Path, to: &Path) -> Result<Status> {
    let source = open_store(from)?;
    let dest = open_store(to)?;
    let report = cairn_stores::copy_store(&**source.backend(), &**dest.backend())?;
    let mut out = ctx.out();
    out.line(&format!(
        "copied {} session(s), {} already there unchanged, {} failed",
        report.copied.len(),
        report.unchanged.len(),
        report.failed.len()
    ))?;
    for (id, err) in &report.failed {
        out.line(&format!("  {id}: {}", cairn::with_causes(err)))?;
    }
    out.flush()?;
    if !report.failed.is_empty() {
        bail!(
            "{} session(s) could not be copied (listed above)",
            report.failed.len()
        );
    }
    Ok(Status::Ok)
}
