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
    /// Run only when named in `--only`: a group that repeats another's
    /// figures for profiling, which a full run must not measure twice (the
    /// figures are numbered by their place in the run).
    pub on_request: bool,
}

impl Group {
    /// Whether a run asked for the groups `only` (none: a full run) runs this one.
    pub fn selected(&self, only: &[String]) -> bool {
        let asked = only.iter().any(|o| o == self.name);
        asked || (only.is_empty() && !self.on_request)
    }
}

/// Every group, in the order they run.
pub const GROUPS: &[Group] = &[
    Group {
        name: "append",
        about: "Sync, group-commit and Buffered appends vs raw write(+fdatasync) loops",
        run: append::run,
        on_request: false,
    },
    Group {
        name: "buffered",
        about: "only the Buffered append figure of the append group (for profiling)",
        run: append::run_buffered,
        on_request: true,
    },
    Group {
        name: "open",
        about: "open + context of a long session vs reading it and counting lines; bytes per entry",
        run: open::run,
        on_request: false,
    },
    Group {
        name: "resume",
        about: "resume with a 200-entry context from a very long file vs a short one",
        run: resume::run,
        on_request: false,
    },
    Group {
        name: "leaf",
        about: "append at the leaf + updated context, long history vs short",
        run: leaf::run,
        on_request: false,
    },
    Group {
        name: "list",
        about: "list a store of many sessions vs listing the directory",
        run: list::run,
        on_request: false,
    },
    Group {
        name: "memory",
        about: "peak memory of opening a large session vs its size",
        run: memory::run,
        on_request: false,
    },
    Group {
        name: "sqlite",
        about: "SQLite backend: durable append and open + context vs the file backend and raw SQLite",
        run: sqlite::run,
        on_request: false,
    },
    Group {
        name: "cli",
        about: "`cairn context --json` as a whole process vs the library's open + context; its peak memory",
        run: open::run_cli,
        on_request: false,
    },
    Group {
        name: "import",
        about: "import a long pi session vs pi's own open + context of it (node)",
        run: import::run,
        on_request: false,
    },
    Group {
        name: "postgres",
        about: "Postgres backend: durable append vs raw INSERTs, 16 workers vs 1, open + context vs the file backend",
        run: postgres::run,
        on_request: false,
    },
    Group {
        name: "serve",
        about: "append latency over HTTP (cairn serve, loopback) vs the library's direct append",
        run: serve::run,
        on_request: false,
    },
    Group {
        name: "workspace",
        about: "workspace snapshots around bash in 10,000 files vs the call; bytes per changed file vs zstd; restoring 1,000 files vs cp -r",
        run: workspace::run,
        on_request: false,
    },
];

#[cfg(test)]
mod tests {
    use super::GROUPS;

    /// The profiling group repeats figure 3: a full run must not measure it
    /// twice, or every later figure's number would shift by one.
    #[test]
    fn a_full_run_skips_the_groups_run_only_on_request() {
        let full: Vec<&str> = GROUPS
            .iter()
            .filter(|g| g.selected(&[]))
            .map(|g| g.name)
            .collect();
        assert!(!full.contains(&"buffered"), "{full:?}");
        assert!(full.contains(&"append"), "{full:?}");
        let buffered = GROUPS.iter().find(|g| g.name == "buffered").unwrap();
        assert!(buffered.selected(&["buffered".to_owned()]));
        let append = GROUPS.iter().find(|g| g.name == "append").unwrap();
        assert!(!append.selected(&["buffered".to_owned()]));
    }
}
