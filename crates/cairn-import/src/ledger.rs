//! The import ledger: which source files were imported into which session,
//! keyed by the file's canonical path, with the SHA-256 of what was read.
//! Re-importing an unchanged file writes nothing; a file that only grew is
//! continued from where the last import stopped.
//!
//! The ledger is a cache of decisions, not the truth about a session: each
//! imported session's header names its source (`lineage.imported_from`),
//! and a ledger entry whose session is gone is ignored.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::Error;

/// The ledger's file name in the store's files directory.
pub const LEDGER_FILE: &str = "imports.json";
const VERSION: u32 = 1;

/// What the ledger knows about one source file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Source {
    /// The format it was read as.
    pub format: String,
    /// The session it was imported into.
    pub session: String,
    /// How many bytes were read (whole lines).
    pub consumed: u64,
    /// SHA-256 of those bytes.
    pub consumed_sha256: String,
    /// SHA-256 of the whole file when it was last imported.
    pub file_sha256: String,
    /// How many lines were read.
    pub lines: u64,
    /// Whether the import ended the source (answered calls left open,
    /// moved to its live leaf) rather than waiting for more (`--watch`).
    pub finished: bool,
    /// The parent the source names but that was neither imported nor found
    /// when its session was made (a path, or a Codex thread id): the session
    /// is not linked to it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unlinked: Option<String>,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct File {
    version: u32,
    sources: BTreeMap<String, Source>,
}

/// The ledger of a store.
#[derive(Debug)]
pub struct Ledger {
    path: Option<PathBuf>,
    file: File,
}

impl Ledger {
    /// Reads the ledger in `dir` (an empty one if there is none yet).
    ///
    /// # Errors
    ///
    /// [`Error::Ledger`] when the file exists but cannot be read or is not a
    /// ledger of this version.
    pub fn open(dir: &Path) -> Result<Ledger, Error> {
        let path = dir.join(LEDGER_FILE);
        let bad = |problem: String| Error::Ledger {
            path: path.display().to_string(),
            problem,
        };
        let file = match std::fs::read(&path) {
            Ok(bytes) => {
                let file: File = serde_json::from_slice(&bytes).map_err(|e| {
                    bad(format!(
                        "it is not a ledger ({e}); move it away to start a new one"
                    ))
                })?;
                if file.version != VERSION {
                    return Err(bad(format!(
                        "it has version {}, this cairn reads version {VERSION}",
                        file.version
                    )));
                }
                file
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => File {
                version: VERSION,
                sources: BTreeMap::new(),
            },
            Err(e) => return Err(bad(e.to_string())),
        };
        Ok(Ledger {
            path: Some(path),
            file,
        })
    }

    /// A ledger kept in memory only (tests, memory stores).
    pub fn in_memory() -> Ledger {
        Ledger {
            path: None,
            file: File {
                version: VERSION,
                sources: BTreeMap::new(),
            },
        }
    }

    /// What is known about a source path.
    pub fn get(&self, path: &str) -> Option<&Source> {
        self.file.sources.get(path)
    }

    /// Every source the ledger knows, by path.
    pub fn sources(&self) -> impl Iterator<Item = (&str, &Source)> {
        self.file.sources.iter().map(|(k, v)| (k.as_str(), v))
    }

    /// Records a source and writes the ledger (atomically: a temporary file
    /// synced, then renamed over the old one).
    ///
    /// # Errors
    ///
    /// [`Error::Ledger`] when it cannot be written.
    pub fn record(&mut self, path: &str, source: Source) -> Result<(), Error> {
        self.file.sources.insert(path.to_owned(), source);
        let Some(at) = &self.path else {
            return Ok(());
        };
        let bad = |e: std::io::Error| Error::Ledger {
            path: at.display().to_string(),
            problem: format!("cannot write it: {e}"),
        };
        if let Some(dir) = at.parent() {
            std::fs::create_dir_all(dir).map_err(bad)?;
        }
        let tmp = at.with_extension("json.new");
        let bytes = serde_json::to_vec_pretty(&self.file).map_err(|e| Error::Ledger {
            path: at.display().to_string(),
            problem: e.to_string(),
        })?;
        let mut f = std::fs::File::create(&tmp).map_err(bad)?;
        f.write_all(&bytes)
            .and_then(|()| f.sync_all())
            .map_err(bad)?;
        std::fs::rename(&tmp, at).map_err(bad)?;
        Ok(())
    }
}

/// SHA-256 of `bytes`, 64 lower-case hex digits.
pub fn sha256_hex(bytes: &[u8]) -> String {
    let digest = Sha256::digest(bytes);
    let mut out = String::with_capacity(64);
    for b in digest {
        out.push_str(&format!("{b:02x}"));
    }
    out
}
