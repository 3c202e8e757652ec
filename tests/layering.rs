//! The layering ARCHITECTURE.md states, checked against the code. Its module table ("## Modules")
//! lists the library's top-level modules from the top down, each with the modules it uses, and
//! says a module uses only the modules below it. These tests read every `crate::…` path (`use`
//! or inline, `crate::{…}` groups too) and every `super::` chain that leaves a top-level module
//! in src/, and fail on:
//!
//! - a module of `src/lib.rs` the table lacks, or a row naming no module;
//! - a row whose "uses" names a module above it (the table itself would allow a cycle);
//! - a path from one top-level module to another that the table does not list (file and line);
//! - a use the table lists that no file of the module makes (the table says more than the code);
//! - a cycle between top-level modules, read from the code alone (file and line of each edge).
//!
//! A file maps to its top-level module (`src/server/http.rs` → `server`, `src/config.rs` →
//! `config`); a sub-row such as `store/redis/` adds its uses to its top-level module's.
//! `src/main.rs`, the binary, and the modules it declares (`src/cli/`) may use everything. Comments and string literals are not code.
//! Unit tests (`#[cfg(test)]` items and the files of `#[cfg(test)] mod x;`) build fixtures from
//! whatever they need, as the integration tests do, and are not read.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

// ---------------------------------------------------------------------------------------------
// A small Rust lexer: identifiers and punctuation with their lines; comments, strings, chars and
// numbers dropped.

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Ident(String),
    /// `::`
    Path,
    Punct(char),
}

fn lex(src: &str) -> Vec<(Tok, usize)> {
    let b = src.as_bytes();
    let mut out = Vec::new();
    let (mut i, mut line) = (0, 1);
    let ident_start = |c: u8| c == b'_' || c.is_ascii_alphabetic();
    let ident_char = |c: u8| c == b'_' || c.is_ascii_alphanumeric();
    // Skips a string body from `i` (just past the opening quote) to just past its closing quote.
    let skip_string = |i: &mut usize, line: &mut usize| {
        while *i < b.len() {
            match b[*i] {
                b'\\' => *i += 2,
                b'"' => {
                    *i += 1;
                    return;
                }
                c => {
                    if c == b'\n' {
                        *line += 1;
                    }
                    *i += 1;
                }
            }
        }
    };
    while i < b.len() {
        let c = b[i];
        match c {
            b'\n' => {
                line += 1;
                i += 1;
            }
            _ if c.is_ascii_whitespace() => i += 1,
            b'/' if b.get(i + 1) == Some(&b'/') => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                let mut depth = 0;
                while i < b.len() {
                    if b[i..].starts_with(b"/*") {
                        depth += 1;
                        i += 2;
                    } else if b[i..].starts_with(b"*/") {
                        depth -= 1;
                        i += 2;
                        if depth == 0 {
                            break;
                        }
                    } else {
                        if b[i] == b'\n' {
                            line += 1;
                        }
                        i += 1;
                    }
                }
            }
            b'"' => {
                i += 1;
                skip_string(&mut i, &mut line);
            }
            // Raw strings: r"…", r#"…"#, br"…", and byte strings b"…", c"…".
            b'r' | b'b' | b'c'
                if {
                    let mut j = i + 1;
                    if c == b'b' && b.get(j) == Some(&b'r') {
                        j += 1;
                    }
                    let raw = c == b'r' || b.get(i + 1) == Some(&b'r');
                    (raw && matches!(b.get(j), Some(b'#') | Some(b'"')))
                        || (!raw && b.get(j) == Some(&b'"'))
                } =>
            {
                let mut j = i + 1;
                if c == b'b' && b.get(j) == Some(&b'r') {
                    j += 1;
                }
                let raw = c == b'r' || b.get(i + 1) == Some(&b'r');
                if !raw {
                    i = j + 1;
                    skip_string(&mut i, &mut line);
                    continue;
                }
                let mut hashes = 0;
                while b.get(j) == Some(&b'#') {
                    hashes += 1;
                    j += 1;
                }
                if b.get(j) != Some(&b'"') {
                    // `r#ident`, a raw identifier.
                    let start = j;
                    while j < b.len() && ident_char(b[j]) {
                        j += 1;
                    }
                    out.push((Tok::Ident(src[start..j].to_string()), line));
                    i = j;
                    continue;
                }
                j += 1;
                let close: Vec<u8> = std::iter::once(b'"')
                    .chain(std::iter::repeat_n(b'#', hashes))
                    .collect();
                while j < b.len() && !b[j..].starts_with(&close) {
                    if b[j] == b'\n' {
                        line += 1;
                    }
                    j += 1;
                }
                i = j + close.len();
            }
            b'\'' => {
                // A char literal ('x', '\n', '\u{..}', b'x' went through the ident arm) or a
                // lifetime ('a, 'static).
                if b.get(i + 1) == Some(&b'\\') {
                    // Past the backslash and the escaped character ('\'' too).
                    let mut j = i + 3;
                    while j < b.len() && b[j] != b'\'' {
                        j += 1;
                    }
                    i = j + 1;
                } else if b.get(i + 2) == Some(&b'\'') {
                    i += 3;
                } else if let Some(len) = src[i + 1..].chars().next().map(char::len_utf8) {
                    if b.get(i + 1 + len) == Some(&b'\'') {
                        i += 2 + len;
                    } else {
                        // A lifetime: skip the quote, the identifier follows.
                        i += 1;
                    }
                } else {
                    i += 1;
                }
            }
            _ if ident_start(c) => {
                let start = i;
                while i < b.len() && ident_char(b[i]) {
                    i += 1;
                }
                // b'x': a byte literal.
                if &src[start..i] == "b" && b.get(i) == Some(&b'\'') {
                    let mut j = i + 1;
                    if b.get(j) == Some(&b'\\') {
                        j += 1;
                    }
                    j += 1;
                    while j < b.len() && b[j] != b'\'' {
                        j += 1;
                    }
                    i = j + 1;
                    continue;
                }
                out.push((Tok::Ident(src[start..i].to_string()), line));
            }
            _ if c.is_ascii_digit() => {
                while i < b.len()
                    && (ident_char(b[i])
                        || b[i] == b'.' && b.get(i + 1).is_some_and(u8::is_ascii_digit))
                {
                    i += 1;
                }
            }
            b':' if b.get(i + 1) == Some(&b':') => {
                out.push((Tok::Path, line));
                i += 2;
            }
            _ => {
                let ch = src[i..].chars().next().expect("in bounds");
                out.push((Tok::Punct(ch), line));
                i += ch.len_utf8();
            }
        }
    }
    out
}

// ---------------------------------------------------------------------------------------------
// The source tree: files, their modules, their paths to other top-level modules.

/// One `crate::x` or `super::…::x` path that reaches the top-level module `to`.
#[derive(Debug, Clone)]
struct Use {
    file: String,
    line: usize,
    from: String,
    to: String,
    text: String,
}

/// The module path of a file under src/: `server/http.rs` → [server, http], `store/mod.rs` →
/// [store], `config.rs` → [config].
fn module_path(rel: &Path) -> Vec<String> {
    let mut parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    let last = parts.pop().expect("a file name");
    if last != "mod.rs" {
        parts.push(last.trim_end_matches(".rs").to_string());
    }
    parts
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("a directory entry").path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// What one file says: its paths to other top-level modules, and the modules it declares
/// `#[cfg(test)] mod x;` (whose files are test code).
struct FileScan {
    uses: Vec<Use>,
    test_mods: Vec<String>,
}

/// Whether the attribute tokens (between `#[` and `]`) are `cfg(test)`.
fn is_cfg_test(attr: &[Tok]) -> bool {
    attr == [
        Tok::Ident("cfg".into()),
        Tok::Punct('('),
        Tok::Ident("test".into()),
        Tok::Punct(')'),
    ]
}

fn ident(t: Option<&(Tok, usize)>) -> Option<&str> {
    match t {
        Some((Tok::Ident(s), _)) => Some(s),
        _ => None,
    }
}

/// The index just past the bracket group opening at `open`.
fn close_of(toks: &[(Tok, usize)], open: usize) -> usize {
    let mut depth = 0i32;
    for (k, (t, _)) in toks.iter().enumerate().skip(open) {
        match t {
            Tok::Punct('(' | '[' | '{') => depth += 1,
            Tok::Punct(')' | ']' | '}') => {
                depth -= 1;
                if depth == 0 {
                    return k + 1;
                }
            }
            _ => {}
        }
    }
    toks.len()
}

/// The index just past the item starting at `i`: its `;` or its closing `}` at depth 0.
fn item_end(toks: &[(Tok, usize)], i: usize) -> usize {
    let mut k = i;
    while k < toks.len() {
        match &toks[k].0 {
            Tok::Punct(';') => return k + 1,
            Tok::Punct('{') => return close_of(toks, k),
            Tok::Punct('(' | '[') => k = close_of(toks, k),
            _ => k += 1,
        }
    }
    toks.len()
}

/// The first identifiers of the elements of the group `{…}` opening at `open` (with their
/// lines), and the index past it.
fn group_heads(toks: &[(Tok, usize)], open: usize) -> (Vec<(String, usize)>, usize) {
    let end = close_of(toks, open);
    let mut heads = Vec::new();
    let mut expect_head = true;
    let mut depth = 0;
    for (t, line) in &toks[open + 1..end - 1] {
        match t {
            Tok::Punct('{' | '(' | '[') => depth += 1,
            Tok::Punct('}' | ')' | ']') => depth -= 1,
            Tok::Punct(',') if depth == 0 => expect_head = true,
            Tok::Ident(s) if expect_head && depth == 0 => {
                heads.push((s.clone(), *line));
                expect_head = false;
            }
            _ => {}
        }
    }
    (heads, end)
}

fn scan_file(rel: &Path, src: &str, modules: &BTreeSet<String>) -> FileScan {
    let toks = lex(src);
    let file = format!("src/{}", rel.display());
    let base = module_path(rel);
    let top = base[0].clone();
    let mut uses = Vec::new();
    let mut test_mods = Vec::new();
    // Inline `mod x { … }` modules open at this point, with the index of their closing brace.
    let mut inline: Vec<(String, usize)> = Vec::new();
    let record = |to: &str, line: usize, text: String, uses: &mut Vec<Use>| {
        assert!(
            modules.contains(to),
            "{file}:{line}: `{text}` names `{to}`, which src/lib.rs does not declare as a module"
        );
        if to != top {
            uses.push(Use {
                file: file.clone(),
                line,
                from: top.clone(),
                to: to.to_string(),
                text,
            });
        }
    };
    let mut i = 0;
    while i < toks.len() {
        while inline.last().is_some_and(|(_, end)| i >= *end) {
            inline.pop();
        }
        // Attributes: `#[cfg(test)]` drops the item it is on.
        if toks[i].0 == Tok::Punct('#') {
            let bang = toks.get(i + 1).map(|t| &t.0) == Some(&Tok::Punct('!'));
            let open = i + 1 + usize::from(bang);
            if toks.get(open).map(|t| &t.0) == Some(&Tok::Punct('[')) {
                let end = close_of(&toks, open);
                let attr: Vec<Tok> = toks[open + 1..end - 1]
                    .iter()
                    .map(|t| t.0.clone())
                    .collect();
                if is_cfg_test(&attr) {
                    assert!(
                        !bang,
                        "{file}: `#![cfg(test)]`: declare the module `#[cfg(test)]` instead"
                    );
                    // The item after this and any further attributes.
                    let mut k = end;
                    while toks.get(k).map(|t| &t.0) == Some(&Tok::Punct('#')) {
                        k = close_of(&toks, k + 1);
                    }
                    let item = item_end(&toks, k);
                    let words: Vec<&str> = (k..item).filter_map(|j| ident(toks.get(j))).collect();
                    if let Some(p) = words.iter().position(|w| *w == "mod") {
                        if toks[item - 1].0 == Tok::Punct(';') {
                            test_mods.push(words[p + 1].to_string());
                        }
                    }
                    i = item;
                    continue;
                }
                i = end;
                continue;
            }
        }
        match &toks[i].0 {
            Tok::Ident(w) if w == "mod" => {
                if let (Some(name), Some((Tok::Punct('{'), _))) =
                    (ident(toks.get(i + 1)), toks.get(i + 2))
                {
                    inline.push((name.to_string(), close_of(&toks, i + 2)));
                    i += 3;
                    continue;
                }
            }
            Tok::Ident(w) if w == "crate" => {
                let after_dollar = i > 0 && toks[i - 1].0 == Tok::Punct('$');
                let line = toks[i].1;
                if !after_dollar && toks.get(i + 1).map(|t| &t.0) == Some(&Tok::Path) {
                    match toks.get(i + 2) {
                        Some((Tok::Ident(m), _)) => {
                            record(m, line, format!("crate::{m}"), &mut uses);
                            i += 3;
                            continue;
                        }
                        Some((Tok::Punct('{'), _)) => {
                            let (heads, end) = group_heads(&toks, i + 2);
                            for (m, line) in heads {
                                if m != "self" {
                                    record(&m, line, format!("crate::{{{m}, …}}"), &mut uses);
                                }
                            }
                            i = end;
                            continue;
                        }
                        _ => {}
                    }
                }
            }
            Tok::Ident(w) if w == "super" => {
                // super::super::…: how far up from this file's (or inline module's) path.
                let line = toks[i].1;
                let mut k = i;
                let mut ups = 0;
                while ident(toks.get(k)) == Some("super")
                    && toks.get(k + 1).map(|t| &t.0) == Some(&Tok::Path)
                {
                    ups += 1;
                    k += 2;
                }
                let depth = base.len() + inline.len();
                if ups > 0 && ups >= depth {
                    assert_eq!(ups, depth, "{file}:{line}: `super::` beyond the crate root");
                    let text = "super::".repeat(ups);
                    match toks.get(k) {
                        Some((Tok::Ident(m), _)) => {
                            record(m, line, format!("{text}{m}"), &mut uses)
                        }
                        Some((Tok::Punct('{'), _)) => {
                            let (heads, _) = group_heads(&toks, k);
                            for (m, line) in heads {
                                record(&m, line, format!("{text}{{{m}, …}}"), &mut uses);
                            }
                        }
                        _ => {}
                    }
                }
                if ups > 0 {
                    i = k;
                    continue;
                }
            }
            _ => {}
        }
        i += 1;
    }
    FileScan { uses, test_mods }
}

/// The top-level modules `src/lib.rs` declares (its `#[cfg(test)]` ones are test code).
fn lib_modules() -> BTreeSet<String> {
    let src = std::fs::read_to_string(root().join("src/lib.rs")).expect("src/lib.rs");
    let toks = lex(&src);
    let mut out = BTreeSet::new();
    let mut i = 0;
    while i < toks.len() {
        if toks[i].0 == Tok::Punct('#') && toks.get(i + 1).map(|t| &t.0) == Some(&Tok::Punct('[')) {
            let end = close_of(&toks, i + 1);
            let attr: Vec<Tok> = toks[i + 2..end - 1].iter().map(|t| t.0.clone()).collect();
            i = if is_cfg_test(&attr) {
                item_end(&toks, end)
            } else {
                end
            };
            continue;
        }
        if ident(toks.get(i)) == Some("mod") {
            if let Some(name) = ident(toks.get(i + 1)) {
                out.insert(name.to_string());
            }
        }
        i += 1;
    }
    out
}

/// The modules the binary's root, `src/main.rs`, declares (`cli`): the binary's own files,
/// which may use everything as main.rs may.
fn bin_modules() -> BTreeSet<String> {
    let src = std::fs::read_to_string(root().join("src/main.rs")).expect("src/main.rs");
    let toks = lex(&src);
    toks.windows(2)
        .filter(|w| ident(Some(&w[0])) == Some("mod"))
        .filter_map(|w| ident(Some(&w[1])).map(str::to_string))
        .collect()
}

/// Every path in src/ from one top-level module to another, outside test code and the binary.
fn crate_uses() -> Vec<Use> {
    let modules = lib_modules();
    let binary = bin_modules();
    let shared: Vec<_> = modules.intersection(&binary).collect();
    assert!(
        shared.is_empty(),
        "src/main.rs and src/lib.rs both declare {shared:?}"
    );
    let src = root().join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut scans = BTreeMap::new();
    for path in &files {
        let rel = path.strip_prefix(&src).expect("under src").to_path_buf();
        let text = std::fs::read_to_string(path).expect("a source file");
        // The crate roots: lib.rs declares the modules, main.rs is the binary (uses anything).
        if rel == Path::new("lib.rs") || rel == Path::new("main.rs") {
            continue;
        }
        let top = module_path(&rel)[0].clone();
        if binary.contains(&top) {
            continue;
        }
        if !modules.contains(&top) {
            // A `#[cfg(test)]` module of lib.rs (testing.rs).
            continue;
        }
        scans.insert(rel.clone(), scan_file(&rel, &text, &modules));
    }
    // The files of `#[cfg(test)] mod x;`, and everything under them, are test code.
    let mut test_dirs: Vec<Vec<String>> = Vec::new();
    for (rel, scan) in &scans {
        for m in &scan.test_mods {
            let mut p = module_path(rel);
            p.push(m.clone());
            test_dirs.push(p);
        }
    }
    let mut uses = Vec::new();
    for (rel, scan) in scans {
        let p = module_path(&rel);
        if test_dirs.iter().any(|t| p.starts_with(t)) {
            continue;
        }
        uses.extend(scan.uses);
    }
    uses
}

// ---------------------------------------------------------------------------------------------
// ARCHITECTURE.md's table.

/// One row of the module table: its module (`server`, `store/redis`; `main.rs` as `main`), and
/// the modules its "uses" column names (`None`: "everything").
#[derive(Debug)]
struct Row {
    module: String,
    uses: Option<Vec<String>>,
}

impl Row {
    /// The top-level module of the row (`store/redis` → `store`).
    fn top(&self) -> &str {
        self.module.split('/').next().expect("a name")
    }
}

/// Text without its parenthesized asides (nested ones too).
fn without_asides(s: &str) -> String {
    let mut depth = 0;
    let mut out = String::new();
    for c in s.chars() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            _ if depth == 0 => out.push(c),
            _ => {}
        }
    }
    out
}

fn table() -> Vec<Row> {
    let text = std::fs::read_to_string(root().join("ARCHITECTURE.md")).expect("ARCHITECTURE.md");
    let section = text
        .split("\n## Modules\n")
        .nth(1)
        .expect("ARCHITECTURE.md has a \"## Modules\" section");
    let mut lines = section.lines().skip_while(|l| !l.starts_with('|'));
    let header = lines.next().expect("a table under \"## Modules\"");
    let columns: Vec<&str> = header.trim_matches('|').split('|').map(str::trim).collect();
    assert_eq!(
        (columns.first(), columns.last()),
        (Some(&"module"), Some(&"uses")),
        "the module table's first column is `module` and its last `uses`: {header}"
    );
    let mut rows = Vec::new();
    for line in lines.skip(1).take_while(|l| l.starts_with('|')) {
        let cells: Vec<&str> = line.trim().trim_matches('|').split('|').collect();
        let module = cells[0].trim().trim_matches('`');
        let module = match module.strip_suffix(".rs") {
            Some(m) => m,
            None => module.strip_suffix('/').unwrap_or_else(|| {
                panic!("ARCHITECTURE.md: a module row names `x.rs` or `x/`, not {module:?}")
            }),
        };
        let uses = cells.last().expect("a uses cell").trim();
        let uses = match uses {
            "everything" => None,
            "—" | "-" | "" => Some(Vec::new()),
            _ => Some(
                without_asides(uses)
                    .split(',')
                    .map(|m| m.trim().to_string())
                    .inspect(|m| {
                        assert!(
                            !m.is_empty() && m.chars().all(|c| c.is_ascii_lowercase() || c == '_'),
                            "ARCHITECTURE.md: `{module}` uses {m:?}: the uses column is module \
                             names separated by commas, each with an aside in parentheses"
                        )
                    })
                    .collect(),
            ),
        };
        rows.push(Row {
            module: module.to_string(),
            uses,
        });
    }
    assert!(rows.len() > 5, "ARCHITECTURE.md's module table has rows");
    rows
}

/// Each top-level module's allowed uses, by the table (its rows and sub-rows together).
fn allowed(rows: &[Row]) -> BTreeMap<String, BTreeSet<String>> {
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for row in rows {
        let set = out.entry(row.top().to_string()).or_default();
        for m in row.uses.iter().flatten() {
            if m != row.top() {
                set.insert(m.clone());
            }
        }
    }
    out
}

// ---------------------------------------------------------------------------------------------

#[test]
fn the_table_names_every_module_once_and_uses_only_modules_below_each() {
    let rows = table();
    let modules = lib_modules();
    let mut problems = Vec::new();
    assert_eq!(
        rows[0].module, "main",
        "the binary, `main.rs`, heads the table"
    );
    assert!(rows[0].uses.is_none(), "`main.rs` uses everything");
    let tops: Vec<&str> = rows[1..]
        .iter()
        .filter(|r| !r.module.contains('/'))
        .map(Row::top)
        .collect();
    let listed: BTreeSet<String> = tops.iter().map(|s| s.to_string()).collect();
    if tops.len() != listed.len() {
        problems.push(format!("a module has two rows: {tops:?}"));
    }
    for m in modules.difference(&listed) {
        problems.push(format!("src/lib.rs declares `{m}`, which the table lacks"));
    }
    for m in listed.difference(&modules) {
        problems.push(format!(
            "the table lists `{m}`, which src/lib.rs does not declare"
        ));
    }
    for row in &rows[1..] {
        if row.module.contains('/') && !listed.contains(row.top()) {
            problems.push(format!("`{}/` is a sub-row of no module row", row.module));
        }
    }
    // A module's position is its first row's.
    let position = |m: &str| rows.iter().position(|r| r.top() == m);
    for (k, row) in rows.iter().enumerate().skip(1) {
        let Some(uses) = &row.uses else {
            problems.push(format!(
                "`{}` uses \"everything\": only main.rs may",
                row.module
            ));
            continue;
        };
        let at = position(row.top()).unwrap_or(k);
        for m in uses {
            match position(m) {
                None => problems.push(format!("`{}` uses `{m}`, which has no row", row.module)),
                Some(p) if m == row.top() => {
                    if !row.module.contains('/') {
                        problems.push(format!("`{}` lists itself", row.module));
                    }
                    let _ = p;
                }
                Some(p) if p <= at => problems.push(format!(
                    "`{}` uses `{m}`, which the table lists above it: the table allows a cycle",
                    row.module
                )),
                Some(_) => {}
            }
        }
    }
    assert!(
        problems.is_empty(),
        "ARCHITECTURE.md's module table:\n{}",
        problems.join("\n")
    );
}

#[test]
fn every_path_between_top_level_modules_is_one_the_table_allows() {
    let rows = table();
    let allowed = allowed(&rows);
    let uses = crate_uses();
    assert!(
        uses.len() > 100,
        "the scan found the crate's paths ({} of them)",
        uses.len()
    );
    let mut problems = Vec::new();
    for u in &uses {
        let ok = allowed.get(&u.from).is_some_and(|a| a.contains(&u.to));
        if !ok {
            problems.push(format!(
                "{}:{}: `{}`: {} → {} is not in ARCHITECTURE.md's table (a module uses only the \
                 modules below it)",
                u.file, u.line, u.text, u.from, u.to
            ));
        }
    }
    // And the table says no more than the code does.
    let made: BTreeSet<(&str, &str)> = uses
        .iter()
        .map(|u| (u.from.as_str(), u.to.as_str()))
        .collect();
    for (from, tos) in &allowed {
        if from == "main" {
            continue;
        }
        for to in tos {
            if !made.contains(&(from.as_str(), to.as_str())) {
                problems.push(format!(
                    "ARCHITECTURE.md says `{from}` uses `{to}`, but no file of {from} (outside \
                     its unit tests) names crate::{to}"
                ));
            }
        }
    }
    assert!(
        problems.is_empty(),
        "{} layering problems:\n{}",
        problems.len(),
        problems.join("\n")
    );
}

#[test]
fn no_cycle_between_top_level_modules() {
    let uses = crate_uses();
    // The first place each edge is made.
    let mut edges: BTreeMap<(&str, &str), &Use> = BTreeMap::new();
    for u in &uses {
        edges.entry((u.from.as_str(), u.to.as_str())).or_insert(u);
    }
    let mut next: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (from, to) in edges.keys() {
        next.entry(from).or_default().push(to);
    }
    // For each edge a → b, a path b → … → a closes a cycle; each cycle is reported once, by the
    // set of its edges.
    let mut seen = BTreeSet::new();
    let mut cycles = Vec::new();
    for &(a, b) in edges.keys() {
        // Breadth-first from b to a.
        let mut back: BTreeMap<&str, &str> = BTreeMap::new();
        let mut queue = std::collections::VecDeque::from([b]);
        let mut found = b == a;
        while let Some(n) = queue.pop_front() {
            if n == a {
                found = true;
                break;
            }
            for &m in next.get(n).into_iter().flatten() {
                if m != b && !back.contains_key(m) {
                    back.insert(m, n);
                    queue.push_back(m);
                }
            }
        }
        if !found {
            continue;
        }
        let mut path = vec![a];
        let mut n = a;
        while n != b {
            n = back[n];
            path.push(n);
        }
        path.reverse(); // b … a
        let mut cycle = vec![a];
        cycle.extend(path);
        let mut key: Vec<(&str, &str)> = cycle.windows(2).map(|w| (w[0], w[1])).collect();
        key.sort();
        if !seen.insert(key) {
            continue;
        }
        let steps: Vec<String> = cycle
            .windows(2)
            .map(|w| {
                let u = edges[&(w[0], w[1])];
                format!("  {} → {}: {}:{} `{}`", w[0], w[1], u.file, u.line, u.text)
            })
            .collect();
        cycles.push(format!("{}\n{}", cycle.join(" → "), steps.join("\n")));
    }
    assert!(
        cycles.is_empty(),
        "cycles between top-level modules:\n{}",
        cycles.join("\n")
    );
}

/// The scanner itself: what it reads as a path, and what it does not.
#[test]
fn the_scanner_reads_paths_and_skips_comments_strings_and_tests() {
    let modules: BTreeSet<String> = ["a", "b", "c", "d", "e"].map(String::from).into();
    let src = r####"
use crate::b::X; // crate::c::Y in a comment
/* crate::c::Z */
const S: &str = "crate::c::W";
const R: &str = r#"crate::c::V"#;
const C: char = '"'; const L: &'static str = ""; const Q: char = '\''; const D: u8 = b'"';
fn f() { let _ = crate::{d::Q, b::P}; let _ = super::super::e::T; }
pub(in crate::a) fn g() {}
#[cfg(test)]
mod tests { use crate::c::Test; }
#[cfg(test)]
mod fixtures;
mod inner { use super::super::super::super::e::U; }
"####;
    let scan = scan_file(Path::new("a/x/y.rs"), src, &modules);
    let got: Vec<(usize, &str)> = scan.uses.iter().map(|u| (u.line, u.to.as_str())).collect();
    assert_eq!(got, [(2, "b"), (7, "d"), (7, "b"), (13, "e")]);
    assert_eq!(scan.test_mods, ["fixtures"]);
    // super::super from a/x/y.rs is `a`'s own: not an edge (line 7's `super::super::e` stays
    // inside a).
}
