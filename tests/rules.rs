//! The default rule set (`rules/`, with `lua/`) passes its own tests (`tests/rules/*.test`):
//! every symbol has a message that hits it and one that does not.

use std::collections::BTreeSet;
use std::path::Path;

use shrike::config::Config;
use shrike::engine::RuleLocation;
use shrike::scan::ruletest;

#[test]
fn default_rules_pass_their_tests_and_every_symbol_is_tested_both_ways() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let location = RuleLocation::Dir(root.join("rules"));
    let config = Config::default();
    let results = ruletest::run_dir(
        &config.scan_settings(),
        &config.store,
        &location,
        &root.join("tests/rules"),
    )
    .expect("rules load");
    assert!(results.len() >= 10, "rule tests found: {}", results.len());
    let failures: Vec<String> = results
        .iter()
        .flat_map(|r| {
            r.failures
                .iter()
                .map(move |f| format!("{}: {f}", r.file.display()))
        })
        .collect();
    assert!(
        failures.is_empty(),
        "rule test failures:\n{}",
        failures.join("\n")
    );

    // Coverage: each declared symbol is expected somewhere and expected-not somewhere.
    let store: std::sync::Arc<dyn shrike::store::ReputationStore> = std::sync::Arc::new(
        shrike::store::Store::new(
            &config.store,
            std::sync::Arc::new(shrike::store::SystemClock),
        )
        .unwrap(),
    );
    let scanner = shrike::scan::Scanner::new(&config.scan_settings(), location, store).unwrap();
    let generation = scanner.engine().generation();
    let (mut hit, mut miss) = (BTreeSet::new(), BTreeSet::new());
    for r in &results {
        let t = ruletest::parse(&std::fs::read(&r.file).unwrap()).unwrap();
        hit.extend(t.expect);
        miss.extend(t.expect_not);
    }
    let mut untested = Vec::new();
    for rule in &generation.rules {
        for s in &rule.symbols {
            if !hit.contains(&s.name) || !miss.contains(&s.name) {
                untested.push(s.name.clone());
            }
        }
    }
    assert!(
        untested.is_empty(),
        "symbols without a hitting and a non-hitting test: {untested:?}"
    );
}
