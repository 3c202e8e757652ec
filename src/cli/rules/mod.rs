//! `shrike rules check|list`.

pub mod check;
pub mod list;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Subcommand;

use shrike::config::Config;

use super::RuleArgs;

#[derive(Subcommand)]
pub enum RulesCommand {
    /// Load a rule directory over the shipped set, validate its declarations, lint it with
    /// luacheck when installed and run its tests.
    Check {
        /// The rule directory.
        #[arg(value_name = "DIR")]
        dir: PathBuf,
        /// Directory of `*.test` files (default: DIR/tests when it exists).
        #[arg(long, value_name = "DIR")]
        tests: Option<PathBuf>,
        /// Check DIR alone, not laid over the shipped rules.
        #[arg(long)]
        no_default_rules: bool,
    },
    /// Print the effective rule set: every symbol, its score, the file it comes from (shipped
    /// or local) and what overrode it (a replaced file, `[scores]`, `[rules] disabled`).
    List {
        #[command(flatten)]
        rules: RuleArgs,
        /// One JSON object per symbol instead of a table.
        #[arg(long)]
        json: bool,
        /// The set as recipients under this `[[settings]]` entry get it: its scores and
        /// switched-off symbols over the global ones, and its thresholds.
        #[arg(long, value_name = "NAME")]
        settings: Option<String>,
    },
}

pub fn run(config: &Config, cmd: RulesCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        RulesCommand::Check {
            dir,
            tests,
            no_default_rules,
        } => check::run(config, dir, tests, no_default_rules),
        RulesCommand::List {
            rules,
            json,
            settings,
        } => list::run(config, &rules, json, settings.as_deref()),
    }
}
