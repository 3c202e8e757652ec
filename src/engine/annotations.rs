//! The editor annotations (`lua/shrike.d.lua`) against the engine: every `msg` method a rule
//! can call and every global shrike adds to the sandbox is annotated, and nothing annotated
//! is missing from the engine (no drift either way).

use std::collections::BTreeSet;
use std::sync::Arc;

use mlua::Function;

use super::source::Sources;
use super::state::{build_state, BuildEnv};
use super::view::WindowNames;
use super::EngineConfig;
use crate::store::{ReputationStore, Store, StoreConfig, SystemClock};

/// The globals of standard Lua the sandbox keeps (LuaLS knows them).
const STANDARD: &[&str] = &[
    "_VERSION",
    "assert",
    "collectgarbage",
    "error",
    "getmetatable",
    "ipairs",
    "load",
    "math",
    "next",
    "os",
    "pairs",
    "pcall",
    "print",
    "rawequal",
    "rawget",
    "rawlen",
    "rawset",
    "require",
    "select",
    "setmetatable",
    "string",
    "table",
    "tonumber",
    "tostring",
    "type",
    "utf8",
    "xpcall",
];

fn engine_names() -> (BTreeSet<String>, BTreeSet<String>) {
    let store: Arc<dyn ReputationStore> =
        Arc::new(Store::new(&StoreConfig::default(), Arc::new(SystemClock)).expect("store"));
    let windows = WindowNames::default();
    let config = EngineConfig::default();
    let env = BuildEnv {
        config: &config,
        store: &store,
        namespace: 0,
        windows: &windows,
    };
    let (_lua, _ctx, _rules, entry) =
        build_state(&Sources::default(), None, &env).expect("an empty state builds");
    let names = |f: &str| -> BTreeSet<String> {
        let f: Function = entry.prelude.get(f).expect("prelude function");
        f.call::<Vec<String>>(())
            .expect("names")
            .into_iter()
            .collect()
    };
    (names("msg_methods"), names("globals"))
}

/// `function Msg:NAME(` and top-level `function NAME(` / `NAME = {}` lines of the file.
fn annotated() -> (BTreeSet<String>, BTreeSet<String>) {
    let text = include_str!("../../lua/shrike.d.lua");
    let mut methods = BTreeSet::new();
    let mut globals = BTreeSet::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("function Msg:") {
            methods.insert(rest.split('(').next().unwrap_or_default().to_string());
        } else if let Some(rest) = line.strip_prefix("function ") {
            let name = rest.split('(').next().unwrap_or_default();
            if !name.contains([':', '.']) {
                globals.insert(name.to_string());
            }
        } else if let Some((name, value)) = line.split_once(" = ") {
            if value == "{}" && !name.contains(' ') && name != "local" {
                globals.insert(name.to_string());
            }
        }
    }
    (methods, globals)
}

#[test]
fn every_msg_method_and_global_is_annotated() {
    let (methods, globals) = engine_names();
    let (ann_methods, ann_globals) = annotated();
    assert!(methods.len() > 50, "{methods:?}");
    let missing: Vec<_> = methods.difference(&ann_methods).collect();
    assert!(
        missing.is_empty(),
        "msg methods without annotation in lua/shrike.d.lua: {missing:?}"
    );
    let stale: Vec<_> = ann_methods.difference(&methods).collect();
    assert!(
        stale.is_empty(),
        "annotated msg methods the engine lacks: {stale:?}"
    );
    let ours: BTreeSet<String> = globals
        .iter()
        .filter(|g| !STANDARD.contains(&g.as_str()))
        .cloned()
        .collect();
    let missing: Vec<_> = ours.difference(&ann_globals).collect();
    assert!(
        missing.is_empty(),
        "globals without annotation: {missing:?}"
    );
    let stale: Vec<_> = ann_globals.difference(&ours).collect();
    assert!(
        stale.is_empty(),
        "annotated globals the sandbox lacks: {stale:?}"
    );
    let listed: BTreeSet<String> = super::SANDBOX_GLOBALS
        .iter()
        .map(|g| g.to_string())
        .collect();
    assert_eq!(
        listed, ours,
        "engine::SANDBOX_GLOBALS against the globals a built state adds"
    );
}

/// `.luacheckrc`'s `read_globals = { … }` (the repository's luacheck settings for rule files).
fn luacheckrc_read_globals() -> BTreeSet<String> {
    let text = include_str!("../../.luacheckrc");
    let start = text
        .find("\nread_globals = {")
        .expect(".luacheckrc sets read_globals");
    let rest = &text[start..];
    let body = &rest[rest.find('{').expect("{") + 1..rest.find('}').expect("}")];
    body.split(',')
        .map(|g| g.trim().trim_matches('"').to_string())
        .filter(|g| !g.is_empty())
        .collect()
}

#[test]
fn luacheckrc_knows_the_sandbox_globals() {
    let listed: BTreeSet<String> = super::SANDBOX_GLOBALS
        .iter()
        .map(|g| g.to_string())
        .collect();
    assert_eq!(luacheckrc_read_globals(), listed);
}
