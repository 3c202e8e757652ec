//! The engine's options: `[engine]` of the configuration (CPU budgets, memory, caches) and
//! their checks.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// Limits and knobs of the Lua side.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EngineConfig {
    /// CPU time one rule may use per message (and a rule file's top-level code at load), ms.
    pub rule_cpu_ms: u64,
    /// CPU time all rules of one message together may use, ms.
    pub message_cpu_ms: u64,
    /// Memory limit of each Lua state, MiB.
    pub memory_limit_mb: usize,
    /// Compiled regular expressions cached per Lua state.
    pub regex_cache: usize,
    /// Log lines rules may write per second and state; more are counted and dropped.
    pub log_lines_per_sec: u32,
    /// Bytes of HTML source `msg:html()` returns at most.
    pub max_html_bytes: usize,
    /// Quiet period after a change in a watched rule directory before reloading, ms.
    pub reload_debounce_ms: u64,
    /// Local rule directories laid over the shipped set, in order (later ones win); `--rules`
    /// adds one after them.
    pub rules_dirs: Vec<PathBuf>,
    /// Whether the shipped rules are the first layer (`--no-default-rules` turns them off).
    pub default_rules: bool,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            rule_cpu_ms: 20,
            message_cpu_ms: 100,
            memory_limit_mb: 64,
            regex_cache: 512,
            log_lines_per_sec: 20,
            max_html_bytes: 1024 * 1024,
            reload_debounce_ms: 200,
            rules_dirs: Vec::new(),
            default_rules: true,
        }
    }
}

/// Why the `[engine]` options cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EngineConfigError {
    #[error("engine budgets and memory limit must be greater than 0")]
    ZeroBudget,
}

impl EngineConfig {
    /// Checks values that parse but make no sense.
    pub fn validate(&self) -> Result<(), EngineConfigError> {
        if self.rule_cpu_ms == 0 || self.message_cpu_ms == 0 || self.memory_limit_mb == 0 {
            return Err(EngineConfigError::ZeroBudget);
        }
        Ok(())
    }
}
