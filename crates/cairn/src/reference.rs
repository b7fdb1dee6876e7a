//! A session's reference to another (a subagent's session, from its
//! parent's tool result): the `cairn:session/<id>` blob.

use crate::id::SessionId;

/// The URI scheme of a reference to a session (`cairn:session/<id>`).
const SESSION_URI: &str = "cairn:session/";

/// The block a parent's tool result carries to reference a child session.
pub fn child_reference(child: &SessionId) -> crate::record::Block {
    crate::record::Block::Blob {
        uri: format!("{SESSION_URI}{child}"),
        media_type: Some("application/vnd.cairn.session".into()),
        size: None,
        sha256: None,
    }
}

/// The session a block references, if it is a [`child_reference`].
pub fn referenced_session(block: &crate::record::Block) -> Option<SessionId> {
    match block {
        crate::record::Block::Blob { uri, .. } => {
            SessionId::parse(uri.strip_prefix(SESSION_URI)?).ok()
        }
        crate::record::Block::Text { .. }
        | crate::record::Block::Thinking { .. }
        | crate::record::Block::ToolCall { .. }
        | crate::record::Block::ToolResult { .. }
        | crate::record::Block::Image { .. } => None,
    }
}
