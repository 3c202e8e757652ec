//! `shrike rules list`: the effective rule set, as a table or JSON lines.

use std::io::{self, BufWriter, Write};
use std::process::ExitCode;

use anyhow::Context;

use shrike::config::Config;
use shrike::scan::Scanner;

use crate::cli::RuleArgs;

pub fn run(
    config: &Config,
    args: &RuleArgs,
    json: bool,
    settings: Option<&str>,
) -> anyhow::Result<ExitCode> {
    let location = args.location(config)?;
    let scanner = Scanner::in_memory(&config.scan_settings(), &config.store, location.clone())
        .with_context(|| format!("loading {}", location.describe()))?;
    let generation = scanner.engine().generation();
    let table = &generation.overrides.settings;
    let profile = match settings {
        None => None,
        Some(name) => {
            let names: Vec<&str> = table.profiles().iter().map(|p| p.name.as_str()).collect();
            let index = table.by_name(name).with_context(|| {
                if names.is_empty() {
                    format!("no settings entry named {name:?}: the configuration has none")
                } else {
                    format!(
                        "no settings entry named {name:?} (the configuration has {})",
                        names.join(", ")
                    )
                }
            })?;
            table.profile(index)
        }
    };
    let listed = shrike::engine::overlay::list_for(&generation, profile);
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
        if let Some(p) = profile {
            let thresholds: Vec<String> = p
                .verdict
                .thresholds()
                .into_iter()
                .map(|(action, at)| format!("{action} at {at}"))
                .collect();
            writeln!(out, "settings \"{}\": {}", p.name, thresholds.join(", "))?;
            for (what, list) in [("allow_senders", &p.allow), ("deny_senders", &p.deny)] {
                if !list.is_empty() {
                    writeln!(out, "settings \"{}\": {what} {}", p.name, list.describe())?;
                }
            }
        }
    }
    out.flush().context("writing output")?;
    for name in generation.overrides.unknown(&generation.declared) {
        eprintln!("shrike: warning: {name} is in [scores] or [rules] but no rule declares it");
    }
    Ok(ExitCode::SUCCESS)
}
