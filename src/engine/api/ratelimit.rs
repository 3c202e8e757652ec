//! `ratelimit(name, value, limit, window)`: counters in the reputation store.

use std::cell::Cell;
use std::rc::Rc;
use std::sync::Arc;

use mlua::Value;

use crate::engine::RATELIMIT_KIND;
use crate::shingle::hash_pair;
use crate::store::{ReputationStore, StoreKey};

/// What `ratelimit` counts in: the store and the generation's namespace.
pub(in crate::engine) struct RateLimiter {
    pub(in crate::engine) store: Arc<dyn ReputationStore>,
    pub(in crate::engine) namespace: u8,
    /// `ScanCtx::observe`: a learn's scan reads the counters without counting.
    pub(in crate::engine) observe: Rc<Cell<bool>>,
}

impl RateLimiter {
    /// One hit of `value` under `name`, over a `window` of seconds (> 0).
    pub(in crate::engine) fn hit(
        &self,
        name: &str,
        value: &str,
        limit: u64,
        window: u64,
    ) -> crate::store::RateResult {
        let key = StoreKey {
            namespace: self.namespace,
            kind: RATELIMIT_KIND,
            hash: hash_pair(name, value),
        };
        if self.observe.get() {
            self.store.peek_rate(key, limit, window)
        } else {
            self.store.hit(key, limit, window)
        }
    }

    /// `ratelimit(name, value, limit, window)` from Lua values: the slow path of the raw
    /// function, which converts the value or rejects it.
    pub(in crate::engine) fn call(
        &self,
        name: &mlua::String,
        value: Value,
        limit: u64,
        window: u64,
    ) -> mlua::Result<(u64, bool)> {
        let value = match value {
            Value::String(s) => s.to_string_lossy(),
            Value::Integer(i) => i.to_string(),
            Value::Number(n) => n.to_string(),
            Value::Nil => String::new(),
            other => {
                return Err(mlua::Error::runtime(format!(
                    "ratelimit: value must be a string, got {}",
                    other.type_name()
                )))
            }
        };
        if window == 0 {
            return Err(mlua::Error::runtime("ratelimit: window must be > 0"));
        }
        let r = self.hit(&name.to_string_lossy(), &value, limit, window);
        Ok((r.count, r.over))
    }
}
