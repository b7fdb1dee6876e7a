//! The command line, as clap derive types. Every subcommand carries an
//! example in its `after_help`.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

const MAIN_EXAMPLES: &str = "\
Examples:
  cairn demo                          # a guided tour in the default store
  id=$(cairn new --title 'bug hunt')
  echo '{\"kind\":\"message\",\"data\":{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"hi\"}]}}' \\
    | cairn append $id
  cairn ls
  cairn tree --last

Sessions are named by full id, unique id prefix, path to a .jsonl file, or --last.
Exit status: 0 ok, 1 the thing asked for is not so (fsck found damage),
2 usage or I/O error. The store is --store DIR (or sqlite:PATH, or a
postgres://URL), else $CAIRN_HOME, else $XDG_DATA_HOME/cairn, else ~/.local/share/cairn.";

/// cairn: a durable session engine for AI agents.
///
/// Each session is an append-only log; the context a model sees, the app
/// state, settings and labels are computed from it. Read commands never
/// change a session and work while another process writes it.
#[derive(Debug, Parser)]
#[command(name = "cairn", version, after_help = MAIN_EXAMPLES, max_term_width = 100)]
pub struct Cli {
    /// The store: a directory (sessions live in DIR/sessions),
    /// sqlite:PATH for a SQLite database, or a postgres://URL (options:
    /// cairn_schema=NAME, cairn_lease_secs=N, cairn_files=DIR).
    #[arg(long, global = true, env = "CAIRN_HOME", value_name = "DIR")]
    pub store: Option<PathBuf>,

    /// When to colour human output.
    #[arg(long, global = true, value_enum, default_value_t = ColorChoice::Auto, value_name = "WHEN")]
    pub color: ColorChoice,

    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// When to colour output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ColorChoice {
    /// When stdout is a terminal and NO_COLOR is not set.
    Auto,
    /// Always.
    Always,
    /// Never.
    Never,
}

/// The session a command works on.
#[derive(Debug, Clone, Args)]
pub struct SessionArg {
    /// The session: full id, unique id prefix, or path to a .jsonl file.
    #[arg(value_name = "SESSION")]
    pub session: Option<String>,

    /// Use the most recently updated session instead of naming one
    /// (subagent sessions are skipped unless --all is given too).
    #[arg(long)]
    pub last: bool,

    /// With --last: the newest session of any kind, subagents' included.
    /// fsck and recover, without --last: every session of the store.
    #[arg(long)]
    pub all: bool,
}

/// Durability of acknowledged appends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum DurabilityArg {
    /// fdatasync before each acknowledgement: survives power loss.
    Sync,
    /// Group commit: as safe as sync, syncs shared between concurrent writers.
    Group,
    /// Written to the OS before each acknowledgement (survives kill -9, not
    /// power loss); one sync at the end of input.
    Buffered,
}

/// Export formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// A Markdown transcript of the current branch.
    Md,
    /// Every entry as JSON, with the session's metadata.
    Json,
    /// A self-contained HTML page: the conversation and the tree as SVG.
    Html,
    /// A pi session file (version 3) that pi opens with the same context.
    Pi,
}

/// Source formats of `cairn import`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ImportFrom {
    /// Tell each file's format from its first records.
    Auto,
    /// pi session files (`~/.pi/agent/sessions`), versions 1–3.
    Pi,
    /// Claude Code transcripts (`~/.claude/projects`).
    ClaudeCode,
    /// Codex rollouts (`~/.codex/sessions`).
    Codex,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Create a session and print its id.
    #[command(
        after_help = "Example:\n  cairn new --title 'comic storyboard' --state '{\"panel\":0}'"
    )]
    New {
        /// A title.
        #[arg(long)]
        title: Option<String>,
        /// The initial application state, as JSON.
        #[arg(long, value_name = "JSON")]
        state: Option<String>,
    },

    /// Append records read as JSON lines from stdin; acknowledge each on stdout.
    ///
    /// Each input line is one record: {"kind": K, "data": {...}} with
    /// optional "id" (entries), "parent" (an entry id, label or unique
    /// prefix; null for a new root; default the leaf) and "ignorable"
    /// (for kinds this version does not know). Entry kinds: message,
    /// app_state, compaction, checkout, settings, label, session_info,
    /// custom. Operation-journal kinds (op_started, tool_dispatched, …) take
    /// no id or parent. After each record is appended under the chosen
    /// durability, one line {"seq":N,"id":"…"} is printed and flushed ("id"
    /// is null for operation records). Blank lines are skipped. At the first
    /// invalid line cairn stops with an error naming the line; every record
    /// before it stays appended.
    #[command(after_help = "\
Example:
  printf '%s\\n' \\
    '{\"kind\":\"message\",\"id\":\"q1\",\"data\":{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"hi\"}]}}' \\
    '{\"kind\":\"app_state\",\"data\":{\"patch\":{\"mood\":\"curious\"}}}' \\
    | cairn append 01jx
  {\"seq\":1,\"id\":\"q1\"}
  {\"seq\":2,\"id\":\"7c1e09ab\"}")]
    Append {
        #[command(flatten)]
        target: SessionArg,
        /// What an acknowledgement guarantees.
        #[arg(long, value_enum, default_value_t = DurabilityArg::Sync)]
        durability: DurabilityArg,
    },

    /// List sessions, most recently updated first; subagents under their parent.
    #[command(
        after_help = "Examples:\n  cairn ls\n  cairn ls --flat\n  cairn ls --all --json | jq -r '.[].id'"
    )]
    Ls {
        /// Show every session (default: the 20 most recent, with their subagents).
        #[arg(long)]
        all: bool,
        /// One row per session, most recent first, subagents not nested.
        #[arg(long)]
        flat: bool,
        /// Print JSON (an array; see the README for the shape).
        #[arg(long)]
        json: bool,
    },

    /// Show a session: its metadata and the current context.
    #[command(
        after_help = "Examples:\n  cairn show 01jx\n  cairn show --last --json | jq .context.app_state"
    )]
    Show {
        #[command(flatten)]
        target: SessionArg,
        /// Print JSON.
        #[arg(long)]
        json: bool,
        /// Include the session memory (as `cairn memory` prints it).
        #[arg(long)]
        memory: bool,
    },

    /// Print the current context as the model sees it.
    ///
    /// The messages (with roles and content blocks), the app state, the
    /// settings, the labels and the compaction in force.
    #[command(
        after_help = "Examples:\n  cairn context 01jx\n  cairn context --last --json | jq '.messages | length'"
    )]
    Context {
        #[command(flatten)]
        target: SessionArg,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },

    /// Draw the whole tree of entries: branches, leaf, labels, checkouts.
    #[command(after_help = "Examples:\n  cairn tree 01jx\n  cairn tree --last --ascii")]
    Tree {
        #[command(flatten)]
        target: SessionArg,
        /// Draw with ASCII instead of box-drawing characters.
        #[arg(long)]
        ascii: bool,
        /// How many levels of subagent sessions to draw under the tool results naming them (0: none).
        #[arg(long, value_name = "N", default_value_t = 1)]
        depth: usize,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },

    /// Print the raw records, pretty or as the stored JSON lines.
    #[command(
        after_help = "Examples:\n  cairn log 01jx --from 10\n  cairn log 01jx --trace\n  cairn log 01jx --json | head -1"
    )]
    Log {
        #[command(flatten)]
        target: SessionArg,
        /// Start at this record (0 is the header).
        #[arg(long, value_name = "SEQ", default_value_t = 0)]
        from: u64,
        /// Show each trace record (`cairn agent --trace`) whole: headers and bodies.
        #[arg(long)]
        trace: bool,
        /// Print the stored JSON lines verbatim.
        #[arg(long)]
        json: bool,
    },

    /// Move the leaf to an entry; print the new context.
    ///
    /// ENTRY is an entry id, a unique id prefix, a label, or `root` (also
    /// `none`) for before the first entry. Nothing is deleted: the old
    /// branch stays in the log and can be checked out again.
    #[command(
        visible_alias = "rewind",
        override_usage = "cairn checkout [OPTIONS] <SESSION|--last> <ENTRY>",
        after_help = "Examples:\n  cairn checkout 01jx panel-1\n  cairn rewind --last 3fa9 --summary 'tried the side plot; dropped it'\n  cairn rewind 01jx panel-1 --files"
    )]
    Checkout {
        #[command(flatten)]
        target: SessionArg,
        /// The entry to move to (after SESSION, or alone with --last).
        #[arg(value_name = "ENTRY")]
        rest: Vec<String>,
        /// A summary of the branch left behind, shown to the model.
        #[arg(long)]
        summary: Option<String>,
        /// Also bring the working directory's files back to their state at
        /// ENTRY, from the session's workspace snapshots. Refuses, changing
        /// nothing, when a file changed outside the agent since the last
        /// snapshot.
        #[arg(long)]
        files: bool,
        /// With --files: overwrite files changed outside the agent.
        #[arg(long, requires = "files")]
        force: bool,
    },

    /// Show how the working directory differs between two entries.
    ///
    /// From the session's workspace snapshots: each file created, changed
    /// or deleted going from A to B (`root` is before the first entry).
    #[command(
        override_usage = "cairn diff [OPTIONS] <SESSION|--last> <A> <B>",
        after_help = "Examples:\n  cairn diff 01jx panel-1 panel-2\n  cairn diff --last root 3fa9 --json"
    )]
    Diff {
        #[command(flatten)]
        target: SessionArg,
        /// The two entries (after SESSION, or alone with --last).
        #[arg(value_name = "A B")]
        rest: Vec<String>,
        /// Print the changes as JSON.
        #[arg(long)]
        json: bool,
    },

    /// Copy the branch up to an entry into a new session; print its id.
    #[command(
        override_usage = "cairn fork [OPTIONS] <SESSION|--last> <ENTRY>",
        after_help = "Example:\n  cairn fork 01jx panel-1 --title 'storyboard, take two'"
    )]
    Fork {
        #[command(flatten)]
        target: SessionArg,
        /// The last entry to copy (id, prefix, label, or `root`).
        #[arg(value_name = "ENTRY")]
        rest: Vec<String>,
        /// The new session's title (default: the source's).
        #[arg(long)]
        title: Option<String>,
    },

    /// Set a label on an entry, remove one with --delete, or list them.
    ///
    /// `cairn label SESSION ENTRY NAME` sets, `cairn label SESSION NAME
    /// --delete` removes, `cairn label SESSION` lists. Labels work wherever
    /// an entry is expected.
    #[command(
        override_usage = "cairn label [OPTIONS] <SESSION|--last> [ENTRY NAME | NAME --delete]",
        after_help = "Examples:\n  cairn label 01jx 3fa9 panel-1\n  cairn label 01jx panel-1 --delete\n  cairn label --last"
    )]
    Label {
        #[command(flatten)]
        target: SessionArg,
        /// ENTRY NAME to set, NAME with --delete.
        #[arg(value_name = "ENTRY NAME")]
        rest: Vec<String>,
        /// Remove the label NAME.
        #[arg(long)]
        delete: bool,
        /// Print JSON (when listing).
        #[arg(long)]
        json: bool,
    },

    /// Remove a session (asks first, unless --yes).
    #[command(after_help = "Example:\n  cairn rm 01jx --yes")]
    Rm {
        #[command(flatten)]
        target: SessionArg,
        /// Do not ask. Required when stdin is not a terminal.
        #[arg(long, short = 'y')]
        yes: bool,
    },

    /// Verify sessions; exit 1 if damage is found.
    ///
    /// Checks every record's framing and checksum, seq continuity, the
    /// header, every payload, the tree and the append-time invariants.
    /// `--salvage DIR` writes a repaired copy of one session into DIR (as
    /// DIR/ID.jsonl) and never touches the original. `--all` (no session)
    /// checks every session in the store.
    #[command(
        after_help = "Examples:\n  cairn fsck --all\n  cairn fsck 01jx --salvage /tmp/rescued"
    )]
    Fsck {
        #[command(flatten)]
        target: SessionArg,
        /// Write a repaired copy of the session into this directory.
        #[arg(long, value_name = "DIR")]
        salvage: Option<PathBuf>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },

    /// Export a session as Markdown, JSON, a self-contained HTML page or a
    /// pi session file.
    #[command(
        after_help = "Examples:\n  cairn export 01jx --format md\n  cairn export 01jx --format html -o storyboard.html\n  cairn export 01jx --format pi -o ~/.pi/agent/sessions/--work--/from-cairn.jsonl"
    )]
    Export {
        #[command(flatten)]
        target: SessionArg,
        /// The format.
        #[arg(long, short = 'f', value_enum)]
        format: Format,
        /// Write to this file instead of stdout.
        #[arg(long, short = 'o', value_name = "FILE")]
        output: Option<PathBuf>,
    },

    /// Import sessions of pi, Claude Code or Codex: verified, repaired,
    /// rewindable.
    ///
    /// Each file becomes one session (its header names the source, path and
    /// SHA-256). Tool calls the source never answered get a
    /// TOOL_OUTCOME_UNKNOWN result, records cairn has no kind for are kept
    /// as ignorable records, damaged lines are reported with file and line
    /// and skipped (fatal with --strict). Re-importing an unchanged file does
    /// nothing; a grown file appends only its new part. Without PATH, the
    /// tools' default locations: ~/.pi/agent/sessions, ~/.claude/projects,
    /// ~/.codex/sessions.
    #[command(
        after_help = "Examples:\n  cairn import\n  cairn import --from pi ~/.pi/agent/sessions\n  cairn import --strict session.jsonl\n  cairn import --watch ~/.codex/sessions/2025/06/01/rollout-x.jsonl"
    )]
    Import {
        /// The source format.
        #[arg(long, value_enum, default_value = "auto")]
        from: ImportFrom,
        /// A damaged line fails that file's import (nothing of it is written).
        #[arg(long)]
        strict: bool,
        /// Keep following the sources: import what they append, until
        /// interrupted (a tool's last calls stay open while it runs).
        #[arg(long)]
        watch: bool,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
        /// Files or directories (every *.jsonl below) to import.
        #[arg(value_name = "PATH")]
        paths: Vec<PathBuf>,
    },

    /// The tour: a comic-storyboard agent on cairn, crashes included.
    ///
    /// Runs the reference agent offline on a scripted provider in the store
    /// (--store, or the default), narrating each step: app state set by a
    /// tool, a side plot, a rewind that restores the state, a paid render
    /// killed with SIGKILL after the charge and recovered with one charge, a
    /// side-effect tool recorded as unknown, and a fork. With --journal, a
    /// tour of the journal itself instead (torn tail included).
    #[command(
        after_help = "Examples:\n  cairn demo\n  cairn --store /tmp/cairn-demo demo\n  cairn demo --journal"
    )]
    Demo {
        /// Tour the journal itself (branches, rewind, a torn tail, a fork).
        #[arg(long)]
        journal: bool,
    },

    /// Run the reference agent: a REPL, or one prompt with -p.
    ///
    /// Talks to any OpenAI-compatible Chat Completions endpoint (hosted,
    /// vLLM, llama.cpp's server, Ollama) or replays a script offline. Every
    /// step is journalled; after a crash, --resume acts on the recovery
    /// verdict.
    #[command(
        after_help = "Examples:\n  CAIRN_API_KEY=... cairn agent --base-url https://api.openai.com/v1 --model gpt-4o-mini\n  cairn agent --base-url http://localhost:11434/v1 --model qwen2.5-coder -p 'list the files'\n  cairn agent --resume 01jx --on-unknown mark"
    )]
    Agent(cairn_agent::AgentArgs),

    /// The numbered steps: user inputs, model calls and tool calls.
    ///
    /// Each step shows its input (the user's text, the tool's arguments),
    /// an excerpt of its output, status, duration and tokens; `cairn steps
    /// SESSION s0005` shows one step whole. Derived from the records
    /// (operation records where there are, the messages otherwise), so
    /// numbers are stable. A tool step is shown under the model call that
    /// requested it, and a subagent's steps under the call that spawned it.
    /// `cairn checkout` and `cairn fork` take a step (`s0005`) for the
    /// state right after it.
    #[command(
        override_usage = "cairn steps [OPTIONS] <SESSION|--last> [STEP]",
        after_help = "Examples:\n  cairn steps --last\n  cairn steps 01jx s0005\n  cairn steps 01jx -n 20 --depth 2 --json"
    )]
    Steps {
        #[command(flatten)]
        target: SessionArg,
        /// One step to show whole (s0005).
        #[arg(value_name = "STEP")]
        rest: Vec<String>,
        /// Only the last N steps.
        #[arg(short = 'n', value_name = "N")]
        count: Option<usize>,
        /// How many levels of subagent sessions to nest under their calls (0: none).
        #[arg(long, value_name = "N", default_value_t = 1)]
        depth: usize,
        /// Print JSON (an array of steps; one step alone with STEP).
        #[arg(long)]
        json: bool,
    },

    /// Print the recovery verdict; with a policy (or on a terminal) resolve it.
    ///
    /// Resolution appends real tool results, so the context never holds a
    /// tool call without one: `--policy unknown` records every call that may
    /// have run as TOOL_OUTCOME_UNKNOWN, closes calls that never started as
    /// TOOL_NOT_STARTED and denies unanswered approvals. On a terminal without
    /// a policy, cairn asks for each. Re-running tools needs their
    /// implementations: use `cairn agent --resume`. The verdict covers every
    /// tool call on the branch without a result, with or without operation
    /// records; while another process holds the session, its tools are
    /// reported as running. `--all` (with `--policy`, no session) recovers
    /// every interrupted session of the store, one after another: safe to
    /// run from many workers at once (on Postgres each claims different
    /// sessions, FOR UPDATE SKIP LOCKED; elsewhere a session another writer
    /// holds is skipped).
    #[command(
        after_help = "Examples:\n  cairn recover --last\n  cairn recover 01jx --policy unknown\n  cairn recover --all --policy unknown     # every interrupted session (many workers may run it)"
    )]
    Recover {
        #[command(flatten)]
        target: SessionArg,
        /// Resolve without asking.
        #[arg(long, value_enum)]
        policy: Option<RecoverPolicy>,
        /// While resolving, what to do with a recorded tool process of a
        /// call that may have run and that still runs: wait for it to end
        /// (its output is then the call's result), or stop its process group.
        #[arg(long, value_enum, value_name = "POLICY", default_value = "wait")]
        on_running: cairn_agent::OnRunning,
        /// Print JSON: {session, running, processes, before, actions, after} (with --all,
        /// {recovered: [{session, actions, after}], skipped: [...]}).
        #[arg(long)]
        json: bool,
    },

    /// Copy every session from one store to another, record for record.
    ///
    /// A store is a directory, sqlite:PATH or a postgres://URL. Sessions the destination
    /// already holds identically are skipped, half-copied ones completed;
    /// a destination session that differs is reported and left untouched.
    /// Every copy is verified by reopening it.
    #[command(
        after_help = "Examples:\n  cairn copy --from ~/.local/share/cairn --to sqlite:/srv/cairn.db\n  cairn copy --from sqlite:/srv/cairn.db --to /tmp/cairn-files\n  cairn copy --from sqlite:/srv/cairn.db --to postgres://cairn@db.internal/cairn"
    )]
    Copy {
        /// The source store.
        #[arg(long, value_name = "STORE")]
        from: std::path::PathBuf,
        /// The destination store.
        #[arg(long, value_name = "STORE")]
        to: std::path::PathBuf,
    },

    /// Remove blobs that no record of any session references.
    ///
    /// Blobs hold long tool output and workspace snapshots. A blob younger
    /// than the grace period is kept even when unreferenced (a writer may be
    /// about to append the record naming it), so gc is safe while agents run.
    /// Nothing is removed when a session cannot be read.
    #[command(after_help = "Examples:\n  cairn gc\n  cairn gc --grace-secs 0 --json")]
    Gc {
        /// Keep unreferenced blobs younger than this many seconds.
        #[arg(long, value_name = "SECS", default_value_t = 3600)]
        grace_secs: u64,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },

    /// Print the session memory: goal, to-dos, work done, failures,
    /// decisions and verification status, derived from the current branch.
    #[command(
        after_help = "Examples:\n  cairn memory --last\n  cairn memory 01jx --json | jq .text"
    )]
    Memory {
        #[command(flatten)]
        target: SessionArg,
        /// Print JSON: {session, memory, text}.
        #[arg(long)]
        json: bool,
    },

    /// Serve the store over HTTP: the JSON API (described at /openapi.json),
    /// live tails over Server-Sent Events, and a web view at /.
    ///
    /// Every request needs the server's token: --token, or $CAIRN_TOKEN, or
    /// one generated on first start and kept (mode 0600) in the store's
    /// files directory as `server-token`. Loopback only unless --listen says
    /// otherwise.
    #[command(
        after_help = "Examples:\n  cairn serve                                # http://127.0.0.1:7171/\n  cairn serve --store sqlite:/srv/cairn.db --listen 127.0.0.1:8080\n  curl -H \"Authorization: Bearer $(cat ~/.local/share/cairn/server-token)\" http://127.0.0.1:7171/sessions"
    )]
    Serve(ServeArgs),
}

/// `cairn serve`'s options.
#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// The address to listen on.
    #[arg(long, default_value = "127.0.0.1:7171", value_name = "ADDR")]
    pub listen: std::net::SocketAddr,
    /// The token clients must send (at least 16 characters); generated and
    /// kept in the store when not given.
    #[arg(
        long,
        env = "CAIRN_TOKEN",
        value_name = "TOKEN",
        hide_env_values = true
    )]
    pub token: Option<String>,
    /// The largest request body accepted, in bytes.
    #[arg(long, default_value_t = 4 << 20, value_name = "BYTES")]
    pub max_body: usize,
    /// Milliseconds a session's writer lock is kept after the last write
    /// through the server (other processes can write between bursts).
    #[arg(long, default_value_t = 1000, value_name = "MS")]
    pub hold_ms: u64,
}

/// How `cairn recover` resolves without asking.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum RecoverPolicy {
    /// Record what may have run as unknown, close what never started, deny
    /// unanswered approvals. Never re-runs anything.
    Unknown,
}
