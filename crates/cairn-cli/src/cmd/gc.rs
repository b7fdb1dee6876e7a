//! `cairn gc`: removes the blobs no record of any session references
//! (`cairn_blobs` has the rule that makes it safe while writers run).

use std::time::Duration;

use anyhow::Result;
use serde_json::json;

use super::Status;
use crate::target::Ctx;

/// Runs `cairn gc`.
///
/// # Errors
///
/// When a session cannot be read (nothing is removed then), or the blob
/// directory cannot be listed or a blob removed.
pub fn run(ctx: &Ctx, grace_secs: u64, json: bool) -> Result<Status> {
    let store = ctx.store()?;
    let blobs = ctx.blobs()?;
    let report = blobs.gc(&store, Duration::from_secs(grace_secs))?;
    let mut out = ctx.out();
    if json {
        out.json(&json!({
            "removed": report.removed,
            "freed_bytes": report.freed_bytes,
            "referenced": report.referenced,
            "young": report.young,
        }))?;
    } else {
        out.line(&format!(
            "removed {} blobs ({} bytes); kept {} referenced and {} younger than {grace_secs}s",
            report.removed, report.freed_bytes, report.referenced, report.young
        ))?;
    }
    Ok(Status::Ok)
}
