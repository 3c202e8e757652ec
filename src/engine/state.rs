//! One Lua state: the sandbox, the API primitives the prelude wraps, rule registration, the
//! CPU budgets (preempt.rs), and running a generation's rules over one message.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::num::NonZeroUsize;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use lru::LruCache;
use mlua::{
    AnyUserData, Function, Lua, LuaOptions, MultiValue, StdLib, Table, UserData, UserDataMethods,
    Value,
};
use regex::bytes::Regex;

use super::lists::List;
use super::phrases::PhraseSets;
use super::preempt::{Preempt, Stop};
use super::source::{self, RuleLocation, Sources};
use super::view::{MessageData, WindowNames};
use super::{
    Action, Engine, EngineConfig, Generation, Hit, LoadError, RuleCounters, RuleMeta, RuleOutcome,
    SymbolMeta, RATELIMIT_KIND, RULE_ERROR, RULE_TIMEOUT,
};
use crate::shingle::{hash_bytes, hash_pair};
use crate::store::{ReputationStore, StoreKey};

/// CPU budget of a rule file's top-level code (it may compile large phrase sets and regexes).
const LOAD_CPU: Duration = Duration::from_secs(2);
/// Options kept per symbol, and bytes per option.
const MAX_OPTIONS: usize = 32;
const MAX_OPTION_BYTES: usize = 512;
/// Per-rule counters are flushed to the generation after this many scans.
const FLUSH_EVERY: u32 = 256;
/// Rules' times are read on one scan in this many (the first after each flush of the counters),
/// and counted this many times: a clock read per rule cost ~2% of the rules' time.
const TIME_EVERY: u32 = 8;

/// The `fetch` field id of `msg:classify()` (answered here: it needs the hits so far).
const CLASSIFY_FIELD: u8 = 47;
/// `msg:header(name)`, `msg:raw_header(name)`, `msg:header_count(name)` (view.rs field ids).
const HEADER_FIELD: u8 = 40;
const RAW_HEADER_FIELD: u8 = 42;
const HEADER_COUNT_FIELD: u8 = 43;

const PRELUDE: &str = include_str!("prelude.lua");

/// State shared by the Rust primitives of one Lua state.
struct Ctx {
    /// CPU budgets of rule calls and scans (a watchdog, no instruction hook).
    preempt: Preempt,
    /// Index of the running rule (for log lines), `usize::MAX` while loading.
    current_rule: Cell<usize>,
    rule_names: RefCell<Vec<String>>,
    loading_file: RefCell<String>,
    /// (second, lines written in it, lines dropped since the last written one)
    log_window: Cell<(u64, u32, u64)>,
    log_limit: u32,
    /// Compiled patterns by source. `Rc`, not clones: cloning a `Regex` gives it a fresh
    /// (empty) matching cache, so every call would rebuild its lazy DFA.
    regex: RefCell<LruCache<String, Rc<Regex>>>,
    registered: RefCell<Vec<(RuleMeta, Function)>>,
    /// The message being scanned: set by `RuleRunner::run` for the duration of the rules and
    /// null otherwise (see `Ctx::scan`).
    scan: Cell<*const ()>,
    /// The generation whose rules run in this state (symbol names for `msg:classify()`).
    /// None in the state built only to validate a new generation's declarations.
    generation: Option<Arc<Generation>>,
    /// (rule, symbol) of the hits applied so far in the current scan, for `msg:classify()`.
    applied: RefCell<Vec<(usize, usize)>>,
    /// What `msg:classify()` computed in the current scan: its probability and features.
    classified: RefCell<Option<(Option<f64>, crate::classify::Features)>>,
    windows: WindowNames,
    memory_limit: usize,
    /// An owned string the raw `fetch_scalar` is pushing: held here, not on its frame, so that
    /// a Lua error raised while pushing skips no destructor.
    scratch: Cell<String>,
    /// The values the raw `fetch_array` is pushing, held here for the same reason.
    cells: Cell<super::view::Cells>,
    /// (rule index, start) of each rule `run_checks` started in the current call: the rules'
    /// run counts and times.
    marks: RefCell<Vec<(u32, Instant)>>,
    /// Whether this scan reads the clock for `marks` (one in `TIME_EVERY`); else each mark is
    /// `epoch`.
    timed: Cell<bool>,
    epoch: Instant,
    /// The scan's shingles by kind for `msg:stat`, built at its first call (`kinds_built`).
    kinds: RefCell<super::view::KindIndex>,
    kinds_built: Cell<bool>,
    /// The current scan only observes (a learn): `ratelimit` answers without counting.
    observe: Rc<Cell<bool>>,
    /// Hits `run_checks` read itself (`plain_hit`), in order, for Rust to record when the loop
    /// returns: (rule, symbol, weight, options).
    plain_hits: RefCell<Vec<PlainHit>>,
    /// Per rule, for the current scan: whether its hits apply (not shadow, and in its test
    /// share for this message).
    applies: RefCell<Vec<bool>>,
    /// Registry reference of the string "weight", read from hit tables without allocating.
    weight_key: Cell<std::ffi::c_int>,
}

/// A hit `run_checks` read: (rule, symbol, weight, options).
type PlainHit = (usize, usize, f64, Vec<String>);

/// Publishes the scan's data to the state's primitives and withdraws it on drop, also when
/// unwinding.
struct ScanGuard<'c>(&'c Ctx);

impl<'c> ScanGuard<'c> {
    fn new(ctx: &'c Ctx, data: &MessageData<'_>) -> Self {
        ctx.scan.set(data as *const MessageData<'_> as *const ());
        ctx.kinds_built.set(false);
        ScanGuard(ctx)
    }
}

impl Drop for ScanGuard<'_> {
    fn drop(&mut self) {
        self.0.scan.set(std::ptr::null());
    }
}

/// Strings longer than this go through the mlua `fetch`, which lifts the memory limit while
/// it builds them; `fetch_scalar` pushes under the limit.
const SCALAR_PUSH_MAX: usize = 64 * 1024;

// Raw C functions for the hottest primitives. A call of an mlua function costs ~700
// instructions of argument conversion, registry handles and error plumbing before any work;
// rules read ~20 scalar fields and ~9 `msg:stat`s a message. Each C function has two upvalues:
// the state's `Ctx` (a light userdata) and the mlua function doing the same work, which keeps
// that `Ctx` alive as long as the closure lives and answers what the C function does not
// (table fields, long strings, bad arguments: its errors carry the details). The methods of
// `msg` among them have a third, their field id.
//
// Safety: Lua errors (a bad argument, "not enough memory" while pushing) unwind over these
// frames by `longjmp`, so at every call that can raise, the frames own nothing with a
// destructor: values are borrowed from the scan's data, an owned string is first moved into
// `Ctx::scratch`, and panics are caught (and their payloads dropped) before Lua is called.

/// Wraps the C function `f` with its upvalues: the `Ctx`, `slow`, and `id` when given.
///
/// `msg`'s methods `msg:header(name)` and the like, and `msg:stat(kind, window)`, are such
/// closures called straight as the methods, which saves the Lua function that passed the
/// arguments on (~150 instructions a call): `method_scalar` puts the field `id` (the third
/// upvalue) in place of `msg`, `method_stat` drops `msg`.
fn raw_closure(
    lua: &Lua,
    ctx: &Rc<Ctx>,
    slow: &Function,
    f: mlua::ffi::lua_CFunction,
    id: Option<u8>,
) -> mlua::Result<Function> {
    raw_closure_at(lua, Rc::as_ptr(ctx) as *mut std::ffi::c_void, slow, f, id)
}

/// `raw_closure` with any pointer as upvalue 1: `slow` must keep what it points at alive.
fn raw_closure_at(
    lua: &Lua,
    ctx: *mut std::ffi::c_void,
    slow: &Function,
    f: mlua::ffi::lua_CFunction,
    id: Option<u8>,
) -> mlua::Result<Function> {
    // SAFETY: the stack holds `slow` (the argument); two or three pushes (one rotated below
    // `slow`), then the closure takes all the values as upvalues. `exec_raw` checks for three
    // free slots.
    #[allow(unsafe_code)]
    unsafe {
        lua.exec_raw::<Function>(slow, |l| {
            mlua::ffi::lua_pushlightuserdata(l, ctx);
            mlua::ffi::lua_insert(l, -2);
            let mut n = 2;
            if let Some(id) = id {
                mlua::ffi::lua_pushinteger(l, mlua::ffi::lua_Integer::from(id));
                n = 3;
            }
            mlua::ffi::lua_pushcclosure(l, f, n);
        })
    }
}

/// `msg:header(name)` and the like: `fetch_scalar(id, name)` with the id from upvalue 3 in
/// place of `msg` (argument 1, not read).
#[allow(unsafe_code)]
unsafe extern "C-unwind" fn method_scalar(l: *mut mlua::ffi::lua_State) -> std::ffi::c_int {
    use mlua::ffi;
    // SAFETY: as `fetch_scalar`'s; the stack is set to two slots (within LUA_MINSTACK) and one
    // push replaces slot 1.
    unsafe {
        ffi::lua_settop(l, 2);
        ffi::lua_pushvalue(l, ffi::lua_upvalueindex(3));
        ffi::lua_replace(l, 1);
        fetch_scalar(l)
    }
}

/// `msg:stat(kind, window[, how[, min_seen]])`: `stat_raw` without `msg` (argument 1, not read).
#[allow(unsafe_code)]
unsafe extern "C-unwind" fn method_stat(l: *mut mlua::ffi::lua_State) -> std::ffi::c_int {
    use mlua::ffi;
    // SAFETY: as `stat_raw`'s; at most five slots (within LUA_MINSTACK), one removed.
    unsafe {
        ffi::lua_settop(l, 5);
        ffi::lua_remove(l, 1);
        stat_raw(l)
    }
}

/// The `Ctx` and the scan's data in a raw closure's C function; raises outside a scan.
///
/// # Safety
/// Only from the C functions `raw_closure` wraps (upvalue 1 is the `Ctx`, alive while upvalue
/// 2, which owns an `Rc` of it, is), whose frames own nothing with a destructor.
#[allow(unsafe_code)]
unsafe fn raw_scan<'c>(l: *mut mlua::ffi::lua_State) -> (&'c Ctx, &'c MessageData<'c>) {
    use mlua::ffi;
    // SAFETY: see above; `scan` is non-null only during a scan, when it points at that
    // scan's `MessageData` (see `Ctx::scan`), which outlives the call.
    let ctx = unsafe { &*(ffi::lua_touserdata(l, ffi::lua_upvalueindex(1)) as *const Ctx) };
    let p = ctx.scan.get() as *const MessageData<'_>;
    if p.is_null() {
        unsafe { raise(l, c"msg used outside its scan") }
    }
    (ctx, unsafe { &*p })
}

/// Argument `i` of a raw C function, borrowed from the Lua stack (where it stays for the call).
///
/// # Safety
/// `l` is the running C function's state.
#[allow(unsafe_code)]
unsafe fn raw_arg<'a>(l: *mut mlua::ffi::lua_State, i: std::ffi::c_int) -> super::view::Arg<'a> {
    use super::view::Arg;
    use mlua::ffi;
    let mut is_int = 0;
    // SAFETY: reads of a stack slot; a string's bytes live while it is on the stack.
    unsafe {
        match ffi::lua_type(l, i) {
            ffi::LUA_TNONE | ffi::LUA_TNIL => Arg::None,
            ffi::LUA_TSTRING => {
                let mut len = 0;
                let s = ffi::lua_tolstring(l, i, &mut len);
                Arg::Str(std::slice::from_raw_parts(s.cast::<u8>(), len))
            }
            ffi::LUA_TNUMBER => {
                let n = ffi::lua_tointegerx(l, i, &mut is_int);
                if is_int != 0 {
                    Arg::Int(n)
                } else {
                    Arg::Other
                }
            }
            _ => Arg::Other,
        }
    }
}

/// A raw fetch's `Ctx`, the scan's data, the field id (argument 1) and the field's argument (2).
///
/// # Safety
/// As `raw_scan`.
#[allow(unsafe_code)]
unsafe fn field_call<'c>(
    l: *mut mlua::ffi::lua_State,
) -> (&'c Ctx, &'c MessageData<'c>, u8, super::view::Arg<'c>) {
    // SAFETY: as the caller's.
    unsafe {
        let (ctx, data) = raw_scan(l);
        let id = match raw_arg(l, 1) {
            super::view::Arg::Int(i) => u8::try_from(i).unwrap_or(0),
            _ => 0,
        };
        (ctx, data, id, raw_arg(l, 2))
    }
}

/// A raw fetch's answer from Rust (caught panics included): the value to push, or `Err` with
/// what the C function returns once the mlua function answered for it (`None`: a field or an
/// argument the raw path leaves to it). Errors are raised.
///
/// # Safety
/// As `raw_scan`.
#[allow(unsafe_code)]
unsafe fn settle<T>(
    l: *mut mlua::ffi::lua_State,
    found: std::thread::Result<std::result::Result<Option<T>, &'static std::ffi::CStr>>,
) -> std::result::Result<T, std::ffi::c_int> {
    // SAFETY: as the caller's; nothing owned lives here when `raise` unwinds.
    match found {
        Ok(Ok(Some(v))) => Ok(v),
        Ok(Ok(None)) => Err(unsafe { slow_call(l, 2) }),
        Ok(Err(e)) => unsafe { raise(l, e) },
        Err(panic) => {
            drop(panic);
            unsafe { raise(l, c"msg field failed (internal error)") }
        }
    }
}

/// `fetch_scalar(id[, arg])`: the `msg` fields that are one string, integer or nil
/// (`view::SCALAR_FIELDS`).
#[allow(unsafe_code)]
unsafe extern "C-unwind" fn fetch_scalar(l: *mut mlua::ffi::lua_State) -> std::ffi::c_int {
    use super::view::Scalar;
    use mlua::ffi;
    use std::borrow::Cow;
    // SAFETY (whole body): see the comment above `raw_closure`.
    let (ctx, data, id, arg) = unsafe { field_call(l) };
    let found = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| data.scalar(id, arg)));
    let value = match unsafe { settle(l, found) } {
        Ok(v) => v,
        Err(n) => return n,
    };
    match value {
        Scalar::Nil => unsafe { ffi::lua_pushnil(l) },
        Scalar::Int(i) => unsafe { ffi::lua_pushinteger(l, i) },
        Scalar::Str(s) if s.len() > SCALAR_PUSH_MAX => {
            drop(s);
            return unsafe { slow_call(l, 2) };
        }
        Scalar::Str(Cow::Borrowed(s)) => unsafe {
            ffi::lua_pushlstring(l, s.as_ptr().cast(), s.len());
        },
        Scalar::Str(Cow::Owned(s)) => {
            drop(ctx.scratch.replace(s));
            // SAFETY: nothing else touches `scratch` until the next `fetch_scalar` call.
            let s = unsafe { &*ctx.scratch.as_ptr() };
            unsafe { ffi::lua_pushlstring(l, s.as_ptr().cast(), s.len()) };
        }
    }
    1
}

/// `fetch_table(id)`: the `msg` fields of `view::TABLE_FIELDS` when they need no records: an
/// empty array, or the anomaly set. Record arrays with records go to the mlua function, as any
/// argument does.
#[allow(unsafe_code)]
unsafe extern "C-unwind" fn fetch_table(l: *mut mlua::ffi::lua_State) -> std::ffi::c_int {
    use super::view::{Arg, TableShape};
    use mlua::ffi;
    // SAFETY (whole body): see the comment above `raw_closure`. The names pushed are static;
    // at most three slots (within LUA_MINSTACK).
    unsafe {
        let (_, data, id, arg) = field_call(l);
        if !matches!(arg, Arg::None) {
            return slow_call(l, 2);
        }
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| data.table_shape(id))) {
            Ok(Some(TableShape::Empty)) => ffi::lua_createtable(l, 0, 0),
            Ok(Some(TableShape::Set(names))) => {
                ffi::lua_createtable(l, 0, std::ffi::c_int::try_from(names.len()).unwrap_or(0));
                for a in names {
                    let name = a.as_str();
                    ffi::lua_pushlstring(l, name.as_ptr().cast(), name.len());
                    ffi::lua_pushboolean(l, 1);
                    ffi::lua_rawset(l, -3);
                }
            }
            Ok(Some(TableShape::Records) | None) => return slow_call(l, 2),
            Err(panic) => {
                drop(panic);
                raise(l, c"msg field failed (internal error)")
            }
        }
        1
    }
}

/// `fetch_array(id[, arg])`: the `msg` fields that are an array of plain values
/// (`view::ARRAY_FIELDS`), built on the stack without mlua's call and `exec_raw`.
#[allow(unsafe_code)]
unsafe extern "C-unwind" fn fetch_array(l: *mut mlua::ffi::lua_State) -> std::ffi::c_int {
    use super::view::Cell as V;
    use mlua::ffi;
    // SAFETY (whole body): see the comment above `raw_closure`.
    let (ctx, data, id, arg) = unsafe { field_call(l) };
    let filled = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let mut cells = ctx.cells.take();
        let r = data.array(id, arg, &mut cells);
        ctx.cells.set(cells);
        r.map(|filled| filled.then_some(()))
    }));
    if let Err(n) = unsafe { settle(l, filled) } {
        return n;
    }
    // SAFETY: nothing else touches `cells` until the next `fetch_array` call (the calls below
    // run no Lua code: rules cannot set finalizers).
    let cells = unsafe { &*ctx.cells.as_ptr() };
    let len = std::ffi::c_int::try_from(cells.cells.len()).unwrap_or(std::ffi::c_int::MAX);
    unsafe {
        ffi::lua_createtable(l, len, 0);
        for (i, c) in cells.cells.iter().enumerate() {
            match *c {
                V::Missing => ffi::lua_pushboolean(l, 0),
                V::Bool(b) => ffi::lua_pushboolean(l, std::ffi::c_int::from(b)),
                V::Int(n) => ffi::lua_pushinteger(l, n),
                V::Num(n) => ffi::lua_pushnumber(l, n),
                V::Str(s, e) => {
                    let s = cells.str(s, e);
                    ffi::lua_pushlstring(l, s.as_ptr().cast(), s.len());
                }
            }
            ffi::lua_rawseti(l, -2, i as ffi::lua_Integer + 1);
        }
    }
    1
}

/// `stat(type, window[, how[, min_seen]])` (`msg:stat`): seven integers.
#[allow(unsafe_code)]
unsafe extern "C-unwind" fn stat_raw(l: *mut mlua::ffi::lua_State) -> std::ffi::c_int {
    // SAFETY (whole body): see the comment above `raw_closure`.
    let (ctx, data) = unsafe { raw_scan(l) };
    let (kind, window, how, min_seen) =
        unsafe { (raw_arg(l, 1), raw_arg(l, 2), raw_arg(l, 3), raw_arg(l, 4)) };
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        if !ctx.kinds_built.get() {
            ctx.kinds.borrow_mut().build(data.shingles);
            ctx.kinds_built.set(true);
        }
        data.stat_args(
            &ctx.windows,
            &ctx.kinds.borrow(),
            kind,
            window,
            how,
            min_seen,
        )
    }));
    match r {
        Ok(Some(counts)) => {
            for n in counts {
                let n = mlua::ffi::lua_Integer::try_from(n).unwrap_or(mlua::ffi::lua_Integer::MAX);
                unsafe { mlua::ffi::lua_pushinteger(l, n) };
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

/// `char_counts(text[, max])`: `char_counts` of the first `max` bytes, five integers.
#[allow(unsafe_code)]
unsafe extern "C-unwind" fn char_counts_raw(l: *mut mlua::ffi::lua_State) -> std::ffi::c_int {
    use super::view::Arg;
    use mlua::ffi;
    // SAFETY: see the comment above `raw_closure`; borrows of the stack's string only, five
    // pushes (within LUA_MINSTACK).
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
#[allow(unsafe_code)]
unsafe extern "C-unwind" fn is_private_ip_raw(l: *mut mlua::ffi::lua_State) -> std::ffi::c_int {
    use super::view::Arg;
    // SAFETY: see the comment above `raw_closure`; one push.
    unsafe {
        let private = match raw_arg(l, 1) {
            Arg::None => false,
            Arg::Str(b) => is_private_text(b),
            _ => return slow_call(l, 1),
        };
        mlua::ffi::lua_pushboolean(l, std::ffi::c_int::from(private));
        1
    }
}

/// Whether `b` is the text of a private, loopback or link-local address (`view::is_private`).
fn is_private_text(b: &[u8]) -> bool {
    std::str::from_utf8(b)
        .ok()
        .and_then(|s| s.parse::<std::net::IpAddr>().ok())
        .is_some_and(super::view::is_private)
}

/// What `ratelimit` counts in: the store and the generation's namespace.
struct RateLimiter {
    store: Arc<dyn ReputationStore>,
    namespace: u8,
    /// `Ctx::observe`: a learn's scan reads the counters without counting.
    observe: Rc<Cell<bool>>,
}

impl RateLimiter {
    /// One hit of `value` under `name`, over a `window` of seconds (> 0).
    fn hit(&self, name: &str, value: &str, limit: u64, window: u64) -> crate::store::RateResult {
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
}

/// `ratelimit(name, value, limit, window)` when the name and value are UTF-8 strings and the
/// limit and window non-negative integers (the window above 0): `count, over`. Anything else
/// goes to the mlua function (upvalue 2), which converts or rejects it.
///
/// # Safety
/// Only as the C function of the closure `build_state` makes: upvalue 1 points at the
/// `RateLimiter` upvalue 2 owns. The frame owns nothing where a call can raise.
#[allow(unsafe_code)]
unsafe extern "C-unwind" fn ratelimit_raw(l: *mut mlua::ffi::lua_State) -> std::ffi::c_int {
    use super::view::Arg;
    use mlua::ffi;
    // SAFETY (whole body): see above; two pushes.
    unsafe {
        let r = &*(ffi::lua_touserdata(l, ffi::lua_upvalueindex(1)) as *const RateLimiter);
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
        ffi::lua_pushboolean(l, std::ffi::c_int::from(hit.over));
        2
    }
}

/// Runs the checks from rule `next` (0-based) on, inside `Lua::exec_raw`, whose stack holds
/// the checks (1) and the scan's `msg` (2). Each rule gets its own protected call, CPU budget
/// (`Preempt::next_call`) and start time (`Ctx::marks`); a rule that returns nil or false (most
/// of them, most of the time) is done here. Leaves on the stack what Rust reads next: 0 when
/// all ran; -k when the message budget ran out before rule k (1-based), which did not run; or
/// k, then true and what rule k returned when it returned something else, or false and the
/// error its call raised. A call from Rust through mlua per rule cost ~800 instructions more.
///
/// # Safety
/// Only inside `exec_raw` with those two arguments. No call here raises a Lua error: the
/// protected call catches the rule's, and the other calls neither allocate in Lua nor grow the
/// stack past the slots checked for.
#[allow(unsafe_code)]
unsafe fn run_checks(l: *mut mlua::ffi::lua_State, ctx: &Ctx, mut next: usize, n: usize) {
    use mlua::ffi;
    // SAFETY (whole body): see above.
    unsafe {
        while next < n {
            ctx.current_rule.set(next);
            ctx.marks
                .borrow_mut()
                .push((u32::try_from(next).unwrap_or(u32::MAX), ctx.now()));
            ctx.preempt.next_call();
            let rule = next as ffi::lua_Integer + 1;
            if ctx.preempt.message_over() {
                ffi::lua_settop(l, 0);
                ffi::lua_pushinteger(l, -rule);
                return;
            }
            ffi::lua_rawgeti(l, 1, rule);
            ffi::lua_pushvalue(l, 2);
            let status = if next == PROFILED_RULE.load(std::sync::atomic::Ordering::Relaxed) {
                profiled_call(l)
            } else {
                ffi::lua_pcall(l, 1, ffi::LUA_MULTRET, 0)
            };
            // (A stop that landed as the rule returned leaves the hook armed: back to Rust,
            // which disarms it, before the next rule runs.)
            if status == ffi::LUA_OK
                && !ctx.preempt.stopping()
                && (ffi::lua_toboolean(l, 3) == 0 || plain_hit(l, ctx, next))
            {
                ffi::lua_settop(l, 2);
                next += 1;
                continue;
            }
            // Results (or the error) are at 3..top: put the rule and the status before them,
            // and drop the checks and `msg`. (If the stack cannot grow by two, Rust reads an
            // error of this rule.)
            let ok = status == ffi::LUA_OK;
            if ffi::lua_checkstack(l, 2) == 0 {
                ffi::lua_settop(l, 0);
                ffi::lua_pushinteger(l, rule);
                ffi::lua_pushboolean(l, 0);
                return;
            }
            ffi::lua_pushinteger(l, rule);
            ffi::lua_pushboolean(l, std::ffi::c_int::from(ok));
            ffi::lua_rotate(l, 3, 2);
            ffi::lua_rotate(l, 1, -2);
            let top = ffi::lua_gettop(l);
            ffi::lua_settop(l, top - 2);
            return;
        }
        ffi::lua_settop(l, 0);
        ffi::lua_pushinteger(l, 0);
    }
}

/// The rule (0-based, in generation order) whose calls go through `profiled_call`; none by
/// default. A profiling aid: `rules_profile` sets it from `SHRIKE_PROFILE_RULE`, so that
/// callgrind's `--toggle-collect=*profiled_call` counts that rule's instructions alone.
pub static PROFILED_RULE: std::sync::atomic::AtomicUsize =
    std::sync::atomic::AtomicUsize::new(usize::MAX);

/// `lua_pcall` of the rule `PROFILED_RULE` names, apart so that a profiler can find it.
///
/// # Safety
/// As `run_checks`' call of the rule.
#[inline(never)]
#[allow(unsafe_code)]
unsafe fn profiled_call(l: *mut mlua::ffi::lua_State) -> std::ffi::c_int {
    // SAFETY: as the caller's.
    unsafe { mlua::ffi::lua_pcall(l, 1, mlua::ffi::LUA_MULTRET, 0) }
}

/// Reads what a rule returned (stack slots 3 to the top) when it is a plain hit, the forms rules
/// return nearly always: `true` or a weight, then options (strings, numbers, booleans, or arrays
/// of them), for a rule of one symbol; a table of declared symbols to `true`, a weight, or a
/// table of options with an optional `weight`, for a rule of several. Records the hits in
/// `Ctx::plain_hits` (and `Ctx::applied`) as `interpret` would have made them and returns true;
/// a return value Rust's `interpret` would have to read or reject (a symbol name, an undeclared
/// symbol, a weight that is no number) is left to it: false, nothing recorded. Saves a hit the
/// way back to Rust (~5 k instructions).
///
/// # Safety
/// Inside `run_checks`, the rule's results at 3..top. No call here raises or runs Lua code:
/// raw reads of tables and stack slots, with the stack space checked first.
#[allow(unsafe_code)]
unsafe fn plain_hit(l: *mut mlua::ffi::lua_State, ctx: &Ctx, rule: usize) -> bool {
    use mlua::ffi;
    let Some(meta) = ctx.generation.as_ref().and_then(|g| g.rules.get(rule)) else {
        return false;
    };
    // SAFETY (whole body): see above.
    unsafe {
        let top = ffi::lua_gettop(l);
        if ffi::lua_checkstack(l, 4) == 0 {
            return false;
        }
        let mut found: Vec<(usize, f64, Vec<String>)> = Vec::new();
        if !meta.multi {
            let Some(w) = hit_weight(l, 3) else {
                return false;
            };
            let mut options = Vec::new();
            for i in 4..=top {
                add_options(l, i, &mut options);
            }
            if w != 0.0 {
                found.push((0, w, options));
            }
        } else {
            if ffi::lua_type(l, 3) != ffi::LUA_TTABLE {
                return false;
            }
            ffi::lua_pushnil(l);
            while ffi::lua_next(l, 3) != 0 {
                // the symbol at top - 1, its hit at top
                let si = match raw_bytes(l, -2) {
                    Some(name) => meta.symbols.iter().position(|s| s.name.as_bytes() == name),
                    None => None,
                };
                let value = ffi::lua_gettop(l);
                let hit = match (si, ffi::lua_type(l, value)) {
                    (None, _) => None,
                    (Some(si), ffi::LUA_TTABLE) => {
                        ffi::lua_rawgeti(l, ffi::LUA_REGISTRYINDEX, ctx.weight_key.get().into());
                        ffi::lua_rawget(l, value);
                        let w = if ffi::lua_type(l, -1) == ffi::LUA_TNIL {
                            Some(1.0)
                        } else {
                            hit_weight(l, -1)
                        };
                        ffi::lua_settop(l, value);
                        w.map(|w| {
                            let mut options = Vec::new();
                            add_options(l, value, &mut options);
                            (si, w, options)
                        })
                    }
                    (Some(si), _) => hit_weight(l, value).map(|w| (si, w, Vec::new())),
                };
                let Some(hit) = hit else {
                    ffi::lua_settop(l, top);
                    return false;
                };
                ffi::lua_settop(l, value - 1);
                if hit.1 != 0.0 {
                    found.push(hit);
                }
            }
            found.sort_by_key(|h| h.0);
        }
        let applies = ctx.applies.borrow().get(rule).copied().unwrap_or(false);
        if applies {
            let mut applied = ctx.applied.borrow_mut();
            applied.extend(found.iter().map(|h| (rule, h.0)));
        }
        let mut hits = ctx.plain_hits.borrow_mut();
        hits.extend(found.into_iter().map(|(si, w, o)| (rule, si, w, o)));
        true
    }
}

/// The bytes of the string at stack slot `i`, or None for any other type (numbers are not
/// converted: that would allocate).
///
/// # Safety
/// `i` is a valid slot; the bytes live while the string stays on the stack.
#[allow(unsafe_code)]
unsafe fn raw_bytes<'a>(l: *mut mlua::ffi::lua_State, i: std::ffi::c_int) -> Option<&'a [u8]> {
    use mlua::ffi;
    // SAFETY: as above.
    unsafe {
        if ffi::lua_type(l, i) != ffi::LUA_TSTRING {
            return None;
        }
        let mut len = 0;
        let p = ffi::lua_tolstring(l, i, &mut len);
        Some(std::slice::from_raw_parts(p.cast::<u8>(), len))
    }
}

/// A hit's weight as `weight` reads it: true 1, false 0 (no hit), a finite number; None for
/// anything else (Rust words the error).
///
/// # Safety
/// `i` is a valid slot.
#[allow(unsafe_code)]
unsafe fn hit_weight(l: *mut mlua::ffi::lua_State, i: std::ffi::c_int) -> Option<f64> {
    use mlua::ffi;
    // SAFETY: as above.
    unsafe {
        match ffi::lua_type(l, i) {
            ffi::LUA_TBOOLEAN => Some(if ffi::lua_toboolean(l, i) != 0 {
                1.0
            } else {
                0.0
            }),
            ffi::LUA_TNUMBER => {
                let n = ffi::lua_tonumberx(l, i, std::ptr::null_mut());
                n.is_finite().then_some(n)
            }
            _ => None,
        }
    }
}

/// The options in stack slot `i` as `options_of` reads them: a table gives its array values
/// (1, 2, ... up to the first nil), anything else itself; strings, numbers and booleans count,
/// other values are skipped; at most `MAX_OPTIONS` of at most `MAX_OPTION_BYTES`.
///
/// # Safety
/// `i` is a valid absolute slot, with two free slots above the top.
#[allow(unsafe_code)]
unsafe fn add_options(l: *mut mlua::ffi::lua_State, i: std::ffi::c_int, out: &mut Vec<String>) {
    use mlua::ffi;
    // SAFETY: as above; `lua_rawgeti` pushes one value, popped before the next.
    unsafe {
        if ffi::lua_type(l, i) != ffi::LUA_TTABLE {
            add_option(l, i, out);
            return;
        }
        let mut k: ffi::lua_Integer = 1;
        while out.len() < MAX_OPTIONS {
            if ffi::lua_rawgeti(l, i, k) == ffi::LUA_TNIL {
                ffi::lua_pop(l, 1);
                break;
            }
            add_option(l, ffi::lua_gettop(l), out);
            ffi::lua_pop(l, 1);
            k += 1;
        }
    }
}

/// One option value (see `add_options`).
///
/// # Safety
/// `i` is a valid slot.
#[allow(unsafe_code)]
unsafe fn add_option(l: *mut mlua::ffi::lua_State, i: std::ffi::c_int, out: &mut Vec<String>) {
    use mlua::ffi;
    if out.len() >= MAX_OPTIONS {
        return;
    }
    // SAFETY: as above.
    let mut s = unsafe {
        match ffi::lua_type(l, i) {
            ffi::LUA_TSTRING => match raw_bytes(l, i) {
                Some(b) => String::from_utf8_lossy(b).into_owned(),
                None => return,
            },
            ffi::LUA_TNUMBER if ffi::lua_isinteger(l, i) != 0 => {
                ffi::lua_tointegerx(l, i, std::ptr::null_mut()).to_string()
            }
            ffi::LUA_TNUMBER => ffi::lua_tonumberx(l, i, std::ptr::null_mut()).to_string(),
            ffi::LUA_TBOOLEAN => (ffi::lua_toboolean(l, i) != 0).to_string(),
            _ => return,
        }
    };
    truncate_option(&mut s);
    out.push(s);
}

/// Cuts an option to `MAX_OPTION_BYTES` at a character boundary.
fn truncate_option(s: &mut String) {
    if s.len() > MAX_OPTION_BYTES {
        let mut end = MAX_OPTION_BYTES;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
    }
}

/// Answers a raw closure's call with its mlua function (upvalue 2) and the same first `nargs`
/// arguments, returning what that returns.
///
/// # Safety
/// As `raw_scan`.
#[allow(unsafe_code)]
unsafe fn slow_call(l: *mut mlua::ffi::lua_State, nargs: std::ffi::c_int) -> std::ffi::c_int {
    use mlua::ffi;
    // SAFETY: at most four arguments and the function: five slots, within the LUA_MINSTACK
    // (20) a C function gets.
    unsafe {
        ffi::lua_settop(l, nargs);
        ffi::lua_pushvalue(l, ffi::lua_upvalueindex(2));
        ffi::lua_insert(l, 1);
        ffi::lua_call(l, nargs, ffi::LUA_MULTRET);
        ffi::lua_gettop(l)
    }
}

/// Raises a Lua error with a static message.
///
/// # Safety
/// As `raw_scan`.
#[allow(unsafe_code)]
unsafe fn raise(l: *mut mlua::ffi::lua_State, msg: &'static std::ffi::CStr) -> ! {
    // SAFETY: one slot; `lua_error` does not return.
    unsafe {
        mlua::ffi::lua_pushstring(l, msg.as_ptr());
        mlua::ffi::lua_error(l)
    }
}

impl Ctx {
    /// The message being scanned, or an error when called outside a scan (a rule kept a
    /// primitive and called it later).
    #[allow(unsafe_code)]
    fn scan(&self) -> mlua::Result<&MessageData<'_>> {
        let p = self.scan.get() as *const MessageData<'_>;
        if p.is_null() {
            return Err(mlua::Error::runtime("msg used outside its scan"));
        }
        // SAFETY: `scan` is non-null only while a `ScanGuard` lives, which `RuleRunner::run`
        // creates from a `&MessageData` that outlives it and drops before returning; the
        // primitives that call this run only inside Lua calls made during that time (the state
        // is single-threaded and not `Send`), and the reference does not leave the callback.
        Ok(unsafe { &*p })
    }

    fn rule_name(&self) -> String {
        let i = self.current_rule.get();
        self.rule_names
            .borrow()
            .get(i)
            .cloned()
            .unwrap_or_else(|| format!("(loading {})", self.loading_file.borrow()))
    }

    /// `msg:classify()`: the classifier's probability over the message and the symbols hit
    /// so far; nil during the cold start (then no features are extracted either: training
    /// builds them itself when a scan has none).
    fn classify(&self, data: &MessageData<'_>) -> mlua::Result<Value> {
        let Some(model) = data.classifier.filter(|m| m.ready()) else {
            return Ok(Value::Nil);
        };
        let Some(gen) = &self.generation else {
            return Ok(Value::Nil);
        };
        let applied = self.applied.borrow();
        let names = applied
            .iter()
            .map(|&(r, s)| gen.rules[r].symbols[s].name.as_str());
        let features = data.classifier_features(names);
        let p = model.classify(&features);
        *self.classified.borrow_mut() = Some((p, features));
        Ok(p.map_or(Value::Nil, Value::Number))
    }

    /// A rule's start or end for `marks`: the time on a timed scan, else `epoch`.
    fn now(&self) -> Instant {
        if self.timed.get() {
            Instant::now()
        } else {
            self.epoch
        }
    }

    /// Whether another log line may be written now; returns the number dropped before it.
    fn log_permit(&self) -> Option<u64> {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let (sec, n, dropped) = self.log_window.get();
        let (sec, n) = if sec == now { (sec, n) } else { (now, 0) };
        if n < self.log_limit {
            self.log_window.set((sec, n + 1, 0));
            Some(dropped)
        } else {
            self.log_window.set((sec, n, dropped + 1));
            None
        }
    }

    fn regex(&self, pattern: &str) -> mlua::Result<Rc<Regex>> {
        let mut cache = self.regex.borrow_mut();
        if let Some(r) = cache.get(pattern) {
            return Ok(Rc::clone(r));
        }
        let r = Rc::new(
            regex::bytes::RegexBuilder::new(pattern)
                .size_limit(1 << 20)
                .build()
                .map_err(|e| mlua::Error::runtime(format!("bad regular expression: {e}")))?,
        );
        cache.put(pattern.to_string(), Rc::clone(&r));
        Ok(r)
    }
}

/// Lifts the state's memory limit while Rust builds values for Lua, and restores it on drop.
/// mlua wraps every API call in a protected call while a limit is set (an allocation could
/// fail); the values built here are bounded by the message limits, so the protection would
/// only cost time (a table of 6 fields: ~3 µs protected, ~0.3 µs not). Lua code itself always
/// runs under the limit.
struct Unlimited<'l> {
    lua: &'l Lua,
    limit: usize,
}

impl<'l> Unlimited<'l> {
    fn new(lua: &'l Lua, limit: usize) -> Self {
        let _ = lua.set_memory_limit(0);
        Unlimited { lua, limit }
    }
}

impl Drop for Unlimited<'_> {
    fn drop(&mut self) {
        let _ = self.lua.set_memory_limit(self.limit);
    }
}

/// A compiled regular expression (`re.compile`): the form to use on hot paths, since the
/// string forms (`re.match(pattern, text)`) look the pattern up in the cache on every call.
/// `limit` is the state's memory limit, lifted while a method builds its result (`Unlimited`).
struct RegexHandle(Rc<Regex>, usize);

/// How many times the methods of a compiled regex look for matches at most (`count`,
/// `matches`): bounded work on hostile input.
const MAX_MATCHES: usize = 100_000;

impl RegexHandle {
    /// `list = R:all(text[, max])`: for each match, in order, the first capture group that
    /// took part in it (the whole match when the pattern has no groups; a match in which no
    /// group took part is skipped); at most `max` (default 100). What a `string.gmatch` loop
    /// collects, in one regex pass.
    fn all(&self, lua: &Lua, bytes: &[u8], max: Option<usize>) -> mlua::Result<Table> {
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
    fn matches(&self, lua: &Lua, bytes: &[u8], max: Option<usize>) -> mlua::Result<(usize, Table)> {
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
    fn count(&self, bytes: &[u8]) -> usize {
        self.0.find_iter(bytes).take(MAX_MATCHES).count()
    }
}

/// What `re.compile` returns: a table of the regex's methods, closures over one `RegexHandle`
/// (each holds an `Rc` of it). `match`, `find` and `count`, called on hot paths, are raw C
/// closures (`regex_call`) with the mlua function of the same work as their slow path: an mlua
/// userdata method cost ~1.6 k instructions a call before any work (BENCHMARKS.md, stop 31).
fn compiled_regex(lua: &Lua, re: Rc<Regex>, limit: usize) -> mlua::Result<Table> {
    let h = Rc::new(RegexHandle(re, limit));
    let at = Rc::as_ptr(&h) as *mut std::ffi::c_void;
    let t = lua.create_table_with_capacity(0, 6)?;
    let r = Rc::clone(&h);
    let slow = lua
        .create_function(move |_, (_, s): (Value, mlua::String)| Ok(r.0.is_match(&s.as_bytes())))?;
    t.raw_set("match", raw_closure_at(lua, at, &slow, regex_match, None)?)?;
    let r = Rc::clone(&h);
    let slow =
        lua.create_function(move |_, (_, s, init): (Value, mlua::String, Option<i64>)| {
            Ok(find_from(&r.0, &s.as_bytes(), init))
        })?;
    t.raw_set("find", raw_closure_at(lua, at, &slow, regex_find, None)?)?;
    let r = Rc::clone(&h);
    let slow =
        lua.create_function(move |_, (_, s): (Value, mlua::String)| Ok(r.count(&s.as_bytes())))?;
    t.raw_set("count", raw_closure_at(lua, at, &slow, regex_count, None)?)?;
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
#[allow(unsafe_code)]
unsafe extern "C-unwind" fn regex_match(l: *mut mlua::ffi::lua_State) -> std::ffi::c_int {
    // SAFETY: as `regex_call`'s.
    unsafe { regex_call(l, RegexOp::Match) }
}

/// `R:find(text[, init])` by the C API.
#[allow(unsafe_code)]
unsafe extern "C-unwind" fn regex_find(l: *mut mlua::ffi::lua_State) -> std::ffi::c_int {
    // SAFETY: as `regex_call`'s.
    unsafe { regex_call(l, RegexOp::Find) }
}

/// `R:count(text)` by the C API.
#[allow(unsafe_code)]
unsafe extern "C-unwind" fn regex_count(l: *mut mlua::ffi::lua_State) -> std::ffi::c_int {
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
/// Only as the C function of a closure `compiled_regex` made: upvalue 1 points at the
/// `RegexHandle` upvalue 2 owns. Nothing here owns a value with a destructor when a call can
/// raise; at most two slots are pushed past the three arguments (LUA_MINSTACK is 20).
#[allow(unsafe_code)]
unsafe fn regex_call(l: *mut mlua::ffi::lua_State, op: RegexOp) -> std::ffi::c_int {
    use super::view::Arg;
    use mlua::ffi;
    // SAFETY (whole body): see above.
    unsafe {
        let h = &*(ffi::lua_touserdata(l, ffi::lua_upvalueindex(1)) as *const RegexHandle);
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
                ffi::lua_pushboolean(l, std::ffi::c_int::from(m));
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

/// `start, end` of the first match, 1-based and inclusive as Lua's `string.find`; nils for none.
fn find(re: &Regex, t: &mlua::String) -> (Option<usize>, Option<usize>) {
    find_from(re, &t.as_bytes(), None)
}

/// `find` from position `init` (1-based; negative counts from the end, as `string.find`).
fn find_from(re: &Regex, bytes: &[u8], init: Option<i64>) -> (Option<usize>, Option<usize>) {
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

fn captures(lua: &Lua, re: &Regex, t: &mlua::String) -> mlua::Result<Value> {
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

/// Phrase lists behind one matcher (`re.phrases`), with the phrases to report. Lua sees a
/// table of two raw C closures over it (`phrases_call`), each with an mlua function of the same
/// work as its slow path, which owns an `Rc` of this and so keeps it alive.
struct Phrases {
    sets: PhraseSets,
    phrases: Vec<Vec<Vec<u8>>>,
    /// The state's memory limit (see `RegexHandle`).
    limit: usize,
    /// The last search's result, held here while the raw path builds its tables (a Lua error
    /// unwinds over that frame, which must own nothing).
    found: RefCell<Vec<super::phrases::Found>>,
}

impl Phrases {
    /// `counts, found = P:search(text[, max])`: per list, the number of distinct phrases found
    /// as whole words, and the first `max` (default 3) of them in order of appearance (`false`
    /// for a list with none).
    fn search(&self, lua: &Lua, t: &[u8], max: Option<usize>) -> mlua::Result<(Table, Table)> {
        let max = max.unwrap_or(3);
        let found = self.sets.search(t);
        let _unlimited = Unlimited::new(lua, self.limit);
        let counts = lua.create_sequence_from(found.iter().map(|f| f.indices.len()))?;
        let mut lists = Vec::with_capacity(found.len());
        for (f, phrases) in found.iter().zip(&self.phrases) {
            lists.push(if f.indices.is_empty() {
                mlua::Either::Right(false)
            } else {
                mlua::Either::Left(
                    lua.create_sequence_from(
                        f.indices.iter().take(max).map(|&k| BStr(&phrases[k])),
                    )?,
                )
            });
        }
        Ok((counts, lua.create_sequence_from(lists)?))
    }

    /// `n, found = P:count(text[, max])`: `search` for the first list alone, without the
    /// per-list tables: the number of distinct phrases and the first `max` of them (nil when
    /// none). What `util.find_phrases` needs, and most texts match nothing.
    fn count(
        &self,
        lua: &Lua,
        t: &[u8],
        max: Option<usize>,
    ) -> mlua::Result<(usize, Option<Table>)> {
        let max = max.unwrap_or(3);
        let found = self.sets.search(t);
        let (Some(f), Some(phrases)) = (found.first(), self.phrases.first()) else {
            return Ok((0, None));
        };
        if f.indices.is_empty() {
            return Ok((0, None));
        }
        let _unlimited = Unlimited::new(lua, self.limit);
        let list =
            lua.create_sequence_from(f.indices.iter().take(max).map(|&k| BStr(&phrases[k])))?;
        Ok((f.indices.len(), Some(list)))
    }
}

/// `P:search(text[, max])` by the C API (`Phrases::search`).
#[allow(unsafe_code)]
unsafe extern "C-unwind" fn phrases_search(l: *mut mlua::ffi::lua_State) -> std::ffi::c_int {
    // SAFETY: as `phrases_call`'s.
    unsafe { phrases_call(l, true) }
}

/// `P:count(text[, max])` by the C API (`Phrases::count`).
#[allow(unsafe_code)]
unsafe extern "C-unwind" fn phrases_count(l: *mut mlua::ffi::lua_State) -> std::ffi::c_int {
    // SAFETY: as `phrases_call`'s.
    unsafe { phrases_call(l, false) }
}

/// The phrase search of `P:search` (`all`) or `P:count`, its tables built on the stack: through
/// mlua, the argument conversion, the result tables and their registry handles cost ~6 k
/// instructions a call (BENCHMARKS.md, stop 31). A text that is not a string, or a `max` that
/// is not a non-negative integer, goes to the mlua function (upvalue 2), for its conversion or
/// its error.
///
/// # Safety
/// Only as the C function of a closure `re_phrases` made: upvalue 1 points at the `Phrases`
/// that upvalue 2 owns. As for `raw_scan`, the frame owns nothing with a destructor where a
/// call can raise (the result waits in `Phrases::found`), and at most 3 + 4 slots are used
/// (LUA_MINSTACK is 20).
#[allow(unsafe_code)]
unsafe fn phrases_call(l: *mut mlua::ffi::lua_State, all: bool) -> std::ffi::c_int {
    use super::view::Arg;
    use mlua::ffi;
    // SAFETY (whole body): see above.
    unsafe {
        let p = &*(ffi::lua_touserdata(l, ffi::lua_upvalueindex(1)) as *const Phrases);
        let Arg::Str(text) = raw_arg(l, 2) else {
            return slow_call(l, 3);
        };
        let max = match raw_arg(l, 3) {
            Arg::None => 3,
            Arg::Int(n) if n >= 0 => usize::try_from(n).unwrap_or(usize::MAX),
            _ => return slow_call(l, 3),
        };
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| p.sets.search(text))) {
            Ok(found) => drop(p.found.replace(found)),
            Err(panic) => {
                drop(panic);
                raise(l, c"phrase search failed (internal error)")
            }
        }
        // Nothing else touches `found` until the next call (the pushes below run no Lua code:
        // rules cannot set finalizers).
        let found = &*p.found.as_ptr();
        let int = |n: usize| ffi::lua_Integer::try_from(n).unwrap_or(ffi::lua_Integer::MAX);
        let size = |n: usize| std::ffi::c_int::try_from(n).unwrap_or(0);
        // the first `max` phrases of list `i`, as a new table on the stack
        let push_list = |f: &super::phrases::Found, phrases: &[Vec<u8>]| {
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
        2
    }
}

/// Bytes pushed to Lua as a string (`&[u8]` itself converts to a table of numbers).
struct BStr<'a>(&'a [u8]);

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

/// A built Lua state with a generation's rules registered.
struct LoadedState {
    generation: Arc<Generation>,
    lua: Lua,
    ctx: Rc<Ctx>,
    begin: Function,
    /// The rules' checks, in order (a sequence).
    checks: Table,
    finish: Function,
    /// Sampling seeds of test-mode rules (hash of the rule name).
    rule_seeds: Vec<u64>,
}

/// Byte counts of `t` by ASCII class: upper-case letters, lower-case letters, digits, white
/// space (space, tab, CR, LF) and the rest. Written as four independent sums of comparisons, so
/// the compiler vectorizes it: a `match` per byte branches on every byte and mispredicts on
/// mixed text (3.8 µs a message for BODY_CAPS's 4 KB sample, BENCHMARKS.md stop 22). The sums
/// are bytes over chunks of 255 (one vector lane per text byte, widened once a chunk): with
/// u32 sums every 16 bytes took a dozen widening instructions, 3.6 instructions a byte in all.
fn char_counts(t: &[u8]) -> (usize, usize, usize, usize, usize) {
    let (mut upper, mut lower, mut digit, mut space) = (0usize, 0usize, 0usize, 0usize);
    // A chunk of 255 bytes cannot overflow a byte sum.
    for chunk in t.chunks(255) {
        let (mut u, mut l, mut d, mut s) = (0u8, 0u8, 0u8, 0u8);
        for &c in chunk {
            u += u8::from(c.wrapping_sub(b'A') < 26);
            l += u8::from(c.wrapping_sub(b'a') < 26);
            d += u8::from(c.wrapping_sub(b'0') < 10);
            s += u8::from((c == b' ') | (c == b'\t') | (c == b'\r') | (c == b'\n'));
        }
        upper += usize::from(u);
        lower += usize::from(l);
        digit += usize::from(d);
        space += usize::from(s);
    }
    let other = t.len() - upper - lower - digit - space;
    (upper, lower, digit, space, other)
}

/// The text of an error value a rule's protected call caught, and whether it is Lua's
/// out-of-memory error (the state is then collected after the scan).
fn error_value(v: Value) -> (String, bool) {
    match v {
        Value::Error(e) => {
            let memory = matches!(*e, mlua::Error::MemoryError(_));
            (describe(&e), memory)
        }
        // what Lua raises when an allocation fails (here: the state's memory limit)
        Value::String(s) if s.as_bytes() == b"not enough memory" => {
            (describe(&mlua::Error::MemoryError(String::new())), true)
        }
        Value::String(s) => (s.to_string_lossy(), false),
        Value::Nil => ("nil".into(), false),
        other => (
            other
                .to_string()
                .unwrap_or_else(|_| format!("(error object: {})", other.type_name())),
            false,
        ),
    }
}

/// Turns an mlua error into the message a rule author needs (file:line first when Lua gave
/// them).
fn describe(e: &mlua::Error) -> String {
    match e {
        mlua::Error::RuntimeError(s) => match s.find("\nstack traceback:") {
            Some(i) => s[..i].to_string(),
            None => s.clone(),
        },
        mlua::Error::SyntaxError { message, .. } => message.clone(),
        mlua::Error::MemoryError(_) => "out of memory (Lua state limit reached)".into(),
        mlua::Error::CallbackError { cause, .. } => describe(cause),
        mlua::Error::WithContext { context, cause } => format!("{context}: {}", describe(cause)),
        other => other.to_string(),
    }
}

fn lua_err(e: mlua::Error) -> LoadError {
    LoadError::Lua(describe(&e))
}

fn is_symbol_name(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 64
        && b[0].is_ascii_uppercase()
        && b.iter()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == b'_')
}

/// Validates one `rule { … }` table.
fn declaration(def: &Table, file: &str) -> Result<(RuleMeta, Function), String> {
    const FIELDS: &[&str] = &[
        "name",
        "score",
        "scores",
        "description",
        "group",
        "check",
        "action",
        "actions",
        "shadow",
        "share",
    ];
    for pair in def.clone().pairs::<Value, Value>() {
        let (k, _) = pair.map_err(|e| describe(&e))?;
        let known = match &k {
            Value::String(s) => s.to_str().is_ok_and(|s| FIELDS.contains(&&*s)),
            _ => false,
        };
        if !known {
            return Err(format!(
                "rule: unknown field {k:?} (fields: {})",
                FIELDS.join(", ")
            ));
        }
    }
    let name: String = match def.get::<Value>("name") {
        Ok(Value::String(s)) => s.to_str().map_err(|e| describe(&e))?.to_string(),
        _ => return Err("rule: `name` (a string) is required".into()),
    };
    if !is_symbol_name(&name) {
        return Err(format!(
            "rule {name:?}: names are A-Z, 0-9 and _, starting with a letter, at most 64"
        ));
    }
    let check: Function = match def.get::<Value>("check") {
        Ok(Value::Function(f)) => f,
        _ => return Err(format!("rule {name}: `check` (a function) is required")),
    };
    let text = |field: &str| -> Result<String, String> {
        match def.get::<Value>(field) {
            Ok(Value::Nil) => Ok(String::new()),
            Ok(Value::String(s)) => Ok(s.to_str().map_err(|e| describe(&e))?.to_string()),
            _ => Err(format!("rule {name}: `{field}` must be a string")),
        }
    };
    let description = text("description")?;
    let group = text("group")?;
    let action_of = |v: Value| -> Result<Option<Action>, String> {
        match v {
            Value::Nil => Ok(None),
            Value::String(s) => {
                let s = s.to_str().map_err(|e| describe(&e))?;
                Action::parse(&s)
                    .map(Some)
                    .ok_or_else(|| format!("rule {name}: unknown action {:?}", &*s))
            }
            _ => Err(format!("rule {name}: an action must be a string")),
        }
    };
    let shadow = match def.get::<Value>("shadow") {
        Ok(Value::Nil) => false,
        Ok(Value::Boolean(b)) => b,
        _ => return Err(format!("rule {name}: `shadow` must be a boolean")),
    };
    let share = match def.get::<Value>("share") {
        Ok(Value::Nil) => None,
        Ok(Value::Number(n)) if n > 0.0 && n <= 1.0 => Some(n),
        Ok(Value::Integer(1)) => Some(1.0),
        _ => return Err(format!("rule {name}: `share` must be a number in (0, 1]")),
    };
    let score = def.get::<Value>("score").unwrap_or(Value::Nil);
    let scores = def.get::<Value>("scores").unwrap_or(Value::Nil);
    let number = |v: &Value| -> Option<f64> {
        match v {
            Value::Integer(i) => Some(*i as f64),
            Value::Number(n) if n.is_finite() => Some(*n),
            _ => None,
        }
    };
    let (symbols, multi) = match (&score, &scores) {
        (s, Value::Nil) => {
            let score = number(s).ok_or_else(|| {
                format!("rule {name}: `score` (a number) or `scores` is required")
            })?;
            if !matches!(def.get::<Value>("actions"), Ok(Value::Nil)) {
                return Err(format!(
                    "rule {name}: `actions` is for rules with `scores`; use `action`"
                ));
            }
            let action = action_of(def.get::<Value>("action").unwrap_or(Value::Nil))?;
            (
                vec![SymbolMeta {
                    name: name.clone(),
                    score,
                    description: description.clone(),
                    group: group.clone(),
                    action,
                }],
                false,
            )
        }
        (Value::Nil, Value::Table(t)) => {
            let actions = match def.get::<Value>("actions") {
                Ok(Value::Nil) => None,
                Ok(Value::Table(a)) => Some(a),
                _ => return Err(format!("rule {name}: `actions` must be a table")),
            };
            if !matches!(def.get::<Value>("action"), Ok(Value::Nil)) {
                return Err(format!(
                    "rule {name}: use `actions = {{ SYMBOL = \"…\" }}` with `scores`"
                ));
            }
            let mut symbols = Vec::new();
            for pair in t.clone().pairs::<Value, Value>() {
                let (k, v) = pair.map_err(|e| describe(&e))?;
                let sym = match &k {
                    Value::String(s) => s.to_str().map_err(|e| describe(&e))?.to_string(),
                    _ => return Err(format!("rule {name}: `scores` keys must be symbol names")),
                };
                if !is_symbol_name(&sym) {
                    return Err(format!("rule {name}: bad symbol name {sym:?}"));
                }
                let score = number(&v)
                    .ok_or_else(|| format!("rule {name}: score of {sym} must be a number"))?;
                let action = match &actions {
                    Some(a) => action_of(a.get::<Value>(sym.as_str()).unwrap_or(Value::Nil))?,
                    None => None,
                };
                symbols.push(SymbolMeta {
                    name: sym,
                    score,
                    description: description.clone(),
                    group: group.clone(),
                    action,
                });
            }
            if symbols.is_empty() {
                return Err(format!("rule {name}: `scores` declares no symbol"));
            }
            if let Some(a) = &actions {
                for pair in a.clone().pairs::<String, Value>() {
                    let (k, _) = pair.map_err(|e| describe(&e))?;
                    if !symbols.iter().any(|s| s.name == k) {
                        return Err(format!("rule {name}: action for undeclared symbol {k}"));
                    }
                }
            }
            symbols.sort_by(|a, b| a.name.cmp(&b.name));
            (symbols, true)
        }
        _ => {
            return Err(format!(
                "rule {name}: give either `score` or `scores`, not both"
            ))
        }
    };
    Ok((
        RuleMeta {
            name,
            file: file.to_string(),
            symbols,
            multi,
            shadow,
            share,
        },
        check,
    ))
}

/// A freshly built state: the Lua state, its context, the registered rules, and what a scan
/// calls.
type Built = (Lua, Rc<Ctx>, Vec<(RuleMeta, Function)>, Entry);

/// What a scan calls: the prelude's `begin` and `finish`, and the rules' checks in order.
struct Entry {
    begin: Function,
    checks: Table,
    finish: Function,
}

struct BuildEnv<'a> {
    config: &'a EngineConfig,
    store: &'a Arc<dyn ReputationStore>,
    namespace: u8,
    windows: &'a WindowNames,
}

/// Builds a Lua state and loads `sources` into it.
fn build_state(
    sources: &Sources,
    generation: Option<&Arc<Generation>>,
    env: &BuildEnv<'_>,
) -> Result<Built, LoadError> {
    super::view::warm();
    let lua = Lua::new_with(
        StdLib::TABLE | StdLib::STRING | StdLib::MATH | StdLib::UTF8 | StdLib::OS,
        LuaOptions::default(),
    )
    .map_err(lua_err)?;
    let limit = env
        .config
        .memory_limit_mb
        .max(1)
        .saturating_mul(1024 * 1024);
    lua.set_memory_limit(limit).map_err(lua_err)?;
    let ctx = Rc::new(Ctx {
        preempt: Preempt::new(
            &lua,
            Duration::from_millis(env.config.rule_cpu_ms),
            Duration::from_millis(env.config.message_cpu_ms),
        ),
        current_rule: Cell::new(usize::MAX),
        rule_names: RefCell::new(Vec::new()),
        loading_file: RefCell::new(String::new()),
        log_window: Cell::new((0, 0, 0)),
        log_limit: env.config.log_lines_per_sec,
        regex: RefCell::new(LruCache::new(
            NonZeroUsize::new(env.config.regex_cache.max(1)).unwrap_or(NonZeroUsize::MIN),
        )),
        registered: RefCell::new(Vec::new()),
        scan: Cell::new(std::ptr::null()),
        generation: generation.cloned(),
        applied: RefCell::new(Vec::new()),
        classified: RefCell::new(None),
        windows: env.windows.clone(),
        memory_limit: limit,
        scratch: Cell::new(String::new()),
        cells: Cell::new(super::view::Cells::default()),
        marks: RefCell::new(Vec::new()),
        timed: Cell::new(true),
        epoch: Instant::now(),
        kinds: RefCell::new(super::view::KindIndex::default()),
        kinds_built: Cell::new(false),
        observe: Rc::new(Cell::new(false)),
        plain_hits: RefCell::new(Vec::new()),
        applies: RefCell::new(Vec::new()),
        weight_key: Cell::new(0),
    });
    // SAFETY: one slot; `luaL_ref` pops it into the registry (which keeps the string alive).
    #[allow(unsafe_code)]
    let weight_key = unsafe {
        lua.exec_raw::<i64>((), |l| {
            mlua::ffi::lua_pushstring(l, c"weight".as_ptr());
            let r = mlua::ffi::luaL_ref(l, mlua::ffi::LUA_REGISTRYINDEX);
            mlua::ffi::lua_pushinteger(l, mlua::ffi::lua_Integer::from(r));
        })
    }
    .map_err(lua_err)?;
    ctx.weight_key
        .set(std::ffi::c_int::try_from(weight_key).unwrap_or(0));

    let rust = lua.create_table().map_err(lua_err)?;
    let set = |name: &str, f: mlua::Result<Function>| -> Result<(), LoadError> {
        rust.raw_set(name, f.map_err(lua_err)?).map_err(lua_err)
    };
    {
        let c = Rc::clone(&ctx);
        set(
            "stopped",
            lua.create_function(move |_, ()| Ok(c.preempt.stopping())),
        )?;
    }
    {
        let c = Rc::clone(&ctx);
        set(
            "log",
            lua.create_function(move |_, (level, text): (u8, mlua::String)| {
                if let Some(dropped) = c.log_permit() {
                    let rule = c.rule_name();
                    let text = text.to_string_lossy();
                    // The `rule` span nests in the worker's `scan` span (queue id) and that
                    // in the connection's. Made only when a rule logs: a span per rule run
                    // would cost more than most rules.
                    tracing::info_span!("rule", name = %rule).in_scope(|| match level {
                        1 => tracing::error!(dropped, "{text}"),
                        2 => tracing::warn!(dropped, "{text}"),
                        3 => tracing::info!(dropped, "{text}"),
                        _ => tracing::debug!(dropped, "{text}"),
                    });
                }
                Ok(())
            }),
        )?;
    }
    {
        let c = Rc::clone(&ctx);
        set(
            "re_match",
            lua.create_function(move |_, (p, t): (mlua::String, mlua::String)| {
                let re = c.regex(&p.to_str()?)?;
                Ok(re.is_match(&t.as_bytes()))
            }),
        )?;
        let c = Rc::clone(&ctx);
        set(
            "re_find",
            lua.create_function(move |_, (p, t): (mlua::String, mlua::String)| {
                let re = c.regex(&p.to_str()?)?;
                Ok(find(&re, &t))
            }),
        )?;
        let c = Rc::clone(&ctx);
        set(
            "re_captures",
            lua.create_function(move |lua, (p, t): (mlua::String, mlua::String)| {
                let re = c.regex(&p.to_str()?)?;
                captures(lua, &re, &t)
            }),
        )?;
        set(
            "is_private_ip",
            lua.create_function(|_, ip: Option<mlua::String>| {
                Ok(ip.is_some_and(|ip| is_private_text(&ip.as_bytes())))
            })
            .and_then(|slow| raw_closure(&lua, &ctx, &slow, is_private_ip_raw, None)),
        )?;
        set(
            "char_counts",
            lua.create_function(|_, (t, max): (mlua::String, Option<usize>)| {
                let b = t.as_bytes();
                Ok(char_counts(&b[..max.map_or(b.len(), |m| m.min(b.len()))]))
            })
            .and_then(|slow| raw_closure(&lua, &ctx, &slow, char_counts_raw, None)),
        )?;
        let c = Rc::clone(&ctx);
        set(
            "re_compile",
            lua.create_function(move |lua, p: mlua::String| {
                let re = c.regex(&p.to_str()?)?;
                compiled_regex(lua, re, c.memory_limit)
            }),
        )?;
        let c = Rc::clone(&ctx);
        set(
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
                                _ => Err(mlua::Error::runtime(
                                    "re.phrases: a phrase is not a string",
                                )),
                            })
                            .collect(),
                        _ => Err(mlua::Error::runtime("re.phrases: a list is not a table")),
                    })
                    .collect::<mlua::Result<_>>()?;
                let sets = PhraseSets::new(&phrases).map_err(mlua::Error::runtime)?;
                let p = Rc::new(Phrases {
                    sets,
                    phrases,
                    limit: c.memory_limit,
                    found: RefCell::new(Vec::new()),
                });
                let at = Rc::as_ptr(&p) as *mut std::ffi::c_void;
                let q = Rc::clone(&p);
                let search = lua.create_function(
                    move |lua, (_, t, max): (Value, mlua::String, Option<usize>)| {
                        q.search(lua, &t.as_bytes(), max)
                    },
                )?;
                let count = lua.create_function(
                    move |lua, (_, t, max): (Value, mlua::String, Option<usize>)| {
                        p.count(lua, &t.as_bytes(), max)
                    },
                )?;
                let matcher = lua.create_table_with_capacity(0, 2)?;
                matcher.raw_set(
                    "search",
                    raw_closure_at(lua, at, &search, phrases_search, None)?,
                )?;
                matcher.raw_set(
                    "count",
                    raw_closure_at(lua, at, &count, phrases_count, None)?,
                )?;
                Ok(matcher)
            }),
        )?;
        let c = Rc::clone(&ctx);
        set(
            "re_count",
            lua.create_function(move |_, (p, t): (mlua::String, mlua::String)| {
                let re = c.regex(&p.to_str()?)?;
                Ok(re.find_iter(&t.as_bytes()).take(MAX_MATCHES).count())
            }),
        )?;
    }
    {
        let lists: Vec<(String, Arc<List>)> = sources
            .lists
            .by_name
            .iter()
            .map(|(k, v)| (k.clone(), Arc::clone(v)))
            .collect();
        set(
            "list_open",
            lua.create_function(move |lua, name: String| -> mlua::Result<AnyUserData> {
                match lists.iter().find(|(n, _)| *n == name) {
                    Some((_, l)) => lua.create_userdata(ListHandle(Arc::clone(l))),
                    None => Err(mlua::Error::runtime(format!(
                        "list({name:?}): no such list (lists/{name}.ip|domain|email|str)"
                    ))),
                }
            }),
        )?;
    }
    {
        let limiter = Rc::new(RateLimiter {
            store: Arc::clone(env.store),
            namespace: env.namespace,
            observe: Rc::clone(&ctx.observe),
        });
        let at = Rc::as_ptr(&limiter) as *mut std::ffi::c_void;
        set(
            "ratelimit",
            lua.create_function(
                move |_, (name, value, limit, window): (mlua::String, Value, u64, u64)| {
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
                    let r = limiter.hit(&name.to_string_lossy(), &value, limit, window);
                    Ok((r.count, r.over))
                },
            )
            .and_then(|slow| raw_closure_at(&lua, at, &slow, ratelimit_raw, None)),
        )?;
    }
    {
        let modules: HashMap<String, (Arc<str>, String)> = sources
            .modules
            .iter()
            .map(|(k, v)| (k.clone(), (Arc::clone(&v.text), v.name.clone())))
            .collect();
        set(
            "module_source",
            lua.create_function(move |lua, name: String| match modules.get(&name) {
                Some((text, chunk)) => Ok((
                    Value::String(lua.create_string(text.as_bytes())?),
                    Value::String(lua.create_string(chunk)?),
                )),
                None => Ok((Value::Nil, Value::Nil)),
            }),
        )?;
    }
    {
        let c = Rc::clone(&ctx);
        set(
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
                    Err(e) => Ok(Some(e)),
                }
            }),
        )?;
    }

    {
        // The message view's primitives (`msg` methods in the prelude). Created once per state:
        // they read the scan's data through `Ctx::scan`.
        let c = Rc::clone(&ctx);
        let fetch = lua
            .create_function(move |lua, (id, a): (u8, Value)| {
                let data = c.scan()?;
                let _unlimited = Unlimited::new(lua, c.memory_limit);
                if id == CLASSIFY_FIELD {
                    return c.classify(data);
                }
                data.fetch(lua, id, a)
            })
            .map_err(lua_err)?;
        set(
            "fetch_scalar",
            raw_closure(&lua, &ctx, &fetch, fetch_scalar, None),
        )?;
        set(
            "fetch_array",
            raw_closure(&lua, &ctx, &fetch, fetch_array, None),
        )?;
        set(
            "fetch_table",
            raw_closure(&lua, &ctx, &fetch, fetch_table, None),
        )?;
        for (name, id) in [
            ("header", HEADER_FIELD),
            ("raw_header", RAW_HEADER_FIELD),
            ("header_count", HEADER_COUNT_FIELD),
        ] {
            set(
                name,
                raw_closure(&lua, &ctx, &fetch, method_scalar, Some(id)),
            )?;
        }
        set("fetch", Ok(fetch))?;
        // the field ids each raw fetch answers, for the prelude
        for (name, ids) in [
            ("array_fields", super::view::ARRAY_FIELDS),
            ("scalar_fields", super::view::SCALAR_FIELDS),
            ("table_fields", super::view::TABLE_FIELDS),
        ] {
            let ids = lua
                .create_sequence_from(ids.iter().copied())
                .map_err(lua_err)?;
            rust.raw_set(name, ids).map_err(lua_err)?;
        }
        let c = Rc::clone(&ctx);
        let stat = lua
            .create_function(move |_, (k, w, how, min): (Value, Value, Value, Value)| {
                let r = c.scan()?.stat(&c.windows, &k, &w, &how, &min)?;
                Ok((r[0], r[1], r[2], r[3], r[4], r[5], r[6]))
            })
            .map_err(lua_err)?;
        set("stat", raw_closure(&lua, &ctx, &stat, stat_raw, None))?;
        set(
            "stat_method",
            raw_closure(&lua, &ctx, &stat, method_stat, None),
        )?;
        let c = Rc::clone(&ctx);
        set(
            "stats",
            lua.create_function(move |lua, (k, w): (Value, Value)| {
                let data = c.scan()?;
                let _unlimited = Unlimited::new(lua, c.memory_limit);
                data.stats_table(lua, &c.windows, &k, &w)
            }),
        )?;
    }

    let prelude: Table = lua
        .load(PRELUDE)
        .set_name("@engine/prelude.lua")
        .call(rust)
        .map_err(lua_err)?;
    // What the prelude captured is all rules get; drop the dangerous rest from the globals.
    let g = lua.globals();
    for name in [
        "os",
        "load",
        "dofile",
        "loadfile",
        "require",
        "collectgarbage",
    ] {
        g.raw_set(name, Value::Nil).map_err(lua_err)?;
    }
    let load_file: Function = prelude.get("load_file").map_err(lua_err)?;
    let begin: Function = prelude.get("begin").map_err(lua_err)?;
    let finish: Function = prelude.get("finish").map_err(lua_err)?;

    for file in &sources.rules {
        *ctx.loading_file.borrow_mut() = file.name.clone();
        let text = lua.create_string(&*file.text).map_err(lua_err)?;
        let (r, stop) = ctx.preempt.run_for(Some(LOAD_CPU), || {
            load_file.call::<()>((text, file.name.as_str()))
        });
        if let Err(e) = r {
            return Err(if stop.is_some() {
                LoadError::Lua(format!(
                    "{}: top-level code ran out of its CPU budget ({} ms)",
                    file.name,
                    LOAD_CPU.as_millis()
                ))
            } else {
                lua_err(e)
            });
        }
    }
    ctx.loading_file.borrow_mut().clear();
    let registered = ctx.registered.take();
    *ctx.rule_names.borrow_mut() = registered.iter().map(|(m, _)| m.name.clone()).collect();
    if let Some(g) = generation {
        let same = registered.len() == g.rules.len()
            && registered.iter().zip(&g.rules).all(|((m, _), r)| m == r);
        if !same {
            return Err(LoadError::Declaration(
                "rule declarations differ from the generation's (do rule files declare rules conditionally?)"
                    .into(),
            ));
        }
    }
    lua.gc_collect().map_err(lua_err)?;
    // Most of what a scan allocates dies with the scan: the generational collector suits it,
    // as long as scans store nothing new in old objects (the prelude's `begin` and `finish`).
    // A minor collection when the heap has doubled since the last one (Lua's default: grown by
    // a fifth): it visits only the objects made since, mostly the garbage of the last ~50 scans,
    // still in cache. A major collection only when the heap has grown to five times its size
    // after the last one (default: twice). With minor collections at 200% and the default
    // major multiplier (stops 21-33), every collection was a major one, and its walk over the
    // whole state was 3-4% of the full scan's time; now the collector takes under 1%
    // (BENCHMARKS.md, stop 34). The memory limit holds either way: Lua collects fully before
    // it lets an allocation fail.
    lua.gc_gen(100, 400);
    let checks = lua
        .create_sequence_from(registered.iter().map(|(_, f)| f.clone()))
        .map_err(lua_err)?;
    ctx.marks.borrow_mut().reserve(registered.len());
    Ok((
        lua,
        ctx,
        registered,
        Entry {
            begin,
            checks,
            finish,
        },
    ))
}

/// Reads and validates a rule set: the next generation.
pub(super) fn build_generation(
    id: u64,
    location: &RuleLocation,
    sources: source::Sources,
    config: &EngineConfig,
    store: &Arc<dyn ReputationStore>,
    namespace: u8,
) -> Result<Generation, LoadError> {
    let start = Instant::now();
    // A state built only to read the declarations never scans: no windows needed.
    let windows = WindowNames::default();
    let env = BuildEnv {
        config,
        store,
        namespace,
        windows: &windows,
    };
    let (_lua, _ctx, registered, _) = build_state(&sources, None, &env)?;
    let rules: Vec<RuleMeta> = registered.into_iter().map(|(m, _)| m).collect();
    let mut symbols = HashMap::new();
    for (ri, r) in rules.iter().enumerate() {
        for (si, s) in r.symbols.iter().enumerate() {
            if s.name == RULE_ERROR || s.name == RULE_TIMEOUT {
                return Err(LoadError::Declaration(format!(
                    "{}: {} is reserved for the engine",
                    r.file, s.name
                )));
            }
            if let Some((other, _)) = symbols.insert(s.name.clone(), (ri, si)) {
                return Err(LoadError::Declaration(format!(
                    "{}: symbol {} is already declared by rule {} in {}",
                    r.file, s.name, rules[other].name, rules[other].file
                )));
            }
        }
    }
    let counters = rules.iter().map(|_| RuleCounters::default()).collect();
    Ok(Generation {
        id,
        location: location.clone(),
        sources,
        rules,
        symbols,
        counters,
        build_time: start.elapsed(),
    })
}

#[derive(Debug, Clone, Copy, Default)]
struct LocalCounters {
    runs: u64,
    hits: u64,
    errors: u64,
    timeouts: u64,
    nanos: u64,
}

/// Runs rules for one scan thread. Not `Send`: it owns a Lua state.
pub struct RuleRunner {
    engine: Arc<Engine>,
    loaded: Option<LoadedState>,
    /// A generation whose state failed to build here: not tried again while an older state
    /// can serve (each try logs an error and costs a full build) until the next reload.
    failed: Option<u64>,
    counters: Vec<LocalCounters>,
    scans: u32,
}

impl RuleRunner {
    pub(super) fn new(engine: Arc<Engine>) -> Self {
        RuleRunner {
            engine,
            loaded: None,
            failed: None,
            counters: Vec::new(),
            scans: 0,
        }
    }

    /// The generation this runner's state holds (the one its last `run` used), if built.
    pub fn generation(&self) -> Option<&Arc<Generation>> {
        self.loaded.as_ref().map(|l| &l.generation)
    }

    /// Lua memory in use, bytes.
    pub fn memory(&self) -> usize {
        self.loaded.as_ref().map_or(0, |l| l.lua.used_memory())
    }

    /// Moves local per-rule counters into the generation's shared ones.
    pub fn flush_counters(&mut self) {
        self.scans = 0;
        let Some(l) = &self.loaded else { return };
        for (local, shared) in self.counters.iter_mut().zip(&l.generation.counters) {
            use std::sync::atomic::Ordering::Relaxed;
            shared.runs.fetch_add(local.runs, Relaxed);
            shared.hits.fetch_add(local.hits, Relaxed);
            shared.errors.fetch_add(local.errors, Relaxed);
            shared.timeouts.fetch_add(local.timeouts, Relaxed);
            shared.nanos.fetch_add(local.nanos, Relaxed);
            *local = LocalCounters::default();
        }
    }

    /// Makes sure the state holds the engine's current generation. `run` calls it; the scan
    /// workers also call it at start and when idle, so the first message after a start or a
    /// reload does not wait for the build (~100 ms).
    pub fn warm(&mut self) {
        let current = self.engine.generation();
        // Without any state (the first generation failed here) every message tries again.
        if (self.failed == Some(current.id) && self.loaded.is_some())
            || self
                .loaded
                .as_ref()
                .is_some_and(|l| l.generation.id == current.id)
        {
            return;
        }
        self.flush_counters();
        let env = BuildEnv {
            config: self.engine.config(),
            store: self.engine.store(),
            namespace: self.engine.namespace(),
            windows: self.engine.windows(),
        };
        match build_state(&current.sources, Some(&current), &env) {
            Ok((lua, ctx, registered, entry)) => {
                let rule_seeds = registered
                    .iter()
                    .map(|(m, _)| hash_bytes(m.name.as_bytes()))
                    .collect();
                self.engine.state_built();
                self.counters = vec![LocalCounters::default(); registered.len()];
                self.loaded = Some(LoadedState {
                    generation: current,
                    lua,
                    ctx,
                    begin: entry.begin,
                    checks: entry.checks,
                    finish: entry.finish,
                    rule_seeds,
                });
            }
            Err(e) => {
                self.failed = Some(current.id);
                tracing::error!(generation = current.id, error = %e, "cannot build the Lua state of a new generation; staying on the previous one");
            }
        }
    }

    /// Runs every rule of the current generation over one message. `sample` is a stable hash
    /// of the message, choosing where test-mode rules apply.
    pub fn run(&mut self, data: &MessageData<'_>, sample: u64) -> RuleOutcome {
        self.warm();
        let mut out = RuleOutcome::default();
        let Some(st) = &self.loaded else {
            out.errors
                .push(("(engine)".into(), "no rule set could be loaded".into()));
            return out;
        };
        out.generation = st.generation.id;
        let cfg = self.engine.config();
        let gen = &st.generation;
        let ctx = &st.ctx;
        let counters = &mut self.counters;
        let mut memory_error = false;
        ctx.applied.borrow_mut().clear();
        ctx.plain_hits.borrow_mut().clear();
        {
            let mut applies = ctx.applies.borrow_mut();
            applies.clear();
            applies.extend(gen.rules.iter().enumerate().map(|(i, meta)| {
                !meta.shadow
                    && meta
                        .share
                        .is_none_or(|s| selected(sample, st.rule_seeds[i], s))
            }));
        }
        *ctx.classified.borrow_mut() = None;
        ctx.observe.set(data.observe);
        let guard = ScanGuard::new(ctx, data);
        ctx.timed.set(self.scans.is_multiple_of(TIME_EVERY));
        ctx.preempt.begin_scan();
        let result = (|| -> mlua::Result<()> {
            let msg: Table = st.begin.call(())?;
            let mut skipped = 0usize;
            let n = gen.rules.len();
            // `run_checks` runs rules until one hits, fails or is stopped; each such rule is
            // read here, then the loop goes on after it.
            let mut next = 0usize;
            while next < n {
                ctx.marks.borrow_mut().clear();
                // set by `run_checks` for each rule it starts
                ctx.current_rule.set(usize::MAX);
                let (r, stop) = ctx.preempt.run(|| {
                    // SAFETY: the arguments are the checks and `msg`, as `run_checks` needs.
                    #[allow(unsafe_code)]
                    unsafe {
                        st.lua.exec_raw::<MultiValue>((&st.checks, &msg), |l| {
                            run_checks(l, ctx, next, n)
                        })
                    }
                });
                // Runs and times of the rules this call started: a rule's end is the next
                // one's start, the last one's is now (after its result reached Rust).
                let t_end = ctx.now();
                // the plain hits `run_checks` read itself, before the rule it stopped at
                {
                    let mut plain = ctx.plain_hits.borrow_mut();
                    let applies = ctx.applies.borrow();
                    let mut last = usize::MAX;
                    for (i, si, w, options) in plain.drain(..) {
                        let (Some(meta), Some(c)) = (gen.rules.get(i), counters.get_mut(i)) else {
                            continue;
                        };
                        if i != last {
                            c.hits += 1;
                            last = i;
                        }
                        let s = &meta.symbols[si];
                        out.hits.push(Hit {
                            symbol: s.name.clone(),
                            score: s.score * w,
                            options,
                            action: s.action,
                            shadow: !applies.get(i).copied().unwrap_or(false),
                        });
                    }
                }
                {
                    // (on an untimed scan every mark is `epoch`: only the runs are counted)
                    let timed = ctx.timed.get();
                    let marks = ctx.marks.borrow();
                    for (k, &(i, t0)) in marks.iter().enumerate() {
                        if let Some(c) = counters.get_mut(i as usize) {
                            c.runs += 1;
                            if timed {
                                let t1 = marks.get(k + 1).map_or(t_end, |m| m.1);
                                c.nanos +=
                                    t1.duration_since(t0).as_nanos() as u64 * u64::from(TIME_EVERY);
                            }
                        }
                    }
                }
                let timeout = |meta: &RuleMeta, c: &mut LocalCounters, out: &mut RuleOutcome| {
                    c.timeouts += 1;
                    let why = if stop == Some(Stop::Call) {
                        format!("rule CPU budget of {} ms exhausted", cfg.rule_cpu_ms)
                    } else {
                        format!("message CPU budget of {} ms exhausted", cfg.message_cpu_ms)
                    };
                    out.timeouts.push((meta.name.clone(), why));
                };
                let values = match r {
                    Ok(values) => values,
                    Err(e) => {
                        // Raised outside every rule's own protected call (`exec_raw` failing):
                        // it belongs to the rule `run_checks` was running, if it had started
                        // one (so the loop moves on), else to the engine.
                        let i = ctx.current_rule.get();
                        let (Some(meta), Some(c)) = (gen.rules.get(i), counters.get_mut(i)) else {
                            return Err(e);
                        };
                        if stop.is_some() {
                            timeout(meta, c, &mut out);
                        } else {
                            c.errors += 1;
                            memory_error |= matches!(e, mlua::Error::MemoryError(_));
                            out.errors.push((meta.name.clone(), describe(&e)));
                        }
                        next = i + 1;
                        continue;
                    }
                };
                let mut values = values.into_iter();
                let code = match values.next() {
                    Some(Value::Integer(code)) => code,
                    other => {
                        return Err(mlua::Error::runtime(format!(
                            "rule loop returned {other:?}"
                        )))
                    }
                };
                if code == 0 {
                    break;
                }
                let i = code.unsigned_abs() as usize - 1;
                if code < 0 {
                    skipped += n.saturating_sub(i);
                    break;
                }
                next = i + 1;
                let (Some(meta), Some(c)) = (gen.rules.get(i), counters.get_mut(i)) else {
                    return Err(mlua::Error::runtime(format!(
                        "rule loop returned rule {code}"
                    )));
                };
                if !matches!(values.next(), Some(Value::Boolean(true))) {
                    // the rule raised an error, which its protected call caught
                    if stop.is_some() {
                        timeout(meta, c, &mut out);
                        continue;
                    }
                    c.errors += 1;
                    let (text, memory) = error_value(values.next().unwrap_or(Value::Nil));
                    memory_error |= memory;
                    out.errors.push((meta.name.clone(), text));
                    continue;
                }
                let applied = ctx.applies.borrow().get(i).copied().unwrap_or(false);
                match interpret(meta, values.collect()) {
                    Ok(hits) => {
                        if !hits.is_empty() {
                            c.hits += 1;
                        }
                        for (si, weight, options) in hits {
                            let s = &meta.symbols[si];
                            if applied {
                                ctx.applied.borrow_mut().push((i, si));
                            }
                            out.hits.push(Hit {
                                symbol: s.name.clone(),
                                score: s.score * weight,
                                options,
                                action: s.action,
                                shadow: !applied,
                            });
                        }
                    }
                    Err(e) => {
                        c.errors += 1;
                        out.errors
                            .push((meta.name.clone(), format!("{}: {e}", meta.file)));
                    }
                }
            }
            ctx.current_rule.set(usize::MAX);
            if skipped > 0 {
                out.timeouts.push((
                    "(message)".into(),
                    format!("{skipped} rules skipped: message budget exhausted"),
                ));
            }
            st.finish.call::<()>(())?;
            Ok(())
        })();
        ctx.preempt.end_scan();
        drop(guard);
        if let Err(e) = result {
            out.errors.push(("(engine)".into(), describe(&e)));
        }
        if let Some((p, features)) = ctx.classified.borrow_mut().take() {
            out.probability = p;
            out.features = Some(features);
        }
        for (rule, error) in out.errors.iter().chain(&out.timeouts) {
            if ctx.log_permit().is_some() {
                tracing::warn!(rule = %rule, error = %error, "rule failed");
            }
        }
        if memory_error {
            let _ = st.lua.gc_collect();
        }
        self.scans += 1;
        if self.scans >= FLUSH_EVERY {
            self.flush_counters();
        }
        out
    }
}

impl Drop for RuleRunner {
    fn drop(&mut self) {
        self.flush_counters();
    }
}

/// Whether a test-mode rule applies to this message.
fn selected(sample: u64, seed: u64, share: f64) -> bool {
    let mut h = sample ^ seed;
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    ((h % 1_000_000) as f64) < share * 1_000_000.0
}

/// Reads a check's return values: `(symbol index, weight, options)` per hit.
fn interpret(
    meta: &RuleMeta,
    values: MultiValue,
) -> Result<Vec<(usize, f64, Vec<String>)>, String> {
    let mut it = values.into_iter();
    let first = it.next().unwrap_or(Value::Nil);
    let symbol_index = |name: &str| -> Result<usize, String> {
        meta.symbols
            .iter()
            .position(|s| s.name == name)
            .ok_or_else(|| format!("rule {} returned undeclared symbol {name}", meta.name))
    };
    match first {
        Value::Table(t) if meta.multi => {
            let mut hits = Vec::new();
            for pair in t.pairs::<Value, Value>() {
                let (k, v) = pair.map_err(|e| describe(&e))?;
                let name = match &k {
                    Value::String(s) => s.to_string_lossy(),
                    _ => return Err(format!("rule {}: hit tables map symbol names", meta.name)),
                };
                let si = symbol_index(&name)?;
                let (weight, options) = match v {
                    Value::Table(o) => {
                        let w = match o.raw_get::<Value>("weight").map_err(|e| describe(&e))? {
                            Value::Nil => 1.0,
                            w => weight(&w, meta)?.unwrap_or(0.0),
                        };
                        (Some(w), options_of(std::iter::once(Value::Table(o)))?)
                    }
                    other => (weight(&other, meta)?, Vec::new()),
                };
                if let Some(w) = weight.filter(|w| *w != 0.0) {
                    hits.push((si, w, options));
                }
            }
            hits.sort_by_key(|h| h.0);
            Ok(hits)
        }
        Value::String(s) => {
            let name = s.to_string_lossy();
            let si = symbol_index(&name)?;
            let rest: Vec<Value> = it.collect();
            let (w, opts) = match rest.first() {
                Some(
                    v @ (Value::Boolean(_) | Value::Integer(_) | Value::Number(_) | Value::Nil),
                ) => (weight(v, meta)?, options_of(rest.into_iter().skip(1))?),
                _ => (Some(1.0), options_of(rest.into_iter())?),
            };
            Ok(match w.filter(|w| *w != 0.0) {
                Some(w) => vec![(si, w, opts)],
                None => Vec::new(),
            })
        }
        other if !meta.multi => match weight(&other, meta)? {
            Some(w) if w != 0.0 => Ok(vec![(0, w, options_of(it)?)]),
            _ => Ok(Vec::new()),
        },
        Value::Nil | Value::Boolean(false) => Ok(Vec::new()),
        _ => Err(format!(
            "rule {} declares several symbols: return a symbol name or a table of hits",
            meta.name
        )),
    }
}

fn weight(v: &Value, meta: &RuleMeta) -> Result<Option<f64>, String> {
    match v {
        Value::Nil | Value::Boolean(false) => Ok(None),
        Value::Boolean(true) => Ok(Some(1.0)),
        Value::Integer(i) => Ok(Some(*i as f64)),
        Value::Number(n) if n.is_finite() => Ok(Some(*n)),
        other => Err(format!(
            "rule {} returned {} where a hit (true/false/weight) was expected",
            meta.name,
            other.type_name()
        )),
    }
}

fn options_of(values: impl Iterator<Item = Value>) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    let mut push = |v: &Value| {
        if out.len() >= MAX_OPTIONS {
            return;
        }
        let s = match v {
            Value::String(s) => s.to_string_lossy(),
            Value::Integer(i) => i.to_string(),
            Value::Number(n) => n.to_string(),
            Value::Boolean(b) => b.to_string(),
            _ => return,
        };
        let mut s = s;
        truncate_option(&mut s);
        out.push(s);
    };
    for v in values {
        match &v {
            Value::Table(t) => {
                for item in sequence(t).map_err(|e| describe(&e))? {
                    push(&item);
                }
            }
            other => push(other),
        }
    }
    Ok(out)
}

/// The values `t[1]..t[#t]`, read as Lua code would (through `__index` and `__len`, so a
/// read-only view of a module's table reads like the table), at most `MAX_SEQUENCE` of them.
fn sequence(t: &Table) -> mlua::Result<Vec<Value>> {
    let n = usize::try_from(t.len()?).unwrap_or(0).min(MAX_SEQUENCE);
    (1..=n).map(|i| t.get::<Value>(i)).collect()
}

/// Most items read from one Lua sequence handed to the engine.
const MAX_SEQUENCE: usize = 1 << 20;

#[cfg(test)]
mod tests {
    use super::char_counts;

    /// The classes as a `match` per byte gives them: every byte value, alone and in a long mixed
    /// text (past a chunk's end).
    #[test]
    fn char_counts_classify_every_byte() {
        let naive = |t: &[u8]| {
            let mut c = (0, 0, 0, 0, 0);
            for &b in t {
                match b {
                    b'A'..=b'Z' => c.0 += 1,
                    b'a'..=b'z' => c.1 += 1,
                    b'0'..=b'9' => c.2 += 1,
                    b' ' | b'\t' | b'\r' | b'\n' => c.3 += 1,
                    _ => c.4 += 1,
                }
            }
            c
        };
        for b in 0..=255u8 {
            assert_eq!(char_counts(&[b]), naive(&[b]), "byte {b}");
        }
        let text: Vec<u8> = (0..200_000u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        assert_eq!(char_counts(&text), naive(&text));
        assert_eq!(char_counts(b""), (0, 0, 0, 0, 0));
    }
}
