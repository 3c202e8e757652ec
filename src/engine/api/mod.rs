//! The rule-author API's Rust side (docs/rules.md): the primitives the prelude wraps into the
//! sandbox's `re`, `list`, `ratelimit`, `log`, `require`, `rule`, `char_counts` and
//! `is_private_ip`. Their raw fast paths live in `ffi/api.rs`; `msg` is `view/` with
//! `ffi/fields.rs`.

pub(super) mod phrases;
pub(super) mod ratelimit;
pub(super) mod regex;
pub(super) mod text;

use std::collections::HashMap;
use std::rc::Rc;
use std::sync::Arc;

use mlua::{AnyUserData, Lua, Table, UserData, UserDataMethods, Value};

use super::declare::declaration;
use super::ffi;
use super::lists::List;
use super::phrases::PhraseSets;
use super::source::Sources;
use super::state::{BuildEnv, StateCtx};

/// Puts the API's primitives into `rust`, the table the prelude receives.
pub(super) fn install(
    lua: &Lua,
    ctx: &Rc<StateCtx>,
    rust: &Table,
    sources: &Sources,
    env: &BuildEnv<'_>,
) -> mlua::Result<()> {
    let c = Rc::clone(ctx);
    rust.raw_set(
        "stopped",
        lua.create_function(move |_, ()| Ok(c.preempt.stopping()))?,
    )?;
    let c = Rc::clone(ctx);
    rust.raw_set(
        "log",
        lua.create_function(move |_, (level, text): (u8, mlua::String)| {
            if let Some(dropped) = c.log_permit() {
                let rule = c.rule_name();
                let text = text.to_string_lossy();
                let generation = c.generation.as_ref().map_or(0, |g| g.id);
                // The `rule` span nests in the worker's `scan` span (queue id) and that in the
                // connection's. Made only when a rule logs: a span per rule run would cost
                // more than most rules.
                tracing::info_span!("rule", name = %rule).in_scope(|| match level {
                    1 => tracing::error!(dropped, generation, "{text}"),
                    2 => tracing::warn!(dropped, generation, "{text}"),
                    3 => tracing::info!(dropped, generation, "{text}"),
                    _ => tracing::debug!(dropped, generation, "{text}"),
                });
            }
            Ok(())
        })?,
    )?;

    let c = Rc::clone(ctx);
    rust.raw_set(
        "re_match",
        lua.create_function(move |_, (p, t): (mlua::String, mlua::String)| {
            let re = c.regex(&p.to_str()?)?;
            Ok(re.is_match(&t.as_bytes()))
        })?,
    )?;
    let c = Rc::clone(ctx);
    rust.raw_set(
        "re_find",
        lua.create_function(move |_, (p, t): (mlua::String, mlua::String)| {
            let re = c.regex(&p.to_str()?)?;
            Ok(regex::find(&re, &t))
        })?,
    )?;
    let c = Rc::clone(ctx);
    rust.raw_set(
        "re_captures",
        lua.create_function(move |lua, (p, t): (mlua::String, mlua::String)| {
            let re = c.regex(&p.to_str()?)?;
            regex::captures(lua, &re, &t)
        })?,
    )?;
    ffi::char_counts_functions(lua, rust)?;
    let c = Rc::clone(ctx);
    rust.raw_set(
        "re_compile",
        lua.create_function(move |lua, p: mlua::String| {
            let re = c.regex(&p.to_str()?)?;
            ffi::compiled_regex(lua, re, c.memory_limit)
        })?,
    )?;
    let c = Rc::clone(ctx);
    rust.raw_set(
        "re_phrases",
        lua.create_function(move |lua, lists: Table| {
            // Read through metamethods: the lists may be a module's read-only views.
            let phrases: Vec<Vec<Vec<u8>>> = sequence(&lists)?
                .iter()
                .map(|l| match l {
                    Value::Table(t) => sequence(t)?
                        .iter()
                        .map(|p| match p {
                            Value::String(p) => Ok(p.as_bytes().to_vec()),
                            _ => Err(mlua::Error::runtime("re.phrases: a phrase is not a string")),
                        })
                        .collect(),
                    _ => Err(mlua::Error::runtime("re.phrases: a list is not a table")),
                })
                .collect::<mlua::Result<_>>()?;
            let sets =
                PhraseSets::new(&phrases).map_err(|e| mlua::Error::runtime(e.to_string()))?;
            ffi::phrase_matcher(
                lua,
                phrases::Phrases {
                    sets,
                    phrases,
                    limit: c.memory_limit,
                    found: ffi::Lent::default(),
                },
            )
        })?,
    )?;
    let c = Rc::clone(ctx);
    rust.raw_set(
        "re_count",
        lua.create_function(move |_, (p, t): (mlua::String, mlua::String)| {
            let re = c.regex(&p.to_str()?)?;
            Ok(re.find_iter(&t.as_bytes()).take(regex::MAX_MATCHES).count())
        })?,
    )?;

    let lists: Vec<(String, Arc<List>)> = sources
        .lists
        .by_name
        .iter()
        .map(|(k, v)| (k.clone(), Arc::clone(v)))
        .collect();
    rust.raw_set(
        "list_open",
        lua.create_function(move |lua, name: String| -> mlua::Result<AnyUserData> {
            match lists.iter().find(|(n, _)| *n == name) {
                Some((_, l)) => lua.create_userdata(ListHandle(Arc::clone(l))),
                None => Err(mlua::Error::runtime(format!(
                    "list({name:?}): no such list (lists/{name}.ip|domain|email|str)"
                ))),
            }
        })?,
    )?;

    let limiter = Rc::new(ratelimit::RateLimiter {
        store: Arc::clone(env.store),
        namespace: env.namespace,
        observe: Rc::clone(&ctx.scan.observe),
    });
    rust.raw_set("ratelimit", ffi::ratelimit(lua, &limiter)?)?;

    let modules: HashMap<String, (Arc<str>, String)> = sources
        .modules
        .iter()
        .map(|(k, v)| (k.clone(), (Arc::clone(&v.text), v.name.clone())))
        .collect();
    rust.raw_set(
        "module_source",
        lua.create_function(move |lua, name: String| match modules.get(&name) {
            Some((text, chunk)) => Ok((
                Value::String(lua.create_string(text.as_bytes())?),
                Value::String(lua.create_string(chunk)?),
            )),
            None => Ok((Value::Nil, Value::Nil)),
        })?,
    )?;

    let c = Rc::clone(ctx);
    rust.raw_set(
        "rule",
        lua.create_function(move |_, def: Value| {
            let Value::Table(def) = def else {
                return Ok(Some(
                    "rule: expects a table: rule { name = …, … }".to_string(),
                ));
            };
            let file = c.loading_file.borrow().clone();
            match declaration(&def, &file) {
                Ok(d) => {
                    c.registered.borrow_mut().push(d);
                    Ok(None)
                }
                Err(e) => Ok(Some(e.to_string())),
            }
        })?,
    )?;
    Ok(())
}

/// Bytes pushed to Lua as a string (`&[u8]` itself converts to a table of numbers).
pub(super) struct BStr<'a>(pub(super) &'a [u8]);

impl mlua::IntoLua for BStr<'_> {
    fn into_lua(self, lua: &Lua) -> mlua::Result<Value> {
        lua.create_string(self.0).map(Value::String)
    }
}

/// A list as Lua sees it.
struct ListHandle(Arc<List>);

impl UserData for ListHandle {
    fn add_methods<M: UserDataMethods<Self>>(methods: &mut M) {
        methods.add_method("contains", |_, this, v: Value| {
            Ok(match v {
                Value::String(s) => match s.to_str() {
                    Ok(s) => this.0.contains(&s),
                    Err(_) => false,
                },
                Value::Integer(i) => this.0.contains(&i.to_string()),
                _ => false,
            })
        });
        methods.add_method("len", |_, this, ()| Ok(this.0.len()));
    }
}

/// The values `t[1]..t[#t]`, read as Lua code would (through `__index` and `__len`, so a
/// read-only view of a module's table reads like the table), at most `MAX_SEQUENCE` of them.
pub(super) fn sequence(t: &Table) -> mlua::Result<Vec<Value>> {
    let n = usize::try_from(t.len()?).unwrap_or(0).min(MAX_SEQUENCE);
    (1..=n).map(|i| t.get::<Value>(i)).collect()
}

/// Most items read from one Lua sequence handed to the engine.
const MAX_SEQUENCE: usize = 1 << 20;
