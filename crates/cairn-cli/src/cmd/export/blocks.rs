//! The content blocks of a transcript, walked once for every text format
//! (`--format md`, `--format html`): a format says how each piece is
//! written, [`Blocks`] says which pieces there are and in what order, and
//! remembers each call's tool so that its result can name it.

use std::collections::HashMap;

use cairn::{Block, ResultBlock};

/// How one export format writes the pieces of a message's content. Every
/// method appends to `out`; text arrives raw, for the format to escape.
pub trait BlockFormat {
    /// A text block.
    fn text(out: &mut String, text: &str);
    /// A thinking block.
    fn thinking(out: &mut String, thinking: &str);
    /// A tool call, its arguments pretty-printed JSON.
    fn call(out: &mut String, name: &str, call_id: &str, arguments: &str);
    /// What stands before a result's content: the tool it answers, when
    /// its call came earlier in the transcript, and the result's call id,
    /// error flag and code.
    fn result_head(out: &mut String, tool: Option<&str>, r: ResultBlock<'_>);
    /// A text block inside a result (tool output, not prose).
    fn result_text(out: &mut String, text: &str);
    /// What closes a result.
    fn result_end(out: &mut String);
    /// An inline image.
    fn image(out: &mut String, media_type: &str, data: &str);
    /// A reference to content stored elsewhere.
    fn blob(out: &mut String, uri: &str);
}

/// The walk over one transcript's blocks, in order.
#[derive(Debug, Default)]
pub struct Blocks {
    /// The tool of every call seen so far, by call id.
    calls: HashMap<String, String>,
}

impl Blocks {
    /// Writes one block (a result with its content) in the format `F`.
    pub fn write<F: BlockFormat>(&mut self, out: &mut String, b: &Block) {
        match b {
            Block::Text { text } => F::text(out, text),
            Block::Thinking { thinking, .. } => F::thinking(out, thinking),
            Block::ToolCall {
                call_id,
                name,
                arguments,
            } => {
                self.calls.insert(call_id.clone(), name.clone());
                let args = serde_json::to_string_pretty(arguments).unwrap_or_default();
                F::call(out, name, call_id, &args);
            }
            Block::ToolResult { .. } => {
                if let Some(r) = b.as_result() {
                    self.result::<F>(out, r);
                }
            }
            Block::Image { media_type, data } => F::image(out, media_type, data),
            Block::Blob { uri, .. } => F::blob(out, uri),
        }
    }

    fn result<F: BlockFormat>(&mut self, out: &mut String, r: ResultBlock<'_>) {
        F::result_head(out, self.calls.get(r.call_id).map(String::as_str), r);
        for inner in r.content {
            match inner {
                Block::Text { text } => F::result_text(out, text),
                other => self.write::<F>(out, other),
            }
        }
        F::result_end(out);
    }
}
