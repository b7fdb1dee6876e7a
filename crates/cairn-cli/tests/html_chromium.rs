//! Renders `cairn export --format html` in headless Chromium (Debian's
//! `chromium` package) with networking disabled, and checks the page's text
//! and that the SVG has one node per entry. Skipped, with a notice, when
//! Chromium is not installed.

// Test helpers panic on a failed step; that is how a test fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::PathBuf;
use std::process::Command;

use support::{Home, STORY, storyboard};

fn chromium() -> Option<PathBuf> {
    [
        "/usr/bin/chromium",
        "/usr/bin/chromium-browser",
        "/usr/bin/google-chrome",
    ]
    .iter()
    .map(PathBuf::from)
    .find(|p| p.exists())
}

#[test]
fn html_export_renders_offline_with_one_svg_node_per_entry() {
    let Some(browser) = chromium() else {
        eprintln!(
            "NOTICE: skipping the headless-Chromium test: chromium is not installed (apt-get install chromium)"
        );
        return;
    };
    let home = Home::new();
    storyboard(&home);
    let page = home.path().join("story.html");
    home.cairn()
        .args(["export", STORY, "--format", "html", "-o"])
        .arg(&page)
        .assert()
        .success();
    let profile = tempfile::tempdir().unwrap();
    let out = Command::new(browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-extensions",
        ])
        .arg("--proxy-server=127.0.0.1:9") // nothing may be fetched
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg("--dump-dom")
        .arg(format!("file://{}", page.display()))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "chromium failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let dom = String::from_utf8_lossy(&out.stdout);
    assert!(dom.contains("<h1>comic storyboard</h1>"), "{dom}");
    assert!(dom.contains("Conversation (current branch)"));
    assert!(dom.contains("Panel 3: the hero climbs the tower."));
    assert!(dom.contains("render_panel"));
    assert!(dom.contains("[panel-1]") && dom.contains("◀ leaf"));
    assert_eq!(
        dom.matches("<g class=\"node").count(),
        16,
        "one SVG node per entry"
    );
    assert_eq!(
        dom.matches("<path class=\"edge").count(),
        15,
        "one edge per non-root entry"
    );
    assert!(dom.contains("<svg"));
}
