//! Sizes of every figure, full (the issue's) or quick (scaled down to finish
//! in well under two minutes on a 2-core machine, for CI smoke runs).

/// How big each measurement is.
#[derive(Debug, Clone)]
pub struct Sizes {
    /// Alternating rounds of cairn and baseline for the append figures.
    pub append_rounds: usize,
    /// Cycles (4 records each) per round of the `Sync` append figure.
    pub sync_cycles: usize,
    /// Appending threads of the group-commit figure.
    pub group_threads: usize,
    /// Cycles per thread per round of the group-commit figure.
    pub group_cycles: usize,
    /// Cycles per round of the `Buffered` append figure.
    pub buffered_cycles: usize,
    /// Entries of the session opened by the open + context figure.
    pub open_entries: usize,
    /// Timed opens of that session (the best is kept).
    pub open_repeats: usize,
    /// Entries of the long session of the resume figure.
    pub resume_big_entries: usize,
    /// Entries of the short session of the resume figure.
    pub resume_small_entries: usize,
    /// Timed resumes of the long session (the best is kept).
    pub resume_repeats: usize,
    /// History of the long session of the append-at-leaf figure.
    pub leaf_big_entries: usize,
    /// History of the short session of the append-at-leaf figure.
    pub leaf_small_entries: usize,
    /// Alternating rounds of the append-at-leaf figure.
    pub leaf_rounds: usize,
    /// Cycles appended per round of the append-at-leaf figure.
    pub leaf_cycles: usize,
    /// Sessions in the store of the list figure.
    pub list_sessions: usize,
    /// Timed warm listings (the best is kept).
    pub list_repeats: usize,
    /// Size of the session of the peak-memory figure, in bytes.
    pub memory_bytes: u64,
    /// Files of the workspace snapshot figure's working directory.
    pub ws_tree_files: usize,
    /// Files of the workspace restore figure.
    pub ws_restore_files: usize,
    /// Rounds of the SQLite durable-append figures (each round appends with
    /// the SQLite backend, the file backend and raw SQLite, in turn).
    pub sqlite_rounds: usize,
    /// Cycles (4 records each) per round and side of the SQLite append figures.
    pub sqlite_cycles: usize,
    /// Timed opens per side of the SQLite open + context figures (the best
    /// is kept); the session has `open_entries` entries.
    pub sqlite_open_repeats: usize,
    /// Entries of the pi session of the import figure.
    pub import_entries: usize,
    /// Timed imports, and timed opens by pi (the best of each is kept).
    pub import_repeats: usize,
    /// Timed one-record appends per side of the HTTP latency figures.
    pub serve_appends: usize,
}

/// The issue's numbers, for a label on scaled figures.
pub mod issue {
    /// Entries of the open + context figure.
    pub const OPEN_ENTRIES: usize = 100_000;
    /// Entries of the long resume session.
    pub const RESUME_BIG: usize = 1_000_000;
    /// History of the long append-at-leaf session.
    pub const LEAF_BIG: usize = 100_000;
    /// Sessions listed.
    pub const LIST_SESSIONS: usize = 10_000;
    /// Size of the peak-memory session.
    pub const MEMORY_BYTES: u64 = 1 << 30;
    /// Entries of the imported pi session.
    pub const IMPORT_ENTRIES: usize = 100_000;
}

impl Sizes {
    /// The issue's sizes.
    pub fn full() -> Sizes {
        Sizes {
            append_rounds: 5,
            sync_cycles: 250,
            group_threads: 16,
            group_cycles: 40,
            buffered_cycles: 5_000,
            open_entries: issue::OPEN_ENTRIES,
            open_repeats: 5,
            resume_big_entries: issue::RESUME_BIG,
            resume_small_entries: 1_000,
            resume_repeats: 3,
            leaf_big_entries: issue::LEAF_BIG,
            leaf_small_entries: 1_000,
            leaf_rounds: 7,
            leaf_cycles: 250,
            list_sessions: issue::LIST_SESSIONS,
            list_repeats: 7,
            memory_bytes: issue::MEMORY_BYTES,
            ws_tree_files: 10_000,
            ws_restore_files: 1_000,
            sqlite_rounds: 5,
            sqlite_cycles: 250,
            sqlite_open_repeats: 5,
            import_entries: issue::IMPORT_ENTRIES,
            import_repeats: 3,
            serve_appends: 1_000,
        }
    }

    /// Scaled down for a smoke run.
    pub fn quick() -> Sizes {
        Sizes {
            append_rounds: 5,
            sync_cycles: 100,
            group_threads: 16,
            group_cycles: 16,
            buffered_cycles: 1_500,
            open_entries: 20_000,
            open_repeats: 3,
            resume_big_entries: 20_000,
            resume_small_entries: 1_000,
            resume_repeats: 3,
            leaf_big_entries: 20_000,
            leaf_small_entries: 1_000,
            leaf_rounds: 7,
            leaf_cycles: 150,
            list_sessions: issue::LIST_SESSIONS,
            list_repeats: 5,
            memory_bytes: 64 << 20,
            ws_tree_files: 2_000,
            ws_restore_files: 200,
            sqlite_rounds: 5,
            sqlite_cycles: 50,
            sqlite_open_repeats: 5,
            import_entries: 20_000,
            import_repeats: 3,
            serve_appends: 300,
        }
    }

    /// A "scaled" label when `actual` is not the issue's `wanted`.
    pub fn scaled(&self, what: &str, actual: u64, wanted: u64) -> Option<String> {
        (actual != wanted).then(|| {
            format!(
                "{what}: {} instead of the issue's {}",
                crate::report::thousands(actual),
                crate::report::thousands(wanted)
            )
        })
    }
}
