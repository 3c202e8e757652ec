//! `shrike rules check`: a rule directory loaded, linted with luacheck, its tests run, the
//! negative tests' near misses and the patterns' backtracking checked.

use std::io;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;

use shrike::config::Config;
use shrike::engine::RuleLocation;
use shrike::scan::{ruletest, Scanner};

pub fn run(
    config: &Config,
    dir: PathBuf,
    tests: Option<PathBuf>,
    no_default_rules: bool,
) -> anyhow::Result<ExitCode> {
    let location =
        RuleLocation::layered(!no_default_rules, vec![dir.clone()]).context("no rule directory")?;
    let settings = config.scan_settings();
    let scanner = match Scanner::in_memory(&settings, &config.store, location.clone()) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("shrike: {}: {e}", dir.display());
            return Ok(ExitCode::from(1));
        }
    };
    let generation = scanner.engine().generation();
    let symbols: usize = generation.rules.iter().map(|r| r.symbols.len()).sum();
    println!(
        "{}: {} rules, {} symbols, {} library modules, {} lists: ok",
        dir.display(),
        generation.rules.len(),
        symbols,
        generation.sources.modules.len(),
        generation.sources.lists.by_name.len()
    );
    let linted = luacheck(&dir);
    let tests = tests.or_else(|| Some(dir.join("tests")).filter(|t| t.is_dir()));
    let Some(tests) = tests else {
        return Ok(if linted {
            ExitCode::SUCCESS
        } else {
            ExitCode::from(1)
        });
    };
    let (results, patterns) = shrike::engine::patterns::recording(|| {
        ruletest::run_dir_traced(&settings, &config.store, &location, &tests)
    });
    let results = match results {
        Ok(r) => r,
        Err(e) => {
            eprintln!("shrike: {e}");
            return Ok(ExitCode::from(1));
        }
    };
    let mut failed = 0;
    for r in &results {
        if r.failures.is_empty() {
            println!("ok   {}", r.file.display());
        } else {
            failed += 1;
            for f in &r.failures {
                println!("FAIL {}: {f}", r.file.display());
            }
        }
    }
    println!(
        "{} tests, {} passed, {} failed",
        results.len(),
        results.len() - failed,
        failed
    );
    // Negative tests that could not fail: a warning, not a failure.
    match shrike::scan::nearmiss::weak_negatives(&settings, &config.store, &location, &results) {
        Ok(weak) => {
            for w in &weak {
                println!(
                    "warn {}: its {} expect-not test(s) stop where plain mail stops in rule {} \
                     ({}); add a near miss, a message with the trigger in a harmless form that \
                     runs one of lines {}",
                    w.symbol,
                    w.negatives,
                    w.rule,
                    w.file,
                    shrike::scan::nearmiss::ranges(&w.interesting)
                );
            }
            if !weak.is_empty() {
                println!("{} symbols without a near-miss negative test", weak.len());
            }
        }
        Err(e) => eprintln!("shrike: cannot check the negative tests: {e}"),
    }
    if results.is_empty() {
        eprintln!("shrike: no *.test files in {}", tests.display());
        return Ok(ExitCode::from(1));
    }
    // What the tests ran, and every pattern-like literal of the set's files (paths the tests
    // do not reach).
    let mut patterns = patterns;
    for file in generation
        .sources
        .rules
        .iter()
        .chain(generation.sources.modules.values())
    {
        for p in shrike::engine::patterns::literals(&file.text) {
            if !patterns.contains(&p) {
                patterns.push(p);
            }
        }
    }
    let costly = costly_patterns(&patterns);
    Ok(if failed == 0 && linted && costly == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// Measures the Lua patterns the tests ran (`engine::patterns`) and prints those whose work
/// grows faster than their input: a sender can make each cost seconds, and the budget that
/// stops it skips the rule. How many there are.
fn costly_patterns(patterns: &[Vec<u8>]) -> usize {
    let costs = match shrike::engine::patterns::measure(patterns) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("shrike: cannot measure the rules' patterns: {e}");
            return 0;
        }
    };
    let costly: Vec<_> = costs.iter().filter(|c| c.super_linear()).collect();
    for c in &costly {
        println!(
            "FAIL pattern {:?} backtracks: {} steps on {} ({} on a quarter of it{}); rewrite it \
             so each character is tried a bounded number of times",
            c.pattern,
            c.steps_long,
            c.input,
            c.steps_short,
            if c.capped { ", stopped at the cap" } else { "" }
        );
    }
    println!(
        "{} patterns measured, {} super-linear",
        costs.len(),
        costly.len()
    );
    costly.len()
}

/// Lints the rule directory with luacheck when it is installed (Debian's `lua-check`): its
/// warnings are printed and fail the check. Run in DIR, so a `.luacheckrc` there applies;
/// shrike's globals and Lua 5.4 are given on the command line. True when clean or not run.
fn luacheck(dir: &std::path::Path) -> bool {
    let mut cmd = std::process::Command::new("luacheck");
    cmd.current_dir(dir)
        .args([
            "--no-color",
            "--codes",
            "--std",
            "lua54",
            "--no-unused-args",
        ])
        .args([
            "--no-max-line-length",
            "--exclude-files",
            "tests/**",
            "--read-globals",
        ])
        .args(shrike::engine::SANDBOX_GLOBALS)
        .arg("--")
        .arg(".");
    match cmd.output() {
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            println!("luacheck: not installed (Debian: lua-check); lint skipped");
            true
        }
        Err(e) => {
            eprintln!("shrike: cannot run luacheck: {e}");
            false
        }
        Ok(out) => {
            let text = String::from_utf8_lossy(&out.stdout);
            if out.status.success() {
                println!("luacheck: ok");
                return true;
            }
            for line in text.lines().filter(|l| l.starts_with("    ")) {
                println!("luacheck {}", line.trim());
            }
            if let Some(total) = text.lines().find(|l| l.starts_with("Total:")) {
                println!("luacheck: {total}");
            }
            false
        }
    }
}
