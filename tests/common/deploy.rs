// docs/deploy.md's configuration blocks, for the tests that run them: each block is preceded by
// `<!-- test: WHO -->` naming the test that uses it, so that the guide shows only what is run.

use std::path::Path;

/// One fenced block of the guide.
pub struct Block {
    /// The `<!-- test: … -->` line's text before it, if any.
    pub test: Option<String>,
    /// The fence's info string (`toml`, `nginx`, `sh`, …).
    pub lang: String,
    pub text: String,
}

pub fn blocks() -> Vec<Block> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/deploy.md");
    let guide = std::fs::read_to_string(&path).expect("docs/deploy.md");
    let mut out = Vec::new();
    let mut test = None;
    let mut open: Option<Block> = None;
    for line in guide.lines() {
        if let Some(block) = open.as_mut() {
            if line == "```" {
                out.push(open.take().unwrap());
            } else {
                block.text.push_str(line);
                block.text.push('\n');
            }
        } else if let Some(lang) = line.strip_prefix("```") {
            open = Some(Block {
                test: test.take(),
                lang: lang.to_string(),
                text: String::new(),
            });
        } else if let Some(rest) = line.strip_prefix("<!-- test: ") {
            test = Some(rest.trim_end_matches("-->").trim().to_string());
        } else if !line.trim().is_empty() {
            test = None;
        }
    }
    assert!(open.is_none(), "docs/deploy.md: a block is not closed");
    out
}

/// The one block in `lang` whose test note names `user` (a test file, e.g. `tests/access.rs`).
pub fn snippet(lang: &str, user: &str) -> String {
    let found: Vec<Block> = blocks()
        .into_iter()
        .filter(|b| b.lang == lang && b.test.as_deref().is_some_and(|t| t.starts_with(user)))
        .collect();
    assert_eq!(
        found.len(),
        1,
        "docs/deploy.md: one {lang} block for {user} expected"
    );
    found.into_iter().next().unwrap().text
}
