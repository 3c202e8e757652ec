//! `shrike rules list`: the effective rule set, as a table or JSON lines.

use std::io::{self, BufWriter, Write};
use std::process::ExitCode;

use anyhow::Context;

use shrike::config::Config;
use shrike::scan::Scanner;

use crate::cli::RuleArgs;

pub fn run(config: &Config, args: &RuleArgs, json: bool) -> anyhow::Result<ExitCode> {
    let location = args.location(config)?;
    let scanner = Scanner::in_memory(&config.scan_settings(), &config.store, location.clone())
        .with_context(|| format!("loading {}", location.describe()))?;
    let generation = scanner.engine().generation();
    let listed = shrike::engine::overlay::list(&generation);
    let stdout = io::stdout();
    let mut out = BufWriter::new(stdout.lock());
    if json {
        for l in &listed {
            serde_json::to_writer(&mut out, l).context("writing output")?;
            out.write_all(b"\n").context("writing output")?;
        }
    } else {
        let width = listed
            .iter()
            .map(|l| l.symbol.len())
            .max()
            .unwrap_or(6)
            .max(6);
        writeln!(
            out,
            "{:width$}  {:>7}  {:<8}  SOURCE  (OVERRIDDEN BY)",
            "SYMBOL", "SCORE", "STATE"
        )?;
        for l in &listed {
            let state = if l.enabled { "on" } else { "off" };
            write!(
                out,
                "{:width$}  {:>7}  {:<8}  {}",
                l.symbol, l.score, state, l.source
            )?;
            if !l.overridden.is_empty() {
                write!(out, "  ({})", l.overridden.join("; "))?;
            }
            writeln!(out)?;
        }
        for f in &generation.features {
            writeln!(
                out,
                "feature {}: {} over {} ({})",
                f.name,
                format!("{:?}", f.kind).to_lowercase(),
                f.window,
                f.file
            )?;
        }
        let on = listed.iter().filter(|l| l.enabled).count();
        writeln!(
            out,
            "{} symbols ({} on, {} off) from {}",
            listed.len(),
            on,
            listed.len() - on,
            location.describe()
        )?;
    }
    out.flush().context("writing output")?;
    for name in generation.overrides.unknown(&generation.declared) {
        eprintln!("shrike: warning: {name} is in [scores] or [rules] but no rule declares it");
    }
    Ok(ExitCode::SUCCESS)
}
