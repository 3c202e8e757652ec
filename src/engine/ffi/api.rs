//! The fast forms of the rule-author API's hot primitives (`engine/api/` holds their safe
//! sides): `msg:stat`, `char_counts`, `is_private_ip`, `ratelimit`, compiled regexes' `match`,
//! `find` and `count`, phrase matchers' `search` and `count`. Each answers the common case
//! itself and hands anything else (other argument types, bad arguments) to its mlua function.

use std::ffi::c_int;
use std::rc::Rc;

use mlua::{ffi, Function, Lua, Table, Value};
use regex::bytes::Regex;

use super::{raise, raw_arg, raw_closure, raw_scan, slow_call, target, RawFn, Slow};
use crate::engine::api::phrases::Phrases;
use crate::engine::api::ratelimit::RateLimiter;
use crate::engine::api::regex::{captures, find_from, RegexHandle};
use crate::engine::api::text::char_counts;
use crate::engine::phrases::Found;
use crate::engine::state::Unlimited;
use crate::engine::view::Arg;
use crate::entities::is_private_text;

/// `stat(type, window[, how[, min_seen]])` (`msg:stat`): seven integers.
pub(super) unsafe extern "C-unwind" fn stat_raw(l: *mut ffi::lua_State) -> c_int {
    // SAFETY (whole body): see the module contract; seven pushes.
    let (ctx, data) = unsafe { raw_scan(l) };
    let (kind, window, how, min_seen) =
        unsafe { (raw_arg(l, 1), raw_arg(l, 2), raw_arg(l, 3), raw_arg(l, 4)) };
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        if !ctx.scan.kinds_built.get() {
            ctx.scan.kinds.borrow_mut().build(data.shingles);
            ctx.scan.kinds_built.set(true);
        }
        data.stat_args(
            &ctx.windows,
            &ctx.scan.kinds.borrow(),
            kind,
            window,
            how,
            min_seen,
        )
    }));
    match r {
        Ok(Some(counts)) => {
            for n in counts {
                let n = ffi::lua_Integer::try_from(n).unwrap_or(ffi::lua_Integer::MAX);
                unsafe { ffi::lua_pushinteger(l, n) };
            }
            7
        }
        Ok(None) => unsafe { slow_call(l, 4) },
        Err(panic) => {
            drop(panic);
            unsafe { raise(l, c"msg:stat failed (internal error)") }
        }
    }
}

/// `msg:stat(kind, window[, how[, min_seen]])`: `stat_raw` without `msg` (argument 1, not read).
pub(super) unsafe extern "C-unwind" fn method_stat(l: *mut ffi::lua_State) -> c_int {
    // SAFETY: as `stat_raw`'s; at most five slots, one removed.
    unsafe {
        ffi::lua_settop(l, 5);
        ffi::lua_remove(l, 1);
        stat_raw(l)
    }
}

const CHAR_COUNTS: RawFn<()> = RawFn::new(char_counts_raw);
const IS_PRIVATE_IP: RawFn<()> = RawFn::new(is_private_ip_raw);

/// `char_counts` and `is_private_ip` into `rust`.
pub(in crate::engine) fn char_counts_functions(lua: &Lua, rust: &Table) -> mlua::Result<()> {
    let none = Rc::new(());
    let slow = Slow::new(lua, &none, |_, (), ip: Option<mlua::String>| {
        Ok(ip.is_some_and(|ip| is_private_text(&ip.as_bytes())))
    })?;
    rust.raw_set(
        "is_private_ip",
        raw_closure(lua, &slow, IS_PRIVATE_IP, None)?,
    )?;
    let slow = Slow::new(
        lua,
        &none,
        |_, (), (t, max): (mlua::String, Option<usize>)| {
            let b = t.as_bytes();
            Ok(char_counts(&b[..max.map_or(b.len(), |m| m.min(b.len()))]))
        },
    )?;
    rust.raw_set("char_counts", raw_closure(lua, &slow, CHAR_COUNTS, None)?)?;
    Ok(())
}

/// `char_counts(text[, max])`: `char_counts` of the first `max` bytes, five integers.
unsafe extern "C-unwind" fn char_counts_raw(l: *mut ffi::lua_State) -> c_int {
    // SAFETY: see the module contract; borrows of the stack's string only, five pushes.
    unsafe {
        let Arg::Str(t) = raw_arg(l, 1) else {
            return slow_call(l, 2);
        };
        let n = match raw_arg(l, 2) {
            Arg::None => t.len(),
            Arg::Int(m) if m >= 0 => usize::try_from(m).unwrap_or(usize::MAX).min(t.len()),
            _ => return slow_call(l, 2),
        };
        let (a, b, c, d, e) = char_counts(&t[..n]);
        for v in [a, b, c, d, e] {
            ffi::lua_pushinteger(
                l,
                ffi::lua_Integer::try_from(v).unwrap_or(ffi::lua_Integer::MAX),
            );
        }
        5
    }
}

/// `is_private_ip(ip)`: whether a string is a private, loopback or link-local address.
unsafe extern "C-unwind" fn is_private_ip_raw(l: *mut ffi::lua_State) -> c_int {
    // SAFETY: see the module contract; one push.
    unsafe {
        let private = match raw_arg(l, 1) {
            Arg::None => false,
            Arg::Str(b) => is_private_text(b),
            _ => return slow_call(l, 1),
        };
        ffi::lua_pushboolean(l, c_int::from(private));
        1
    }
}

const RATELIMIT: RawFn<RateLimiter> = RawFn::new(ratelimit_raw);

/// `ratelimit(name, value, limit, window)` over `limiter`.
pub(in crate::engine) fn ratelimit(lua: &Lua, limiter: &Rc<RateLimiter>) -> mlua::Result<Function> {
    let slow = Slow::new(
        lua,
        limiter,
        |_, r: &RateLimiter, (name, value, limit, window): (mlua::String, Value, u64, u64)| {
            r.call(&name, value, limit, window)
        },
    )?;
    raw_closure(lua, &slow, RATELIMIT, None)
}

/// `ratelimit(name, value, limit, window)` when the name and value are UTF-8 strings and the
/// limit and window non-negative integers (the window above 0): `count, over`. Anything else
/// goes to the mlua function, which converts or rejects it.
unsafe extern "C-unwind" fn ratelimit_raw(l: *mut ffi::lua_State) -> c_int {
    // SAFETY (whole body): see the module contract; two pushes.
    unsafe {
        let r: &RateLimiter = target(l);
        let (Arg::Str(name), Arg::Str(value), Arg::Int(limit), Arg::Int(window)) =
            (raw_arg(l, 1), raw_arg(l, 2), raw_arg(l, 3), raw_arg(l, 4))
        else {
            return slow_call(l, 4);
        };
        let (Ok(name), Ok(value), Ok(limit), Ok(window)) = (
            std::str::from_utf8(name),
            std::str::from_utf8(value),
            u64::try_from(limit),
            u64::try_from(window),
        ) else {
            return slow_call(l, 4);
        };
        if window == 0 {
            return slow_call(l, 4);
        }
        let hit = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            r.hit(name, value, limit, window)
        }));
        let Ok(hit) = hit else {
            drop(hit);
            raise(l, c"ratelimit failed (internal error)")
        };
        ffi::lua_pushinteger(
            l,
            ffi::lua_Integer::try_from(hit.count).unwrap_or(ffi::lua_Integer::MAX),
        );
        ffi::lua_pushboolean(l, c_int::from(hit.over));
        2
    }
}

const REGEX_MATCH: RawFn<RegexHandle> = RawFn::new(regex_match);
const REGEX_FIND: RawFn<RegexHandle> = RawFn::new(regex_find);
const REGEX_COUNT: RawFn<RegexHandle> = RawFn::new(regex_count);

/// What `re.compile` returns: a table of the regex's methods, closures over one `RegexHandle`
/// (each holds an `Rc` of it). `match`, `find` and `count`, called on hot paths, are raw C
/// closures (`regex_call`) with the mlua function of the same work as their slow path: an mlua
/// userdata method cost ~1.6 k instructions a call before any work.
pub(in crate::engine) fn compiled_regex(
    lua: &Lua,
    re: Rc<Regex>,
    limit: usize,
) -> mlua::Result<Table> {
    let h = Rc::new(RegexHandle(re, limit));
    let t = lua.create_table_with_capacity(0, 6)?;
    let slow = Slow::new(
        lua,
        &h,
        |_, r: &RegexHandle, (_, s): (Value, mlua::String)| Ok(r.0.is_match(&s.as_bytes())),
    )?;
    t.raw_set("match", raw_closure(lua, &slow, REGEX_MATCH, None)?)?;
    let slow = Slow::new(
        lua,
        &h,
        |_, r: &RegexHandle, (_, s, init): (Value, mlua::String, Option<i64>)| {
            Ok(find_from(&r.0, &s.as_bytes(), init))
        },
    )?;
    t.raw_set("find", raw_closure(lua, &slow, REGEX_FIND, None)?)?;
    let slow = Slow::new(
        lua,
        &h,
        |_, r: &RegexHandle, (_, s): (Value, mlua::String)| Ok(r.count(&s.as_bytes())),
    )?;
    t.raw_set("count", raw_closure(lua, &slow, REGEX_COUNT, None)?)?;
    let r = Rc::clone(&h);
    t.raw_set(
        "captures",
        lua.create_function(move |lua, (_, s): (Value, mlua::String)| {
            let _unlimited = Unlimited::new(lua, r.1);
            captures(lua, &r.0, &s)
        })?,
    )?;
    let r = Rc::clone(&h);
    t.raw_set(
        "all",
        lua.create_function(
            move |lua, (_, s, max): (Value, mlua::String, Option<usize>)| {
                r.all(lua, &s.as_bytes(), max)
            },
        )?,
    )?;
    t.raw_set(
        "matches",
        lua.create_function(
            move |lua, (_, s, max): (Value, mlua::String, Option<usize>)| {
                h.matches(lua, &s.as_bytes(), max)
            },
        )?,
    )?;
    Ok(t)
}

/// `R:match(text)` by the C API.
unsafe extern "C-unwind" fn regex_match(l: *mut ffi::lua_State) -> c_int {
    // SAFETY: as `regex_call`'s.
    unsafe { regex_call(l, RegexOp::Match) }
}

/// `R:find(text[, init])` by the C API.
unsafe extern "C-unwind" fn regex_find(l: *mut ffi::lua_State) -> c_int {
    // SAFETY: as `regex_call`'s.
    unsafe { regex_call(l, RegexOp::Find) }
}

/// `R:count(text)` by the C API.
unsafe extern "C-unwind" fn regex_count(l: *mut ffi::lua_State) -> c_int {
    // SAFETY: as `regex_call`'s.
    unsafe { regex_call(l, RegexOp::Count) }
}

/// Which method `regex_call` runs.
#[derive(Clone, Copy)]
enum RegexOp {
    Match,
    Find,
    Count,
}

/// What `regex_call` found, by method.
enum RegexFound {
    Match(bool),
    Find(Option<(usize, usize)>),
    Count(usize),
}

/// `match`, `find` or `count` of a compiled regex, as its mlua function (upvalue 2) answers,
/// which gets the calls whose text is not a string or whose `init` is not an integer.
///
/// # Safety
/// Only in the C function of a `RawFn<RegexHandle>`. Nothing here owns a value with a
/// destructor when a call can raise; at most two slots are pushed past the three arguments.
unsafe fn regex_call(l: *mut ffi::lua_State, op: RegexOp) -> c_int {
    // SAFETY (whole body): see above.
    unsafe {
        let h: &RegexHandle = target(l);
        let nargs = if matches!(op, RegexOp::Find) { 3 } else { 2 };
        let Arg::Str(text) = raw_arg(l, 2) else {
            return slow_call(l, nargs);
        };
        let init = match op {
            RegexOp::Find => match raw_arg(l, 3) {
                Arg::None => None,
                Arg::Int(i) => Some(i),
                _ => return slow_call(l, nargs),
            },
            _ => None,
        };
        let found = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| match op {
            RegexOp::Match => RegexFound::Match(h.0.is_match(text)),
            RegexOp::Find => RegexFound::Find(match find_from(&h.0, text, init) {
                (Some(s), Some(e)) => Some((s, e)),
                _ => None,
            }),
            RegexOp::Count => RegexFound::Count(h.count(text)),
        }));
        let Ok(found) = found else {
            drop(found);
            raise(l, c"regex search failed (internal error)")
        };
        let int = |n: usize| ffi::lua_Integer::try_from(n).unwrap_or(ffi::lua_Integer::MAX);
        match found {
            RegexFound::Match(m) => {
                ffi::lua_pushboolean(l, c_int::from(m));
                1
            }
            RegexFound::Count(n) => {
                ffi::lua_pushinteger(l, int(n));
                1
            }
            RegexFound::Find(Some((s, e))) => {
                ffi::lua_pushinteger(l, int(s));
                ffi::lua_pushinteger(l, int(e));
                2
            }
            RegexFound::Find(None) => {
                ffi::lua_pushnil(l);
                ffi::lua_pushnil(l);
                2
            }
        }
    }
}

const PHRASES_SEARCH: RawFn<Phrases> = RawFn::new(phrases_search);
const PHRASES_COUNT: RawFn<Phrases> = RawFn::new(phrases_count);

/// What `re.phrases` returns: a table of two raw C closures over `p` (`phrases_call`), each
/// with the mlua function of the same work as its slow path.
pub(in crate::engine) fn phrase_matcher(lua: &Lua, p: Phrases) -> mlua::Result<Table> {
    let p = Rc::new(p);
    let search = Slow::new(
        lua,
        &p,
        |lua, p: &Phrases, (_, t, max): (Value, mlua::String, Option<usize>)| {
            p.search(lua, &t.as_bytes(), max)
        },
    )?;
    let count = Slow::new(
        lua,
        &p,
        |lua, p: &Phrases, (_, t, max): (Value, mlua::String, Option<usize>)| {
            p.count(lua, &t.as_bytes(), max)
        },
    )?;
    let matcher = lua.create_table_with_capacity(0, 2)?;
    matcher.raw_set("search", raw_closure(lua, &search, PHRASES_SEARCH, None)?)?;
    matcher.raw_set("count", raw_closure(lua, &count, PHRASES_COUNT, None)?)?;
    Ok(matcher)
}

/// `P:search(text[, max])` by the C API (`Phrases::search`).
unsafe extern "C-unwind" fn phrases_search(l: *mut ffi::lua_State) -> c_int {
    // SAFETY: as `phrases_call`'s.
    unsafe { phrases_call(l, true) }
}

/// `P:count(text[, max])` by the C API (`Phrases::count`).
unsafe extern "C-unwind" fn phrases_count(l: *mut ffi::lua_State) -> c_int {
    // SAFETY: as `phrases_call`'s.
    unsafe { phrases_call(l, false) }
}

/// The phrase search of `P:search` (`all`) or `P:count`, its tables built on the stack: through
/// mlua, the argument conversion, the result tables and their registry handles cost ~6 k
/// instructions a call. A text that is not a string, or a `max` that is not a non-negative
/// integer, goes to the mlua function (upvalue 2), for its conversion or its error.
///
/// # Safety
/// Only in the C function of a `RawFn<Phrases>`. The result waits in the lent
/// `Phrases::found` while it is pushed (contract, 3 and 4); at most 3 + 4 slots are used.
unsafe fn phrases_call(l: *mut ffi::lua_State, all: bool) -> c_int {
    // SAFETY (whole body): see above.
    unsafe {
        let p: &Phrases = target(l);
        let Arg::Str(text) = raw_arg(l, 2) else {
            return slow_call(l, 3);
        };
        let max = match raw_arg(l, 3) {
            Arg::None => 3,
            Arg::Int(n) if n >= 0 => usize::try_from(n).unwrap_or(usize::MAX),
            _ => return slow_call(l, 3),
        };
        let Some(found) = p.found.borrow() else {
            return slow_call(l, 3);
        };
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| p.sets.search(text))) {
            Ok(f) => *found = f,
            Err(panic) => {
                drop(panic);
                p.found.give_back();
                raise(l, c"phrase search failed (internal error)")
            }
        }
        let found: &Vec<Found> = found;
        let int = |n: usize| ffi::lua_Integer::try_from(n).unwrap_or(ffi::lua_Integer::MAX);
        let size = |n: usize| c_int::try_from(n).unwrap_or(0);
        // the first `max` phrases of list `i`, as a new table on the stack
        let push_list = |f: &Found, phrases: &[Vec<u8>]| {
            ffi::lua_createtable(l, size(f.indices.len().min(max)), 0);
            for (j, &k) in f.indices.iter().take(max).enumerate() {
                let b = &phrases[k];
                ffi::lua_pushlstring(l, b.as_ptr().cast(), b.len());
                ffi::lua_rawseti(l, -2, int(j + 1));
            }
        };
        if !all {
            match (found.first(), p.phrases.first()) {
                (Some(f), Some(phrases)) if !f.indices.is_empty() => {
                    ffi::lua_pushinteger(l, int(f.indices.len()));
                    push_list(f, phrases);
                }
                _ => {
                    ffi::lua_pushinteger(l, 0);
                    ffi::lua_pushnil(l);
                }
            }
            p.found.give_back();
            return 2;
        }
        ffi::lua_createtable(l, size(found.len()), 0);
        for (i, f) in found.iter().enumerate() {
            ffi::lua_pushinteger(l, int(f.indices.len()));
            ffi::lua_rawseti(l, -2, int(i + 1));
        }
        ffi::lua_createtable(l, size(found.len()), 0);
        for (i, (f, phrases)) in found.iter().zip(&p.phrases).enumerate() {
            if f.indices.is_empty() {
                ffi::lua_pushboolean(l, 0);
            } else {
                push_list(f, phrases);
            }
            ffi::lua_rawseti(l, -2, int(i + 1));
        }
        p.found.give_back();
        2
    }
}
