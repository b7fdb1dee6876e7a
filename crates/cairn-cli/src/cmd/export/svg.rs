//! The session tree as an inline SVG: one `<g class="node">` per entry,
//! placed by [`TreeView::layout`] (rows depth-first, a lane per branch),
//! edges from parent to child, the active path and the leaf highlighted,
//! labels drawn beside their entries. Entries on the active path link to
//! their place in the conversation below the picture. Written a node at a
//! time: each entry's record is read for its node and dropped after.

use std::fmt::Write as _;

use anyhow::Result;
use cairn::Session;

use super::{Sink, escape_html};
use crate::term::fit;
use cairn_view::describe::entry_line;
use cairn_view::tree::TreeView;

const ROW: usize = 26;
const LANE: usize = 20;
const PAD: usize = 16;
const R: usize = 6;

/// Draws the tree after what `svg` holds, writing to `sink` as it goes.
///
/// # Errors
///
/// When a record cannot be read, or the output cannot be written.
pub fn render(
    session: &Session,
    view: &TreeView,
    svg: &mut String,
    sink: &mut Sink<'_>,
) -> Result<()> {
    let places = view.layout();
    let lanes = places.iter().map(|p| p.lane + 1).max().unwrap_or(1);
    let mut pos = vec![(0usize, 0usize); view.nodes.len()];
    for p in &places {
        pos[p.node] = (PAD + p.lane * LANE, PAD + p.row * ROW);
    }
    let text_x = PAD + lanes * LANE + 8;
    let width = text_x + 760;
    let height = PAD * 2 + places.len().max(1) * ROW;
    let _ = writeln!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" class="tree" width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img" aria-label="session tree">"#
    );
    // Edges first, so nodes are drawn over them.
    for (child, node) in view.nodes.iter().enumerate() {
        let Some(parent) = node.parent else { continue };
        let (px, py) = pos[parent];
        let (cx, cy) = pos[child];
        let class = if node.active && view.nodes[parent].active {
            "edge active"
        } else {
            "edge"
        };
        let d = if px == cx {
            format!("M{px},{py} L{cx},{cy}")
        } else {
            // Leave the parent, bend into the child's lane, run down it.
            let bend = py + ROW / 2;
            format!(
                "M{px},{py} C{px},{bend} {cx},{py} {cx},{} L{cx},{cy}",
                bend + ROW / 2
            )
        };
        let _ = writeln!(svg, r#"<path class="{class}" d="{d}"/>"#);
        sink.emit(svg)?;
    }
    for p in &places {
        let node = &view.nodes[p.node];
        let (x, y) = pos[p.node];
        let (body, _) = view.read(session, p.node)?;
        let d = entry_line(&body);
        let leaf = view.leaf == Some(p.node);
        let mut class = String::from("node");
        if node.active {
            class.push_str(" active");
        }
        if leaf {
            class.push_str(" leaf");
        }
        let full = format!("{} · {} {}", node.id, d.tag, d.text);
        let _ = write!(
            svg,
            r#"<g class="{class}" data-id="{}" data-kind="{}"><title>{}</title>"#,
            escape_html(node.id.as_str()),
            escape_html(body.kind()),
            escape_html(&fit(&full, 400))
        );
        if node.active {
            let _ = write!(svg, r##"<a href="#e-{}">"##, escape_html(node.id.as_str()));
        }
        if leaf {
            let _ = write!(
                svg,
                r#"<circle class="ring" cx="{x}" cy="{y}" r="{}"/>"#,
                R + 4
            );
        }
        let _ = write!(
            svg,
            r#"<circle class="dot {}" cx="{x}" cy="{y}" r="{R}"/>"#,
            escape_html(&d.tag)
        );
        let _ = write!(
            svg,
            r#"<text x="{text_x}" y="{}"><tspan class="id">{}</tspan> <tspan class="tag">{}</tspan> {}"#,
            y + 4,
            escape_html(&fit(node.id.as_str(), 12)),
            escape_html(&d.tag),
            escape_html(&fit(&d.text, 72)),
        );
        for l in &node.labels {
            let _ = write!(svg, r#" <tspan class="label">[{}]</tspan>"#, escape_html(l));
        }
        if leaf {
            svg.push_str(r#" <tspan class="leafmark">◀ leaf</tspan>"#);
        }
        svg.push_str("</text>");
        if node.active {
            svg.push_str("</a>");
        }
        svg.push_str("</g>\n");
        sink.emit(svg)?;
    }
    svg.push_str("</svg>\n");
    Ok(())
}
