//! The rules' loop: each rule's protected call, its CPU budget and start time, and the plain
//! hits read straight off the Lua stack. The runner (`runner.rs`) reads what the loop leaves
//! for it (a rule that hit in another form, failed or was stopped) and goes on after it.

use std::ffi::c_int;

use mlua::{ffi, Function, Lua, MultiValue, Table};

use super::raw_bytes;
use crate::engine::hits::{truncate_option, MAX_OPTIONS};
use crate::engine::state::StateCtx;

/// Runs the rules `next..n` of `checks` on `msg` (see `run_checks`) and returns what the loop
/// left: 0 when all ran; -k when the message budget ran out before rule k (1-based); or k,
/// then true and what rule k returned, or false and the error its call raised.
pub(in crate::engine) fn run_rules(
    lua: &Lua,
    ctx: &StateCtx,
    checks: &Table,
    msg: &Table,
    next: usize,
    n: usize,
) -> mlua::Result<MultiValue> {
    // SAFETY: the arguments are the checks and `msg`, as `run_checks` needs (contract, 6).
    unsafe { lua.exec_raw::<MultiValue>((checks, msg), |l| run_checks(l, ctx, next, n)) }
}

/// `check` called through `profiled_call`, a C function of its own, so that callgrind's
/// `--toggle-collect=*profiled_call` counts that rule's instructions alone (in the set as it
/// runs). `RuleRunner::profile_rule` puts it in the state's table of checks in place of that
/// rule's check: the loop itself has no test for it.
pub(in crate::engine) fn profiled(lua: &Lua, check: &Function) -> mlua::Result<Function> {
    // SAFETY: the stack holds `check`; the closure takes it as its one upvalue.
    unsafe {
        lua.exec_raw::<Function>(check, |l| {
            ffi::lua_pushcclosure(l, profiled_call, 1);
        })
    }
}

/// Calls upvalue 1 with the arguments, returning what it returns.
#[inline(never)]
unsafe extern "C-unwind" fn profiled_call(l: *mut ffi::lua_State) -> c_int {
    // SAFETY: one push (within LUA_MINSTACK); the frame owns nothing, so the rule's errors
    // may unwind over it (contract, 3).
    unsafe {
        let nargs = ffi::lua_gettop(l);
        ffi::lua_pushvalue(l, ffi::lua_upvalueindex(1));
        ffi::lua_insert(l, 1);
        ffi::lua_call(l, nargs, ffi::LUA_MULTRET);
        ffi::lua_gettop(l)
    }
}

/// Runs the checks from rule `next` (0-based) on, inside `Lua::exec_raw`, whose stack holds
/// the checks (1) and the scan's `msg` (2). Each rule gets its own protected call, CPU budget
/// (`Preempt::next_call`) and start time (`ScanCtx::marks`); a rule that returns nil or false (most
/// of them, most of the time) is done here. Leaves on the stack what Rust reads next: 0 when
/// all ran; -k when the message budget ran out before rule k (1-based), which did not run; or
/// k, then true and what rule k returned when it returned something else, or false and the
/// error its call raised. A call from Rust through mlua per rule cost ~800 instructions more.
///
/// # Safety
/// Only inside `exec_raw` with those two arguments. No call here raises a Lua error: the
/// protected call catches the rule's, and the other calls neither allocate in Lua nor grow the
/// stack past the slots checked for.
unsafe fn run_checks(l: *mut ffi::lua_State, ctx: &StateCtx, mut next: usize, n: usize) {
    // SAFETY (whole body): see above.
    unsafe {
        while next < n {
            ctx.scan.current_rule.set(next);
            ctx.scan
                .marks
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
            let status = ffi::lua_pcall(l, 1, ffi::LUA_MULTRET, 0);
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
            ffi::lua_pushboolean(l, c_int::from(ok));
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

/// Reads what a rule returned (stack slots 3 to the top) when it is a plain hit, the forms rules
/// return nearly always: `true` or a weight, then options (strings, numbers, booleans, or arrays of
/// them), for a rule of one symbol; a table of declared symbols to `true`, a weight, or a table of
/// options with an optional `weight`, for a rule of several. Records the hits in
/// `ScanCtx::plain_hits` (and `ScanCtx::applied`) as `interpret` would have made them and returns
/// true; a return value Rust's `interpret` would have to read or reject (a symbol name, an
/// undeclared symbol, a weight that is no number) is left to it: false, nothing recorded. Saves a
/// hit the way back to Rust (~5 k instructions).
///
/// # Safety
/// Inside `run_checks`, the rule's results at 3..top. No call here raises or runs Lua code:
/// raw reads of tables and stack slots, with the stack space checked first.
unsafe fn plain_hit(l: *mut ffi::lua_State, ctx: &StateCtx, rule: usize) -> bool {
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
        let applies = ctx
            .scan
            .applies
            .borrow()
            .get(rule)
            .copied()
            .unwrap_or(false);
        if applies {
            let mut applied = ctx.scan.applied.borrow_mut();
            applied.extend(found.iter().map(|h| (rule, h.0)));
        }
        let mut hits = ctx.scan.plain_hits.borrow_mut();
        hits.extend(found.into_iter().map(|(si, w, o)| (rule, si, w, o)));
        true
    }
}

/// A hit's weight as `weight` reads it: true 1, false 0 (no hit), a finite number; None for
/// anything else (Rust words the error).
///
/// # Safety
/// `i` is a valid slot.
unsafe fn hit_weight(l: *mut ffi::lua_State, i: c_int) -> Option<f64> {
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
unsafe fn add_options(l: *mut ffi::lua_State, i: c_int, out: &mut Vec<String>) {
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
unsafe fn add_option(l: *mut ffi::lua_State, i: c_int, out: &mut Vec<String>) {
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
