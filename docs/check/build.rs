//! Turns every Rust block of the README and the guide into a module of the
//! `blocks` binary. A block is a whole program: its `use` lines, its items
//! and its `main`, exactly as a reader copies it.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::{env, fs};

/// The documents whose blocks are compiled, from the package's directory.
const DOCUMENTS: &[&str] = &["../../README.md", "../guide"];

fn main() {
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let mut files = Vec::new();
    for doc in DOCUMENTS {
        let path = Path::new(doc);
        println!("cargo:rerun-if-changed={doc}");
        if path.is_dir() {
            let mut chapters: Vec<PathBuf> = fs::read_dir(path)
                .expect("the guide's directory")
                .map(|entry| entry.expect("a guide entry").path())
                .filter(|p| p.extension().is_some_and(|e| e == "md"))
                .collect();
            chapters.sort();
            files.extend(chapters);
        } else {
            files.push(path.to_path_buf());
        }
    }

    let mut modules = String::new();
    let mut table =
        String::from("/// Every block: name, where it is, and what the tests do with it.\n");
    table.push_str("pub const BLOCKS: &[Block] = &[\n");
    let mut dispatch = String::from(
        "/// Runs the named block's `main`.\npub fn run(name: &str) -> Option<std::process::ExitCode> {\n    match name {\n",
    );
    for file in &files {
        let text = fs::read_to_string(file).expect("a document");
        let shown = file
            .strip_prefix("../..")
            .unwrap_or(file)
            .display()
            .to_string();
        let shown = shown
            .trim_start_matches("../")
            .replace("guide/", "docs/guide/");
        let stem = file
            .file_stem()
            .and_then(|s| s.to_str())
            .expect("a UTF-8 file name")
            .to_ascii_lowercase()
            .replace(|c: char| !c.is_ascii_alphanumeric(), "_");
        for block in rust_blocks(&text) {
            let name = format!("{stem}_{}", block.line);
            let source = out.join(format!("{name}.rs"));
            fs::write(&source, &block.code).expect("the block's file");
            writeln!(
                modules,
                "#[allow(dead_code, unused_imports)]\nmod {name} {{\n    include!({source:?});\n    #[allow(clippy::unit_arg)] // a block's `main` may return nothing\n    pub(super) fn run_block() -> std::process::ExitCode {{\n        std::process::Termination::report(main())\n    }}\n}}"
            )
            .unwrap();
            writeln!(
                table,
                "    Block {{ name: {name:?}, at: \"{shown}:{}\", run: {}, needs: {:?} }},",
                block.line,
                block.run,
                needs(&block.code)
            )
            .unwrap();
            writeln!(dispatch, "        {name:?} => Some({name}::run_block()),").unwrap();
        }
    }
    table.push_str("];\n");
    dispatch.push_str("        _ => None,\n    }\n}\n");
    fs::write(
        out.join("blocks.rs"),
        format!("{modules}\n{table}\n{dispatch}"),
    )
    .expect("blocks.rs");
}

/// What a block needs beside a server at `REDIS_URL`, read from the
/// environment variables it names: a cluster, a TLS server, or an address
/// to serve on.
fn needs(code: &str) -> &'static str {
    if code.contains("\"REDIS_CLUSTER_URLS\"") {
        "cluster"
    } else if code.contains("\"REDIS_TLS_URL\"") {
        "tls"
    } else if code.contains("\"ADDR\"") {
        "web"
    } else {
        "server"
    }
}

struct RustBlock {
    /// The line of its opening fence, counting from 1.
    line: usize,
    /// `false` for `rust,no_run`: compiled, and run only by a test that
    /// knows how (a web server is driven over HTTP).
    run: bool,
    code: String,
}

/// The fenced blocks whose info string starts with `rust`. A block marked
/// `ignore` is refused: every block must at least compile.
fn rust_blocks(text: &str) -> Vec<RustBlock> {
    let mut blocks = Vec::new();
    let mut open: Option<RustBlock> = None;
    for (n, line) in text.lines().enumerate() {
        let fence = line.trim_start();
        match open.as_mut() {
            Some(block) if fence.starts_with("```") => {
                blocks.push(std::mem::replace(
                    block,
                    RustBlock {
                        line: 0,
                        run: false,
                        code: String::new(),
                    },
                ));
                open = None;
            }
            Some(block) => {
                block.code.push_str(line);
                block.code.push('\n');
            }
            None => {
                if let Some(info) = fence.strip_prefix("```") {
                    let tags: Vec<&str> = info.split(',').map(str::trim).collect();
                    if tags.first() == Some(&"rust") {
                        assert!(
                            !tags.contains(&"ignore"),
                            "line {}: a `rust,ignore` block is not compiled; make it a whole program",
                            n + 1
                        );
                        open = Some(RustBlock {
                            line: n + 1,
                            run: !tags.contains(&"no_run"),
                            code: String::new(),
                        });
                    } else if !info.is_empty() {
                        // Any other language: skip to its closing fence.
                        open = Some(RustBlock {
                            line: 0,
                            run: false,
                            code: String::new(),
                        });
                    }
                }
            }
        }
    }
    blocks.retain(|b| b.line != 0);
    blocks
}
