//! Every relative link in the repository's Markdown files leads somewhere:
//! the file exists, and a `#fragment` names a heading of the Markdown file
//! it points into (GitHub's anchors).

use std::collections::HashSet;
use std::fs;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

/// Every `.md` file of the repository, but what builds and runs write.
fn markdown_files(dir: &Path, found: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if path.is_dir() {
            if !matches!(
                name.as_str(),
                "target" | "results" | ".git" | "node_modules"
            ) {
                markdown_files(&path, found);
            }
        } else if name.ends_with(".md") {
            found.push(path);
        }
    }
}

/// The text outside fenced code blocks and inline code spans.
fn prose(text: &str) -> String {
    let mut out = String::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            out.push('\n');
            continue;
        }
        if !fenced {
            let mut in_code = false;
            for c in line.chars() {
                if c == '`' {
                    in_code = !in_code;
                } else if !in_code {
                    out.push(c);
                }
            }
        }
        out.push('\n');
    }
    out
}

/// The targets of `[text](target)` and `![alt](target)` links.
fn links(text: &str) -> Vec<String> {
    let prose = prose(text);
    let mut found = Vec::new();
    let mut rest = prose.as_str();
    while let Some(at) = rest.find("](") {
        rest = &rest[at + 2..];
        if let Some(end) = rest.find(')') {
            found.push(rest[..end].trim().to_owned());
            rest = &rest[end..];
        }
    }
    found
}

/// GitHub's anchor of a heading: lower case, punctuation dropped, spaces
/// to hyphens; a repeated one gets `-1`, `-2`, ...
fn anchors(text: &str) -> HashSet<String> {
    let mut seen = HashSet::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        }
        if fenced || !line.starts_with('#') {
            continue;
        }
        let heading = line.trim_start_matches('#').trim();
        let slug: String = heading
            .to_lowercase()
            .chars()
            .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
            .map(|c| if c == ' ' { '-' } else { c })
            .collect();
        let mut unique = slug.clone();
        let mut n = 0;
        while seen.contains(&unique) {
            n += 1;
            unique = format!("{slug}-{n}");
        }
        seen.insert(unique);
    }
    seen
}

#[test]
fn every_relative_link_and_anchor_resolves() {
    let root = root();
    let mut files = Vec::new();
    markdown_files(&root, &mut files);
    assert!(
        files.iter().any(|f| f.ends_with("docs/guide/README.md")),
        "the guide is found"
    );
    let mut broken = Vec::new();
    let mut checked = 0;
    for file in &files {
        let text = fs::read_to_string(file).unwrap();
        for link in links(&text) {
            if link.contains("://") || link.starts_with("mailto:") {
                continue;
            }
            checked += 1;
            let (path, fragment) = link.split_once('#').unwrap_or((&link, ""));
            let target = if path.is_empty() {
                file.clone()
            } else {
                file.parent().unwrap().join(path)
            };
            let shown = file.strip_prefix(&root).unwrap().display();
            if !target.exists() {
                broken.push(format!("{shown}: {link}: no such file"));
            } else if !fragment.is_empty() && target.extension().is_some_and(|e| e == "md") {
                let headings = anchors(&fs::read_to_string(&target).unwrap());
                if !headings.contains(fragment) {
                    broken.push(format!("{shown}: {link}: no heading #{fragment}"));
                }
            }
        }
    }
    assert!(checked > 50, "only {checked} links checked");
    assert!(
        broken.is_empty(),
        "{} broken links:\n{}",
        broken.len(),
        broken.join("\n")
    );
}

#[test]
fn anchors_follow_githubs_rules() {
    let text = "# Sweeping and the session cap\n## No sweeper: the server expires fields\n## A, B\n## A, B\n";
    let found = anchors(text);
    for a in [
        "sweeping-and-the-session-cap",
        "no-sweeper-the-server-expires-fields",
        "a-b",
        "a-b-1",
    ] {
        assert!(found.contains(a), "{a} in {found:?}");
    }
    assert_eq!(
        links("[x](a.md#b) `[y](z)` ![p](q.png)"),
        ["a.md#b", "q.png"]
    );
}
