//! Regular expressions for rules (`re.*`): compiled handles and the searches both their raw
//! methods (`ffi/api.rs`) and their mlua slow paths run.

use std::rc::Rc;

use mlua::{Lua, Table, Value};
use regex::bytes::Regex;

use super::BStr;
use crate::engine::state::Unlimited;

/// A compiled regular expression (`re.compile`): the form to use on hot paths, since the
/// string forms (`re.match(pattern, text)`) look the pattern up in the cache on every call.
/// `limit` is the state's memory limit, lifted while a method builds its result (`Unlimited`).
pub(in crate::engine) struct RegexHandle(
    pub(in crate::engine) Rc<Regex>,
    pub(in crate::engine) usize,
);

/// How many times the methods of a compiled regex look for matches at most (`count`,
/// `matches`): bounded work on hostile input.
pub(in crate::engine) const MAX_MATCHES: usize = 100_000;

impl RegexHandle {
    /// `list = R:all(text[, max])`: for each match, in order, the first capture group that
    /// took part in it (the whole match when the pattern has no groups; a match in which no
    /// group took part is skipped); at most `max` (default 100). What a `string.gmatch` loop
    /// collects, in one regex pass.
    pub(in crate::engine) fn all(
        &self,
        lua: &Lua,
        bytes: &[u8],
        max: Option<usize>,
    ) -> mlua::Result<Table> {
        let max = max.unwrap_or(100).min(MAX_MATCHES);
        let _unlimited = Unlimited::new(lua, self.1);
        if self.0.captures_len() > 1 {
            lua.create_sequence_from(
                self.0
                    .captures_iter(bytes)
                    .take(MAX_MATCHES)
                    .filter_map(|caps| caps.iter().skip(1).flatten().next())
                    .take(max)
                    .map(|g| BStr(g.as_bytes())),
            )
        } else {
            lua.create_sequence_from(
                self.0
                    .find_iter(bytes)
                    .take(max)
                    .map(|m| BStr(m.as_bytes())),
            )
        }
    }

    /// `n, list = R:matches(text[, max])`: the number of distinct matched strings and the
    /// first `max` (default 3) of them, in order of appearance.
    pub(in crate::engine) fn matches(
        &self,
        lua: &Lua,
        bytes: &[u8],
        max: Option<usize>,
    ) -> mlua::Result<(usize, Table)> {
        let max = max.unwrap_or(3);
        let mut seen: Vec<&[u8]> = Vec::new();
        for m in self.0.find_iter(bytes).take(MAX_MATCHES) {
            if !seen.contains(&m.as_bytes()) {
                seen.push(m.as_bytes());
                if seen.len() >= 1_000 {
                    break;
                }
            }
        }
        let _unlimited = Unlimited::new(lua, self.1);
        let list = lua.create_sequence_from(seen.iter().take(max).map(|m| BStr(m)))?;
        Ok((seen.len(), list))
    }

    /// How many matches (at most `MAX_MATCHES`).
    pub(in crate::engine) fn count(&self, bytes: &[u8]) -> usize {
        self.0.find_iter(bytes).take(MAX_MATCHES).count()
    }
}

/// `start, end` of the first match, 1-based and inclusive as Lua's `string.find`; nils for none.
pub(in crate::engine) fn find(re: &Regex, t: &mlua::String) -> (Option<usize>, Option<usize>) {
    find_from(re, &t.as_bytes(), None)
}

/// `find` from position `init` (1-based; negative counts from the end, as `string.find`).
pub(in crate::engine) fn find_from(
    re: &Regex,
    bytes: &[u8],
    init: Option<i64>,
) -> (Option<usize>, Option<usize>) {
    let len = bytes.len() as i64;
    let start = match init.unwrap_or(1) {
        i if i > 0 => i - 1,
        0 => 0,
        i => (len + i).max(0),
    };
    if start > len {
        return (None, None);
    }
    match re.find_at(bytes, start as usize) {
        Some(m) => (Some(m.start() + 1), Some(m.end())),
        None => (None, None),
    }
}

pub(in crate::engine) fn captures(lua: &Lua, re: &Regex, t: &mlua::String) -> mlua::Result<Value> {
    let bytes = t.as_bytes();
    match re.captures(&bytes) {
        Some(caps) => {
            // a group that took no part is `false` (a nil would end the sequence)
            let out = lua.create_sequence_from(caps.iter().map(|g| match g {
                Some(m) => mlua::Either::Left(BStr(m.as_bytes())),
                None => mlua::Either::Right(false),
            }))?;
            Ok(Value::Table(out))
        }
        None => Ok(Value::Nil),
    }
}
