//! Every use of Lua's C API in the engine: the raw C functions behind the hottest primitives
//! (`msg` fields, `msg:stat`, compiled regexes, phrase matchers, `ratelimit`, `char_counts`),
//! record arrays pushed in one protected call, and the rules' loop. The rest of `engine/` is
//! safe code over mlua; `preempt.rs` (signals and the stop hook) is the only other module with
//! `unsafe`.
//!
//! Why: a call of an mlua function costs ~700 instructions of argument conversion, registry
//! handles and error plumbing before any work, and rules read ~20 scalar fields and ~9
//! `msg:stat`s a message; a rule's call from Rust through mlua cost ~800 instructions more than
//! `run_checks`' own `lua_pcall`.
//!
//! # Safety contract
//!
//! 1. **Closures and their upvalues.** Every raw C function is made into a closure by
//!    `raw_closure`, from a `Slow<T>` and a `RawFn<T>`, both only built in this module. Upvalue 1
//!    is a light userdata pointing at a `T` (the state's `StateCtx`, a `RegexHandle`, a `Phrases`,
//!    a `RateLimiter`, or nothing read); upvalue 2 is the mlua function doing the same work
//!    (`Slow::func`), which owns an `Rc<T>` of that very value, so the pointer is valid as long as
//!    the closure lives (a closure keeps its upvalues alive). The C function of a `RawFn<T>` reads
//!    upvalue 1 as a `T` and nothing else. Upvalue 3, on `msg`'s methods, is a field id. Lua code
//!    cannot read or replace upvalues: the state has no `debug` library (`StdLib` in `build_state`
//!    leaves it out, and nothing else loads it). (`profiled_call`, the one C closure made
//!    otherwise, has a single upvalue: the Lua function it calls.)
//! 2. **The scan's data (`ScanSlot`).** `ScanCtx::slot` holds a pointer to the `MessageData` of the
//!    scan in progress, or null. `ScanSlot::enter` sets it from a `&MessageData` and the
//!    `ScanGuard` it returns clears it on drop (also when unwinding). `RuleRunner::run` makes the
//!    guard from data that outlives it, and calls Lua only while it lives; the state is
//!    single-threaded (`Lua` is not `Send`). So a primitive called during a Lua call finds either
//!    null (it raises "msg used outside its scan") or data valid for the whole call; the references
//!    it takes do not leave the call.
//! 3. **No destructor across a Lua error.** Lua raises errors (a bad argument, "not enough
//!    memory" while pushing, the CPU budget's stop) by `longjmp` to the nearest protected
//!    call, which skips the Rust frames in between: that is defined only for frames that own
//!    nothing with a destructor. So at every C API call that can raise, the frames here own
//!    nothing droppable: values are borrowed from the scan's data or from the Lua stack, an
//!    owned result is first moved into a buffer outside the frame (`Lent`), panics are caught
//!    (`catch_unwind`) and their payloads dropped before Lua is called, and errors raised
//!    are static C strings (`raise`).
//! 4. **Re-entry.** A push can run the garbage collector, and a collection can run finalizers.
//!    The buffers a C function pushes from are `Lent`: a call finding its buffer lent (a
//!    finalizer re-entering it during the pushes, or a push that raised and never gave it back)
//!    answers through its mlua function instead, so no call can change a buffer another one is
//!    reading; `ScanSlot::enter`, between scans, frees the scan's buffers a raising call left
//!    lent. This holds whatever finalizers exist; it does not rely on the prelude's ban of
//!    `__gc` for rules (that ban is about CPU budgets: finalizers run with hooks off). The
//!    finalizers Rust puts in the state (mlua's userdata and callbacks) only drop Rust values
//!    (`Rc`s of the handles, `Arc`s of lists), which run no Lua.
//! 5. **Stack space.** A C function starts with `LUA_MINSTACK` (20) free slots; each says how
//!    many it uses (at most 3 + 4 here). `Lua::exec_raw` checks for the slots its closure uses;
//!    `run_checks` and `plain_hit` check with `lua_checkstack` before growing the stack.
//! 6. **Stack invariants of entry points.** `run_checks` runs inside `exec_raw` with exactly
//!    the checks table (1) and `msg` (2) on the stack, and leaves its answer in place of them;
//!    `plain_hit` reads the rule's results at 3..top and leaves the stack as it found it;
//!    `slow_call` passes the C function's first `nargs` arguments on, unchanged.

// Cargo.toml denies unsafe code in every target; this module, under the contract above, is one
// of the two that allow it (the other is `engine::preempt`).
#![allow(unsafe_code)]

mod api;
mod fields;
mod records;
mod rules;

use std::cell::{Cell, UnsafeCell};
use std::ffi::{c_int, c_void, CStr};
use std::marker::PhantomData;
use std::rc::Rc;

use mlua::{ffi, FromLuaMulti, Function, IntoLuaMulti, Lua};

use super::view::{Arg, MessageData};

pub(super) use api::{char_counts_functions, compiled_regex, phrase_matcher, ratelimit};
pub(super) use fields::install as install_fields;
pub(super) use records::{record, records, Field, Row};
pub(super) use rules::{profiled, run_rules};

/// A raw C function that reads upvalue 1 as a `T` (see the contract, 1).
struct RawFn<T> {
    f: ffi::lua_CFunction,
    _reads: PhantomData<fn(&T)>,
}

impl<T> RawFn<T> {
    const fn new(f: ffi::lua_CFunction) -> Self {
        RawFn {
            f,
            _reads: PhantomData,
        }
    }
}

impl<T> Clone for RawFn<T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for RawFn<T> {}

/// An mlua function owning an `Rc<T>`, and where that `T` is: a raw closure's slow path and
/// upvalue 1.
pub(super) struct Slow<T> {
    func: Function,
    at: *const T,
}

impl<T: 'static> Slow<T> {
    /// The mlua function `f` over `owner` (which it keeps alive).
    fn new<A, R>(
        lua: &Lua,
        owner: &Rc<T>,
        f: impl Fn(&Lua, &T, A) -> mlua::Result<R> + 'static,
    ) -> mlua::Result<Self>
    where
        A: FromLuaMulti,
        R: IntoLuaMulti,
    {
        let at = Rc::as_ptr(owner);
        let owner = Rc::clone(owner);
        let func = lua.create_function(move |lua, a: A| f(lua, &owner, a))?;
        Ok(Slow { func, at })
    }

    /// The mlua function itself.
    pub(super) fn function(&self) -> &Function {
        &self.func
    }
}

/// The closure of the C function `f` with its upvalues: `slow`'s target, `slow`'s function,
/// and `id` when given (contract, 1).
fn raw_closure<T>(
    lua: &Lua,
    slow: &Slow<T>,
    f: RawFn<T>,
    id: Option<u8>,
) -> mlua::Result<Function> {
    let at = slow.at as *mut c_void;
    // SAFETY: the stack holds `slow.func` (the argument); two or three pushes (one rotated
    // below it), then the closure takes all the values as upvalues. `exec_raw` checks for
    // three free slots.
    unsafe {
        lua.exec_raw::<Function>(&slow.func, |l| {
            ffi::lua_pushlightuserdata(l, at);
            ffi::lua_insert(l, -2);
            let mut n = 2;
            if let Some(id) = id {
                ffi::lua_pushinteger(l, ffi::lua_Integer::from(id));
                n = 3;
            }
            ffi::lua_pushcclosure(l, f.f, n);
        })
    }
}

/// The `T` of a raw closure's upvalue 1.
///
/// # Safety
/// Only in the C function of a `RawFn<T>` (contract, 1).
unsafe fn target<'t, T>(l: *mut ffi::lua_State) -> &'t T {
    // SAFETY: as above.
    unsafe { &*(ffi::lua_touserdata(l, ffi::lua_upvalueindex(1)) as *const T) }
}

/// Argument `i` of a raw C function, borrowed from the Lua stack (where it stays for the call).
///
/// # Safety
/// `l` is the running C function's state.
unsafe fn raw_arg<'a>(l: *mut ffi::lua_State, i: c_int) -> Arg<'a> {
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

/// The bytes of the string at stack slot `i`, or None for any other type (numbers are not
/// converted: that would allocate).
///
/// # Safety
/// `i` is a valid slot; the bytes live while the string stays on the stack.
unsafe fn raw_bytes<'a>(l: *mut ffi::lua_State, i: c_int) -> Option<&'a [u8]> {
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

/// Answers a raw closure's call with its mlua function (upvalue 2) and the same first `nargs`
/// arguments, returning what that returns.
///
/// # Safety
/// In a raw closure's C function, whose frames own nothing with a destructor (contract, 3).
unsafe fn slow_call(l: *mut ffi::lua_State, nargs: c_int) -> c_int {
    // SAFETY: at most four arguments and the function: five slots, within LUA_MINSTACK.
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
/// As `slow_call`.
unsafe fn raise(l: *mut ffi::lua_State, msg: &'static CStr) -> ! {
    // SAFETY: one slot; `lua_error` does not return.
    unsafe {
        ffi::lua_pushstring(l, msg.as_ptr());
        ffi::lua_error(l)
    }
}

/// A buffer a raw C function fills and pushes from, outside its frame (contract, 3), lent to
/// one call at a time (contract, 4).
pub(super) struct Lent<T> {
    value: UnsafeCell<T>,
    lent: Cell<bool>,
}

impl<T: Default> Default for Lent<T> {
    fn default() -> Self {
        Lent {
            value: UnsafeCell::new(T::default()),
            lent: Cell::new(false),
        }
    }
}

impl<T> Lent<T> {
    /// The buffer, for the caller alone until `give_back`; None while another call has it.
    ///
    /// # Safety
    /// The reference is used only until `give_back` is called (or a Lua error unwinds the
    /// caller, which then never gives it back: the buffer stays lent, and the calls after
    /// take their slow path).
    #[allow(clippy::mut_from_ref)]
    unsafe fn borrow(&self) -> Option<&mut T> {
        if self.lent.replace(true) {
            return None;
        }
        // SAFETY: `lent` was false: no other reference exists (see above).
        Some(unsafe { &mut *self.value.get() })
    }

    fn give_back(&self) {
        self.lent.set(false);
    }

    /// Makes a buffer lent to a call that raised available again.
    ///
    /// # Safety
    /// No call holds the buffer: no Lua call of the state is in progress.
    unsafe fn reclaim(&self) {
        self.lent.set(false);
    }
}

/// The scan whose data the primitives read, and the buffers the raw field functions push from
/// (contract, 2).
#[derive(Default)]
pub(super) struct ScanSlot {
    data: Cell<*const ()>,
    /// An owned string `fetch_scalar` is pushing.
    scratch: Lent<String>,
    /// The values `fetch_array` is pushing.
    cells: Lent<super::view::Cells>,
}

/// Publishes a scan's data to the primitives and withdraws it on drop, also when unwinding.
pub(super) struct ScanGuard<'s>(&'s ScanSlot);

impl ScanSlot {
    /// Publishes `data` until the guard drops. Called by `RuleRunner::run` before it calls
    /// Lua for a scan, so no Lua call of the state is in progress: buffers a raising call left
    /// lent are free again.
    pub(super) fn enter<'s>(&'s self, data: &'s MessageData<'_>) -> ScanGuard<'s> {
        self.data.set(data as *const MessageData<'_> as *const ());
        // SAFETY: see above.
        unsafe {
            self.scratch.reclaim();
            self.cells.reclaim();
        }
        ScanGuard(self)
    }

    /// The message being scanned, or an error when called outside a scan (a rule kept a
    /// primitive and called it later).
    fn get(&self) -> mlua::Result<&MessageData<'_>> {
        let p = self.data.get() as *const MessageData<'_>;
        if p.is_null() {
            return Err(mlua::Error::runtime("msg used outside its scan"));
        }
        // SAFETY: contract, 2: non-null only while a guard lives, over data that outlives
        // it; the primitives that call this run inside Lua calls made meanwhile, and the
        // reference does not leave them.
        Ok(unsafe { &*p })
    }
}

impl Drop for ScanGuard<'_> {
    fn drop(&mut self) {
        self.0.data.set(std::ptr::null());
    }
}

/// The `StateCtx` and the scan's data in a raw closure's C function over the `StateCtx`;
/// raises outside a scan.
///
/// # Safety
/// Only in the C function of a `RawFn<StateCtx>` (contract, 1 and 3).
unsafe fn raw_scan<'c>(
    l: *mut ffi::lua_State,
) -> (&'c super::state::StateCtx, &'c MessageData<'c>) {
    // SAFETY: see above; `data` is non-null only during a scan, when it points at that
    // scan's `MessageData`, which outlives the call (contract, 2).
    let ctx: &super::state::StateCtx = unsafe { target(l) };
    let p = ctx.scan.slot.data.get() as *const MessageData<'_>;
    if p.is_null() {
        unsafe { raise(l, c"msg used outside its scan") }
    }
    (ctx, unsafe { &*p })
}

/// A registry reference to the string `s`, which the registry keeps alive (`plain_hit` reads
/// hit tables' `weight` with it, without making the key string each time).
pub(super) fn registry_string(lua: &Lua, s: &'static CStr) -> mlua::Result<c_int> {
    // SAFETY: one slot; `luaL_ref` pops it into the registry, then one push of the answer.
    let r = unsafe {
        lua.exec_raw::<i64>((), |l| {
            ffi::lua_pushstring(l, s.as_ptr());
            let r = ffi::luaL_ref(l, ffi::LUA_REGISTRYINDEX);
            ffi::lua_pushinteger(l, ffi::lua_Integer::from(r));
        })
    }?;
    Ok(c_int::try_from(r).unwrap_or(0))
}
