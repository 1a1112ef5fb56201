//! What a newcomer meets first, the README and the crate's page, stays a
//! door: short, and naming no crate they cannot get.

use std::fs;
use std::path::Path;

fn read(path: &str) -> String {
    fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../..")
            .join(path),
    )
    .unwrap()
}

/// The workspace's crates that are not published.
const UNPUBLISHED: &[&str] = &[
    "sessionpack_testkit",
    "sessionpack-testkit",
    "sessionpack_docs_check",
    "sessionpack_cli",
];

#[test]
fn the_readme_is_at_most_300_lines() {
    let lines = read("README.md").lines().count();
    assert!(
        lines <= 300,
        "README.md has {lines} lines; the rest belongs in docs/guide"
    );
}

#[test]
fn the_readme_and_the_crate_page_name_no_unpublished_crate() {
    let crate_page: String = read("src/lib.rs")
        .lines()
        .filter(|l| l.starts_with("//!"))
        .collect::<Vec<_>>()
        .join("\n");
    for (name, text) in [
        ("README.md", read("README.md")),
        ("the crate page", crate_page),
    ] {
        for unpublished in UNPUBLISHED {
            assert!(!text.contains(unpublished), "{name} names {unpublished}");
        }
    }
}

#[test]
fn the_crate_page_leads_to_each_store() {
    let lib = read("src/lib.rs");
    for store in [
        "[`TowerStore::connect`]",
        "[`ActixStore::connect`]",
        "[`Store`]",
    ] {
        assert!(lib.contains(store), "the crate page links {store}");
    }
    assert!(
        !lib.contains("include_str!(\"../README.md\")"),
        "the crate page is its own text"
    );
}
