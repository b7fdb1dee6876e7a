//! Round trips and damage checks of the index layout.

use std::sync::Arc;

use super::decode::{Checkpoint, Decoded, decode};
use super::encode::{Source, encode};
use super::layout::{PREAMBLE, ROW, ROW_BLOCK, le32};
use super::table::{DAMAGED_ID, DAMAGED_NODE, Node, check_rows};
use crate::id::{EntryId, SessionId};
use crate::kind::EntryKind;
use crate::tree::Tree;

/// An index of a header and three entries (a root, its child, and a
/// second root), with one operation record between them.
fn sample() -> (SessionId, Vec<u8>) {
    let session = SessionId::generate();
    let mut tree = Tree::default();
    let id = |s: &str| EntryId::parse(s).expect("id");
    tree.insert_checked(1, id("aa"), None, Some(EntryKind::Message));
    tree.insert_checked(3, id("bbb"), Some(0), None);
    tree.insert_checked(4, id("c"), None, Some(EntryKind::Label));
    let ops = vec![(2, "op_started".to_owned())];
    let bytes = encode(&Source {
        session: &session,
        tree: &tree,
        ops: &ops,
        offsets: &[0, 10, 25, 30, 42, 50],
        last_line_crc: 7,
        checkpoint: &Checkpoint::default(),
    })
    .expect("encodes");
    (session, bytes)
}

fn open(session: &SessionId, bytes: Vec<u8>) -> Decoded {
    match decode(Arc::new(bytes), session) {
        Ok(d) => d,
        Err(why) => panic!("{why}"),
    }
}

/// Where the blocks start: after the preamble and the head.
fn blocks_at(bytes: &[u8]) -> usize {
    PREAMBLE + le32(&bytes[12..16]) as usize
}

/// The sample's one row block (three rows, then "aabbbc"), changed at
/// `at` to `value`, checked as a read would check it.
fn rows_changed(at: usize, value: u8) -> Result<(), String> {
    let (_, bytes) = sample();
    let from = blocks_at(&bytes) + 5 * 4;
    let mut block = bytes[from..from + 3 * ROW + 6].to_vec();
    block[at] = value;
    check_rows(&block, 0, 3, 5, EntryKind::ALL.len())
}

#[test]
fn an_index_reads_back_as_the_tree_it_was_written_from() {
    let (session, bytes) = sample();
    let decoded = open(&session, bytes);
    assert!(decoded.checkpoint.projection.is_none());
    let t = &decoded.table;
    assert_eq!(t.len(), 3);
    assert_eq!((t.id(0), t.id(1), t.id(2)), ("aa", "bbb", "c"));
    assert_eq!(
        t.node(1),
        Node {
            seq: 3,
            parent: Some(0),
            depth: 1,
            kind: None
        }
    );
    assert_eq!(t.node(2).kind, Some(EntryKind::Label));
    assert_eq!(
        (t.find("aa"), t.find("bbb"), t.find("c"), t.find("d")),
        (Some(0), Some(1), Some(2), None)
    );
    assert_eq!(decoded.ops, vec![(2, "op_started".to_owned())]);
    assert_eq!(decoded.prefix.offsets(), Ok(vec![0, 10, 25, 30, 42]));
    assert_eq!(decoded.prefix.span(4), Ok((42, 8)));
    assert_eq!(decoded.prefix.end, 50);
    assert!(t.damage().is_none());
}

#[test]
fn many_blocks_read_back_in_place() {
    let session = SessionId::generate();
    let mut tree = Tree::default();
    let n = 3 * ROW_BLOCK + 7;
    for i in 0..n {
        let parent = (i > 0).then(|| i - 1);
        let id = EntryId::parse(&format!("e{i}")).expect("id");
        tree.insert_checked(u64::from(i) + 1, id, parent, Some(EntryKind::Message));
    }
    let offsets: Vec<u64> = (0..=u64::from(n) + 1).map(|s| s * 3).collect();
    let bytes = encode(&Source {
        session: &session,
        tree: &tree,
        ops: &[],
        offsets: &offsets,
        last_line_crc: 1,
        checkpoint: &Checkpoint::default(),
    })
    .expect("encodes");
    let d = open(&session, bytes);
    for i in [0, 255, 256, 700, n - 1] {
        assert_eq!(d.table.node(i).depth, i);
        assert_eq!(d.table.find(&format!("e{i}")), Some(i));
        assert_eq!(d.prefix.span(u64::from(i)), Ok((u64::from(i) * 3, 3)));
    }
    assert!(d.table.damage().is_none());
}

#[test]
fn a_row_block_with_a_parent_after_its_child_is_refused() {
    // Entry 0's parent field: 3 would be entry 2, after it.
    let why = rows_changed(4, 3).expect_err("accepted");
    assert!(why.contains("parent is not before it"), "{why}");
}

#[test]
fn a_row_block_with_a_wrong_depth_is_refused() {
    let why = rows_changed(ROW + 8, 5).expect_err("accepted");
    assert!(why.contains("depth"), "{why}");
}

#[test]
fn a_row_block_with_an_id_character_ids_may_not_have_is_refused() {
    let why = rows_changed(3 * ROW + 1, b'/').expect_err("accepted");
    assert!(why.contains("character"), "{why}");
}

#[test]
fn a_row_block_whose_seqs_do_not_rise_is_refused() {
    // Entry 2's seq 4 becomes 3, entry 1's.
    let why = rows_changed(2 * ROW, 3).expect_err("accepted");
    assert!(why.contains("seq 3"), "{why}");
}

#[test]
fn a_row_block_with_an_unnamed_kind_is_refused() {
    let why = rows_changed(15, 40).expect_err("accepted");
    assert!(why.contains("kind 40"), "{why}");
}

#[test]
fn a_flipped_bit_in_the_head_is_refused_by_its_checksum() {
    let (session, bytes) = sample();
    for at in 16..blocks_at(&bytes) {
        let mut b = bytes.clone();
        b[at] ^= 0x10;
        match decode(Arc::new(b), &session) {
            Ok(_) => panic!("byte {at}: accepted"),
            Err(why) => assert!(why.contains("checksum"), "byte {at}: {why}"),
        }
    }
}

#[test]
fn a_flipped_bit_in_a_block_is_found_when_the_block_is_read() {
    let (session, bytes) = sample();
    for at in blocks_at(&bytes)..bytes.len() {
        let mut b = bytes.clone();
        b[at] ^= 0x10;
        // The head is intact: the index opens, and the block that
        // holds the byte refuses to be read.
        let d = open(&session, b);
        let _ = (d.prefix.offsets(), d.table.node(2), d.table.find("aa"));
        let why = d
            .damage
            .get()
            .unwrap_or_else(|| panic!("byte {at}: not found"));
        assert!(why.contains("checksum"), "byte {at}: {why}");
    }
}

#[test]
fn a_damaged_row_block_answers_nothing_and_says_so() {
    let (session, mut bytes) = sample();
    let at = blocks_at(&bytes) + 5 * 4 + ROW + 4;
    bytes[at] ^= 1;
    let d = open(&session, bytes);
    assert_eq!(d.prefix.span(1), Ok((10, 15)), "other blocks still read");
    assert_eq!(d.table.node(1), DAMAGED_NODE);
    assert_eq!((d.table.id(0), d.table.parent(1)), (DAMAGED_ID, None));
    let why = d.table.damage().expect("noted");
    assert!(why.contains("row block 0"), "{why}");
}

#[test]
fn a_cut_or_extended_index_is_refused_at_open() {
    let (session, bytes) = sample();
    for b in [
        bytes[..bytes.len() - 1].to_vec(),
        [&bytes[..], &[0]].concat(),
    ] {
        match decode(Arc::new(b), &session) {
            Ok(_) => panic!("accepted"),
            Err(why) => assert!(why.contains("cut short or extended"), "{why}"),
        }
    }
}
