//! docs/deploy.md against what runs: every configuration block names the test that uses it (and
//! that test reads the guide), and every `toml` block is a configuration `shrike config check`
//! accepts as it stands.

#[allow(dead_code)]
#[path = "common/deploy.rs"]
mod deploy;

use std::path::Path;
use std::process::Command;

#[test]
fn every_configuration_block_is_used_by_a_test_that_reads_the_guide() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let blocks = deploy::blocks();
    assert!(blocks.len() >= 10, "{} blocks", blocks.len());
    for b in &blocks {
        if b.lang == "sh" {
            continue; // commands to type, not configuration
        }
        let test = b
            .test
            .as_deref()
            .unwrap_or_else(|| panic!("a {} block without a test note:\n{}", b.lang, b.text));
        let file = test.split_whitespace().next().unwrap();
        let source = std::fs::read_to_string(root.join(file))
            .unwrap_or_else(|e| panic!("{file} (named by a {} block): {e}", b.lang));
        assert!(
            source.contains("deploy.md") || source.contains("common/deploy.rs"),
            "{file} does not read docs/deploy.md, yet its {} block says it is tested there",
            b.lang
        );
    }
}

#[test]
fn every_toml_block_passes_config_check() {
    let dir = tempfile::tempdir().unwrap();
    let mut n = 0;
    for b in deploy::blocks().into_iter().filter(|b| b.lang == "toml") {
        let path = dir.path().join(format!("{n}.toml"));
        std::fs::write(&path, &b.text).unwrap();
        let o = Command::new(env!("CARGO_BIN_EXE_shrike"))
            .arg("--config")
            .arg(&path)
            .args(["config", "check"])
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "{}\n{}",
            b.text,
            String::from_utf8_lossy(&o.stderr)
        );
        n += 1;
    }
    assert!(n >= 5, "{n} toml blocks");
}
