//! The figures of `docs/PERFORMANCE.md`, in groups that share fixtures. Each group measures
//! cairn and its baseline in the same run and returns finished [`Figure`]s.
//!
//! Order matters: the fsync-bound append figures run first, before any large
//! fixture is written, so no write-back competes with their syncs. The SQLite
//! group runs last, so figures 1–12 keep their numbers; every large fixture
//! before it is synced or deleted, and its append rounds rotate all three
//! sides, so a disk still busy affects each side alike. The CLI figure (17)
//! comes after it, so figures 1–16 keep their numbers.

mod append;
mod import;
mod leaf;
mod list;
mod memory;
mod open;
mod postgres;
mod resume;
mod serve;
mod sqlite;
mod workspace;

use std::path::{Path, PathBuf};

use anyhow::Result;

pub use memory::child_main;

use crate::config::Sizes;
use crate::report::Figure;

/// What every group gets: a scratch directory and the sizes.
#[derive(Debug)]
pub struct Bench {
    /// Scratch directory (removed at the end unless kept).
    pub dir: PathBuf,
    /// Sizes of this run.
    pub sizes: Sizes,
}

impl Bench {
    /// A fresh subdirectory of the scratch directory for one use.
    pub fn sub(&self, name: &str) -> Result<PathBuf> {
        let p = self.dir.join(name);
        if p.exists() {
            std::fs::remove_dir_all(&p)?;
        }
        std::fs::create_dir_all(&p)?;
        Ok(p)
    }

    /// The scratch directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

/// A group of figures.
pub struct Group {
    /// Name for `--only` and progress lines.
    pub name: &'static str,
    /// What it measures.
    pub about: &'static str,
    /// Runs it.
    pub run: fn(&Bench) -> Result<Vec<Figure>>,
}

/// Every group, in the order they run.
pub const GROUPS: &[Group] = &[
    Group {
        name: "append",
        about: "Sync, group-commit and Buffered appends vs raw write(+fdatasync) loops",
        run: append::run,
    },
    Group {
        name: "buffered",
        about: "only the Buffered append figure of the append group (for profiling)",
        run: append::run_buffered,
    },
    Group {
        name: "open",
        about: "open + context of a long session vs reading it and counting lines; bytes per entry",
        run: open::run,
    },
    Group {
        name: "resume",
        about: "resume with a 200-entry context from a very long file vs a short one",
        run: resume::run,
    },
    Group {
        name: "leaf",
        about: "append at the leaf + updated context, long history vs short",
        run: leaf::run,
    },
    Group {
        name: "list",
        about: "list a store of many sessions vs listing the directory",
        run: list::run,
    },
    Group {
        name: "memory",
        about: "peak memory of opening a large session vs its size",
        run: memory::run,
    },
    Group {
        name: "sqlite",
        about: "SQLite backend: durable append and open + context vs the file backend and raw SQLite",
        run: sqlite::run,
    },
    Group {
        name: "cli",
        about: "`cairn context --json` as a whole process vs the library's open + context; its peak memory",
        run: open::run_cli,
    },
    Group {
        name: "import",
        about: "import a long pi session vs pi's own open + context of it (node)",
        run: import::run,
    },
    Group {
        name: "postgres",
        about: "Postgres backend: durable append vs raw INSERTs, 16 workers vs 1, open + context vs the file backend",
        run: postgres::run,
    },
    Group {
        name: "serve",
        about: "append latency over HTTP (cairn serve, loopback) vs the library's direct append",
        run: serve::run,
    },
    Group {
        name: "workspace",
        about: "workspace snapshots around bash in 10,000 files vs the call; bytes per changed file vs zstd; restoring 1,000 files vs cp -r",
        run: workspace::run,
    },
];
