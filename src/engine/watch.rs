//! Hot reload on change: watches a rule directory (notify, debounced) and reloads the engine
//! when files settle. Drop the `RuleWatcher` to stop watching.

use std::sync::Arc;
use std::time::Duration;

use notify_debouncer_mini::notify::{RecommendedWatcher, RecursiveMode};
use notify_debouncer_mini::{new_debouncer, DebounceEventResult, Debouncer};

use super::Engine;

/// A running watcher.
pub struct RuleWatcher {
    _debouncer: Debouncer<RecommendedWatcher>,
}

impl std::fmt::Debug for RuleWatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RuleWatcher")
    }
}

/// Starts watching the engine's rule directory (and its library directory). `None` for the
/// embedded rules, which cannot change.
pub fn watch(engine: &Arc<Engine>) -> Result<Option<RuleWatcher>, String> {
    let paths = engine.location().watch_paths();
    if paths.is_empty() {
        return Ok(None);
    }
    let target = Arc::downgrade(engine);
    let debounce = Duration::from_millis(engine.config().reload_debounce_ms.max(10));
    let mut debouncer = new_debouncer(debounce, move |res: DebounceEventResult| {
        let Some(engine) = target.upgrade() else {
            return;
        };
        match res {
            Ok(events) => {
                tracing::info!(changes = events.len(), "rule files changed; reloading");
                // Errors are logged and kept for health by `reload`.
                let _ = engine.reload();
            }
            Err(e) => tracing::warn!(error = %e, "rule directory watch error"),
        }
    })
    .map_err(|e| format!("cannot watch rules: {e}"))?;
    for p in &paths {
        debouncer
            .watcher()
            .watch(p, RecursiveMode::Recursive)
            .map_err(|e| format!("cannot watch {}: {e}", p.display()))?;
    }
    Ok(Some(RuleWatcher {
        _debouncer: debouncer,
    }))
}
