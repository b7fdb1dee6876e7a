//! pi's own reading of a session file, for checking the importer against
//! it: `tests/pi-oracle/oracle.mjs` runs `SessionManager` of the npm package
//! `@mariozechner/pi-coding-agent` (pinned by the `package.json` and
//! lockfile beside it) with node. The importer's tests and the import figure
//! of `cairn-bench` use it; the importer itself never runs node.

use std::path::PathBuf;
use std::process::Command;

/// The directory of the oracle's script, `package.json` and lockfile (in
/// this crate's source tree).
pub fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/pi-oracle")
}

/// Makes the oracle runnable: installs the locked package with `npm ci`
/// when it is missing, and returns its directory. `Ok(None)`, after a
/// notice on stderr, when node or npm is missing outside CI.
///
/// # Errors
///
/// When node or npm is missing in CI (`CI` set), or `npm ci` fails.
pub fn prepare() -> Result<Option<PathBuf>, String> {
    let have = |tool: &str| {
        Command::new(tool)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if !have("node") || !have("npm") {
        if std::env::var_os("CI").is_some() {
            return Err("node and npm are needed to run pi's own SessionManager in CI (install Node.js 20.6 or newer)".into());
        }
        eprintln!(
            "NOTICE: node or npm is missing: what compares cairn's import with pi itself is skipped"
        );
        return Ok(None);
    }
    let dir = dir();
    if !dir
        .join("node_modules/@mariozechner/pi-coding-agent/package.json")
        .exists()
    {
        let status = Command::new("npm")
            .args(["ci", "--no-audit", "--no-fund", "--ignore-scripts"])
            .current_dir(&dir)
            .status()
            .map_err(|e| format!("cannot run npm ci in {}: {e}", dir.display()))?;
        if !status.success() {
            return Err(format!("npm ci failed in {}", dir.display()));
        }
    }
    Ok(Some(dir))
}
