//! The subcommands' handlers, one file each; `main.rs` parses the command line and calls them.
//! Each takes the loaded configuration and its own parsed arguments, and returns the exit code.

pub mod config;
pub mod dkim;
pub mod history;
pub mod learn;
pub mod passwd;
pub mod quarantine;
pub mod replay;
pub mod rules;
pub mod scan;
pub mod serve;
pub mod store;

use std::path::PathBuf;

use anyhow::Context;

use shrike::config::Config;
use shrike::engine::RuleLocation;

/// Which rules to load: the shipped set with local directories over it.
#[derive(clap::Args, Clone, Default)]
pub struct RuleArgs {
    /// Local rule directory laid over the shipped rules (a file of the same name replaces the
    /// shipped one, others add to the set), after `[engine] rules_dirs`; repeatable.
    #[arg(long, value_name = "DIR")]
    pub rules: Vec<PathBuf>,
    /// Leave out the shipped rules: only the --rules directories.
    #[arg(long)]
    pub no_default_rules: bool,
}

impl RuleArgs {
    /// The location the configuration and these flags name.
    pub fn location(&self, config: &Config) -> anyhow::Result<RuleLocation> {
        let mut dirs = config.engine.rules_dirs.clone();
        dirs.extend(self.rules.iter().cloned());
        let shipped = config.engine.default_rules && !self.no_default_rules;
        RuleLocation::layered(shipped, dirs).context(
            "--no-default-rules (or [engine] default_rules = false) needs a rule directory",
        )
    }
}
