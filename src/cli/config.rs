//! `shrike config defaults|check`.

use std::io::{self, Write};
use std::process::ExitCode;

use anyhow::Context;
use clap::Subcommand;

use shrike::config::Config;
use shrike::scan::Scanner;

use super::RuleArgs;

#[derive(Subcommand)]
pub enum ConfigCommand {
    /// Print every option with its default as commented TOML (docs/shrike.toml); options
    /// without a default are printed commented out, with an example value.
    Defaults,
    /// Validate the file given with --config (or the defaults) and the rule set it names
    /// (with --rules as `serve` takes them), and print the configuration as used, with every
    /// password shown as ***. Exits 1 on the first problem, before anything would start
    /// (systemd's ExecStartPre).
    Check {
        #[command(flatten)]
        rules: RuleArgs,
    },
}

pub fn run(config: &Config, cmd: ConfigCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        ConfigCommand::Defaults => {
            let mut out = io::stdout().lock();
            out.write_all(shrike::config::REFERENCE.as_bytes())?;
            out.flush()?;
            Ok(ExitCode::SUCCESS)
        }
        ConfigCommand::Check { rules } => {
            let location = rules.location(config)?;
            let scanner = Scanner::in_memory(&config.scan_settings(), &config.store, location)
                .context("loading the rule set")?;
            let generation = scanner.engine().generation();
            eprintln!(
                "shrike: configuration and rule set ok: {} rules",
                generation.rules.len()
            );
            let text = toml::to_string(&config.redacted()).context("encoding the configuration")?;
            let mut out = io::stdout().lock();
            out.write_all(text.as_bytes())?;
            out.flush()?;
            Ok(ExitCode::SUCCESS)
        }
    }
}
