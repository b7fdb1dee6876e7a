//! `cairn demo` runs offline, quickly, and its claims hold: the state is
//! restored after the rewind, panel 3 is charged once after the crash, the
//! crashed `bash` call is recorded as `TOOL_OUTCOME_UNKNOWN`, and the
//! sessions stay in the store.

// Test helpers panic on a failed step; that is how a test fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;

use cairn::{Access, Store};
use cairn_agent::{DemoOptions, OpenedStore};
use serde_json::json;

#[test]
fn the_demo_runs_and_its_claims_hold() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("store");
    let mut out = Vec::new();
    let opts = DemoOptions {
        exe: Some(PathBuf::from(env!("CARGO_BIN_EXE_cairn-agent"))),
        tree_printer: None,
    };
    let report = cairn_agent::demo::run(&OpenedStore::dir(&home), &mut out, opts).unwrap();
    let text = String::from_utf8(out).unwrap();

    assert_eq!(report.state_after_panel_2, json!({"buff": "exhausted"}));
    assert_eq!(
        report.state_after_rewind,
        json!({"buff": "power-up", "skill": "ten-palm strike"})
    );
    // The rewind took panel 2's image away with the conversation.
    assert_eq!(report.panels_after_rewind, vec!["panel-1.svg".to_owned()]);
    assert!(!report.workdir.join("panels/panel-2.svg").exists());
    assert_eq!(report.verdict_after_crash, "IndeterminateTool");
    assert_eq!(report.panel_3_charges, 1);
    assert_eq!(report.balance, 70);
    assert_eq!(
        report.side_effect_code.as_deref(),
        Some(cairn::TOOL_OUTCOME_UNKNOWN)
    );
    assert_eq!(report.print_queue_lines, 1);

    for claim in [
        "App state now: {\"buff\":\"power-up\",\"skill\":\"ten-palm strike\"}",
        "killed with SIGKILL",
        "Verdict: IndeterminateTool",
        "no new charge",
        "One charge for panel 3",
        "TOOL_OUTCOME_UNKNOWN",
        &format!("cairn --store {} tree {}", home.display(), report.session),
        &format!("cairn --store {} steps {}", home.display(), report.session),
        &format!(
            "cairn --store {} export {} --format html",
            home.display(),
            report.session
        ),
    ] {
        assert!(
            text.contains(claim),
            "the narration should say {claim:?}:\n{text}"
        );
    }
    assert!(
        !text.contains('\u{1b}'),
        "no raw escape sequences in the narration"
    );

    // The sessions stay in the store, closed and valid.
    let store = Store::open_dir(&home);
    let list = store.list().unwrap();
    assert_eq!(list.len(), 3, "the storyboard, its subagent and its fork");
    let s = store.open(&report.session, Access::Read).unwrap();
    assert_eq!(s.verdict().expect("the verdict").name(), "Finished");
    // The subagent scene: one child of the storyboard, finished, run once.
    let children = store.children(&report.session).unwrap();
    assert_eq!(children.len(), 1);
    assert_eq!(children[0].0.id, report.subagent);
    let child = store.open(&report.subagent, Access::Read).unwrap();
    assert_eq!(child.verdict().expect("the verdict").name(), "Finished");
    assert_eq!(report.subagent_model_calls, 2);
    assert_eq!(report.balloon_lines, 1);
    assert!(text.contains("it is not run again"), "{text}");
    let fork = store.open(&report.fork, Access::Read).unwrap();
    assert_eq!(
        fork.header().lineage.forked_from.as_ref().unwrap().session,
        report.session
    );
    assert_eq!(
        *fork.context().app_state(),
        json!({"buff": "power-up", "skill": "ten-palm strike"})
    );
    let ledger = cairn_agent::tools::render::Ledger::at(report.workdir.join("ledger.json"))
        .read()
        .unwrap();
    assert_eq!(ledger.charges.len(), 3);
}

#[test]
fn the_demo_explains_a_missing_child_entry_point() {
    let dir = tempfile::tempdir().unwrap();
    let mut out = Vec::new();
    // `true` ignores the child spec and exits: the demo must say what is wrong.
    let opts = DemoOptions {
        exe: Some(PathBuf::from("/bin/true")),
        tree_printer: None,
    };
    let e = cairn_agent::demo::run(&OpenedStore::dir(dir.path().join("store")), &mut out, opts)
        .unwrap_err();
    assert!(format!("{e:#}").contains("run_if_requested"), "{e:#}");
}
