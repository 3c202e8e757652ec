//! The docs against the tree and against their own rules. README.md's "## Tests" list names
//! every integration test file (`tests/*.rs`) and every fuzz target (`fuzz/Cargo.toml`'s
//! `[[bin]]`s), and nothing that is not there, so a test added without a line in the README
//! fails here. BENCHMARKS.md stays a reference: under 40,000 bytes, and its "## Targets" table
//! one short line a target (8 cells a row, none over 200 characters), the story in the sections
//! below and the history in docs/perf-log.md.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(root().join(path)).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// README.md's "## Tests" section, up to the next section.
fn tests_section() -> String {
    let readme = read(Path::new("README.md"));
    let start = readme
        .find("\n## Tests\n")
        .expect("README.md has a \"## Tests\" section");
    let rest = &readme[start + 1..];
    let end = rest[3..].find("\n## ").map_or(rest.len(), |e| e + 3);
    rest[..end].to_string()
}

/// The file names (`golden.rs`) of `dir`'s entries ending in `.rs`.
fn rust_files(dir: &str) -> BTreeSet<String> {
    std::fs::read_dir(root().join(dir))
        .unwrap_or_else(|e| panic!("{dir}: {e}"))
        .map(|e| {
            e.expect("a directory entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .filter(|name| name.ends_with(".rs"))
        .collect()
}

#[test]
fn the_readme_lists_every_test_file() {
    let section = tests_section();
    // Each test file is one bullet: "- `tests/NAME.rs`: what it checks".
    let listed: BTreeSet<String> = section
        .lines()
        .filter_map(|l| l.strip_prefix("- `tests/"))
        .filter_map(|l| l.split_once("`:"))
        .map(|(name, _)| name.to_string())
        .collect();
    let files = rust_files("tests");
    let missing: Vec<_> = files.difference(&listed).collect();
    let stale: Vec<_> = listed.difference(&files).collect();
    assert!(
        missing.is_empty() && stale.is_empty(),
        "README.md's test list (a \"- `tests/NAME.rs`: …\" bullet each under \"## Tests\"):\n\
         not listed: {missing:?}\nlisted but not in tests/: {stale:?}"
    );
}

#[test]
fn the_readme_names_every_fuzz_target() {
    let section = tests_section();
    let manifest = read(Path::new("fuzz/Cargo.toml"));
    let doc: toml::Value = toml::from_str(&manifest).expect("fuzz/Cargo.toml parses");
    let bins = doc
        .get("bin")
        .and_then(toml::Value::as_array)
        .expect("fuzz/Cargo.toml has [[bin]] targets");
    let mut targets = BTreeSet::new();
    let mut paths = BTreeSet::new();
    for bin in bins {
        let name = bin
            .get("name")
            .and_then(toml::Value::as_str)
            .expect("a name");
        let path = bin
            .get("path")
            .and_then(toml::Value::as_str)
            .expect("a path");
        targets.insert(name.to_string());
        paths.insert(path.trim_start_matches("fuzz_targets/").to_string());
    }
    // Every file of fuzz_targets/ is a target or a module a target declares (`mod split;`), so
    // a target file missing from fuzz/Cargo.toml is caught too.
    let sources: String = paths
        .iter()
        .map(|p| read(&Path::new("fuzz/fuzz_targets").join(p)))
        .collect();
    for file in rust_files("fuzz/fuzz_targets") {
        let module = file.trim_end_matches(".rs");
        assert!(
            paths.contains(&file) || sources.contains(&format!("mod {module};")),
            "fuzz/fuzz_targets/{file} is neither a [[bin]] of fuzz/Cargo.toml nor a module of one"
        );
    }
    let fuzz = section
        .lines()
        .skip_while(|l| !l.starts_with("- Fuzzing:"))
        .take_while(|l| !l.starts_with("- ") || l.starts_with("- Fuzzing:"))
        .collect::<Vec<_>>()
        .join("\n");
    assert!(
        !fuzz.is_empty(),
        "README.md's test list has a \"- Fuzzing:\" bullet"
    );
    let unnamed: Vec<_> = targets
        .iter()
        .filter(|t| !fuzz.contains(&format!("`{t}`")))
        .collect();
    assert!(
        unnamed.is_empty(),
        "README.md's \"- Fuzzing:\" bullet does not name the fuzz targets {unnamed:?}:\n{fuzz}"
    );
}

/// BENCHMARKS.md is a reference, not a diary: under 40,000 bytes, and every row of its
/// "## Targets" table eight short cells (area, target, from, figure, command, commit, date,
/// status). Explanations go to the area's section below the table, runs to docs/perf-log.md.
#[test]
fn benchmarks_md_stays_a_reference() {
    const MAX_BYTES: usize = 40_000;
    const MAX_CELL_CHARS: usize = 200;
    let text = read(Path::new("BENCHMARKS.md"));
    assert!(
        text.len() < MAX_BYTES,
        "BENCHMARKS.md is {} bytes (limit {MAX_BYTES}): move histories, experiment narratives \
         and superseded runs to docs/perf-log.md",
        text.len()
    );
    let start = text
        .find("\n## Targets\n")
        .expect("BENCHMARKS.md has a \"## Targets\" section");
    let section = &text[start + 1..];
    let section = &section[..section[3..].find("\n## ").map_or(section.len(), |e| e + 3)];
    let rows: Vec<&str> = section
        .lines()
        .filter(|l| l.starts_with('|'))
        .skip(2) // the header and the |---| line
        .collect();
    assert!(!rows.is_empty(), "BENCHMARKS.md's Targets table has rows");
    for row in rows {
        let inner = row
            .trim()
            .strip_prefix('|')
            .and_then(|r| r.strip_suffix('|'))
            .unwrap_or_else(|| panic!("a Targets row starts and ends with '|': {row}"));
        let cells: Vec<&str> = inner.split('|').map(str::trim).collect();
        assert_eq!(
            cells.len(),
            8,
            "a Targets row has 8 cells (area, target, from, figure, command, commit, date, \
             status): {row}"
        );
        for cell in cells {
            assert!(
                !cell.is_empty() && cell.chars().count() <= MAX_CELL_CHARS,
                "a Targets cell is empty or over {MAX_CELL_CHARS} characters (put the story in \
                 the area's section): {cell}"
            );
        }
    }
}

/// Every file under `dir` (recursively) whose name ends in one of `exts`.
fn files_under(dir: &Path, exts: &[&str], out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let path = e.path();
        if path.is_dir() {
            files_under(&path, exts, out);
        } else if exts.iter().any(|x| path.to_string_lossy().ends_with(x)) {
            out.push(path);
        }
    }
}

/// A reason the reader cannot follow is no reason: every Markdown file that the code, the
/// rules, README.md, ARCHITECTURE.md or docs/ name (`DESIGN.md`, `docs/rules.md`) is in the
/// repository. docs/perf-log.md is a log, quoted as written, and is not checked.
#[test]
fn every_cited_document_is_in_the_repository() {
    let root = root();
    let mut files = Vec::new();
    files_under(&root.join("src"), &[".rs", ".lua"], &mut files);
    files_under(&root.join("rules"), &[".lua"], &mut files);
    files_under(&root.join("docs"), &[".md"], &mut files);
    files.push(root.join("README.md"));
    files.push(root.join("ARCHITECTURE.md"));
    files.retain(|f| !f.ends_with("docs/perf-log.md"));
    let mut missing = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        for (i, _) in text.match_indices(".md") {
            let start = text[..i]
                .rfind(|c: char| !(c.is_ascii_alphanumeric() || "/._-".contains(c)))
                .map_or(0, |s| s + 1);
            let name = &text[start..i + 3];
            if name.len() <= 3 || text[i + 3..].starts_with(|c: char| c.is_ascii_alphanumeric()) {
                continue;
            }
            let name = name.trim_start_matches("./").trim_start_matches("../");
            let exists = root.join(name).exists()
                || f.parent().is_some_and(|d| d.join(name).exists())
                || root.join("docs").join(name).exists();
            if !exists {
                missing.push(format!(
                    "{}: {name}",
                    f.strip_prefix(&root).unwrap().display()
                ));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "cited but not in the repository:\n{}",
        missing.join("\n")
    );
}
