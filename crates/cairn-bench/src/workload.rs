//! Realistic entries: the message cycle of a coding session.
//!
//! One *cycle* is four messages: a user request (~1 KB of prose), an
//! assistant message with a short remark and one tool call, the tool's result
//! (~1 KB of code-like output, with quotes and backslashes to escape), and an
//! assistant reply (a few hundred bytes of prose). Assistant messages carry a
//! model name, usage and a stop reason, as a provider's would.
//!
//! Content is pseudo-random but deterministic (a fixed seed gives the same
//! bytes), so runs are comparable and fixtures can be rebuilt.

use cairn::{Block, Message, Role, Usage};
use cairn::{EntryBody, EntryId};
use serde_json::json;

/// A small deterministic generator (SplitMix64).
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator whose sequence depends only on `seed`.
    pub fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x5eed_cafe_f00d_d00d)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (`n > 0`).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    /// A number in `lo..=hi`.
    pub fn between(&mut self, lo: usize, hi: usize) -> usize {
        lo + self.below(hi - lo + 1)
    }
}

const WORDS: &[&str] = &[
    "the",
    "session",
    "file",
    "should",
    "return",
    "error",
    "when",
    "the",
    "test",
    "fails",
    "and",
    "we",
    "need",
    "to",
    "check",
    "whether",
    "parser",
    "handles",
    "empty",
    "input",
    "correctly",
    "please",
    "update",
    "function",
    "so",
    "that",
    "it",
    "reads",
    "config",
    "from",
    "disk",
    "then",
    "writes",
    "result",
    "back",
    "without",
    "breaking",
    "existing",
    "callers",
    "also",
    "add",
    "a",
    "regression",
    "for",
    "this",
    "case",
    "because",
    "last",
    "time",
    "build",
    "broke",
    "on",
    "CI",
    "module",
    "struct",
    "field",
    "value",
    "index",
    "offset",
    "buffer",
    "length",
    "thread",
    "lock",
];

const IDENTS: &[&str] = &[
    "value", "offset", "buf", "len", "path", "cfg", "reader", "entry", "node", "state", "ctx",
    "line", "bytes", "count", "idx", "parent", "child", "result", "err", "opts",
];

/// Prose of a random length in `lo..=hi` bytes (about), with a paragraph
/// break now and then.
pub fn prose(rng: &mut Rng, lo: usize, hi: usize) -> String {
    let bytes = rng.between(lo, hi);
    let mut out = String::with_capacity(bytes + 16);
    let mut since_break = 0;
    while out.len() < bytes {
        if !out.is_empty() {
            if since_break > 300 && rng.below(8) == 0 {
                out.push_str(".\n\n");
                since_break = 0;
            } else {
                out.push(' ');
            }
        }
        let w = WORDS[rng.below(WORDS.len())];
        since_break += w.len() + 1;
        out.push_str(w);
    }
    out
}

/// Code-like tool output of a random length in `lo..=hi` bytes (about):
/// quotes, backslashes, tabs to escape, newlines.
pub fn code(rng: &mut Rng, lo: usize, hi: usize) -> String {
    let bytes = rng.between(lo, hi);
    let mut out = String::with_capacity(bytes + 80);
    let mut n = 0usize;
    while out.len() < bytes {
        n += 1;
        let a = IDENTS[rng.below(IDENTS.len())];
        let b = IDENTS[rng.below(IDENTS.len())];
        let line = match rng.below(4) {
            0 => format!("{n:4}    let {a}_{} = {b}.get(\"{a}\")?;\n", rng.below(100)),
            1 => format!(
                "{n:4}    if {a}.len() > {} {{ return Err(\"{b}\\t\".into()); }}\n",
                rng.below(4096)
            ),
            2 => format!(
                "{n:4}    // {} {}\n",
                WORDS[rng.below(WORDS.len())],
                WORDS[rng.below(WORDS.len())]
            ),
            _ => format!("{n:4}    println!(\"{{}}\\\\n{a}: {{:?}}\", {b});\n"),
        };
        out.push_str(&line);
    }
    out
}

fn usage(rng: &mut Rng) -> Usage {
    Usage {
        input: 20_000 + rng.below(80_000) as u64,
        output: 50 + rng.below(1_500) as u64,
        cached: 15_000 + rng.below(60_000) as u64,
        cost: None,
    }
}

const MODEL: &str = "model-large-2026-01";

/// One cycle of four messages; `call_id` names its tool call.
pub fn cycle(rng: &mut Rng, call_id: &str) -> [Message; 4] {
    let user = Message::text(Role::User, prose(rng, 900, 1100));
    let remark = prose(rng, 60, 180);
    let command = format!(
        "cargo test -p cairn --test file_journal -- {} --nocapture 2>&1 | tail -n {}",
        WORDS[rng.below(WORDS.len())],
        rng.between(20, 200)
    );
    let call = Message {
        role: Role::Assistant,
        content: vec![
            Block::Text { text: remark },
            Block::ToolCall {
                call_id: call_id.to_owned(),
                name: "bash".to_owned(),
                arguments: json!({ "command": command, "timeout_ms": 120_000 }),
            },
        ],
        usage: Some(usage(rng)),
        model: Some(MODEL.to_owned()),
        stop_reason: Some("tool_use".to_owned()),
    };
    let result = Message {
        role: Role::Tool,
        content: vec![Block::ToolResult {
            call_id: call_id.to_owned(),
            content: vec![Block::Text {
                text: code(rng, 900, 1100),
            }],
            is_error: false,
            code: None,
        }],
        usage: None,
        model: None,
        stop_reason: None,
    };
    let reply = Message {
        role: Role::Assistant,
        content: vec![Block::Text {
            text: prose(rng, 300, 700),
        }],
        usage: Some(usage(rng)),
        model: Some(MODEL.to_owned()),
        stop_reason: Some("end_turn".to_owned()),
    };
    [user, call, result, reply]
}

/// `cycles` cycles as entry bodies (4 per cycle); call ids are `<calls>N`,
/// so different prefixes never collide on one branch.
pub fn bodies(seed: u64, calls: &str, cycles: usize) -> Vec<EntryBody> {
    let mut rng = Rng::new(seed);
    let mut out = Vec::with_capacity(cycles * 4);
    for c in 0..cycles {
        out.extend(cycle(&mut rng, &format!("{calls}{c}")).map(EntryBody::Message));
    }
    out
}

/// A unique 8-hex-digit entry id for each `n < 2^32` (the shape of cairn's
/// generated ids), without randomness.
pub fn entry_id(n: u64) -> EntryId {
    // Multiplying by an odd constant and xoring are bijections mod 2^32.
    let x = (n as u32).wrapping_mul(0x9e37_79b1) ^ 0x5bd1_e995;
    EntryId::parse(&format!("{x:08x}")).unwrap_or_else(|_| EntryId::random())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn cycle_messages_have_the_intended_sizes() {
        let mut rng = Rng::new(1);
        let [user, call, result, reply] = cycle(&mut rng, "c1");
        let len = |m: &Message| serde_json::to_string(m).unwrap().len();
        assert!((900..1300).contains(&len(&user)), "user {}", len(&user));
        assert!((250..700).contains(&len(&call)), "call {}", len(&call));
        assert!(
            (900..1400).contains(&len(&result)),
            "result {}",
            len(&result)
        );
        assert!((300..900).contains(&len(&reply)), "reply {}", len(&reply));
        assert_eq!(call.tool_calls().count(), 1);
        assert_eq!(result.tool_results().next(), Some("c1"));
    }

    #[test]
    fn same_seed_gives_same_bodies() {
        assert_eq!(bodies(7, "c", 3), bodies(7, "c", 3));
        assert_ne!(bodies(7, "c", 3), bodies(8, "c", 3));
    }

    #[test]
    fn entry_ids_are_unique_and_look_generated() {
        let ids: HashSet<String> = (0..100_000).map(|n| entry_id(n).to_string()).collect();
        assert_eq!(ids.len(), 100_000);
        assert!(ids.iter().all(|i| i.len() == 8));
    }
}
