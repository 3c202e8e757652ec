//! The `msg` fields, one path per kind (`FieldKind`), each with its fast form (a raw C
//! function pushing the value itself) and its slow form (the mlua `fetch`, which answers what
//! the fast form leaves to it: long strings, records, bad arguments with their errors) side by
//! side. The test at the end checks that both give the same value for every field.
//!
//! The prelude sends each field to the function of its kind (the id lists `install` hands it);
//! every C function here is a closure over the state's `StateCtx` with `fetch` as its slow path.

use std::borrow::Cow;
use std::ffi::c_int;
use std::rc::Rc;

use mlua::{ffi, IntoLua, Lua, Table, Value};

use super::{raise, raw_arg, raw_closure, raw_scan, slow_call, RawFn, Slow};
use crate::engine::fields::{Access, FieldId, FieldKind};
use crate::engine::state::{StateCtx, Unlimited};
use crate::engine::view::{Arg, Cell as V, Cells, MessageData, Scalar, TableShape};

/// Strings longer than this go through the mlua `fetch`, which lifts the memory limit while
/// it builds them; `fetch_scalar` pushes under the limit.
const SCALAR_PUSH_MAX: usize = 64 * 1024;

const FETCH_SCALAR: RawFn<StateCtx> = RawFn::new(fetch_scalar);
const METHOD_SCALAR: RawFn<StateCtx> = RawFn::new(method_scalar);
const FETCH_ARRAY: RawFn<StateCtx> = RawFn::new(fetch_array);
const FETCH_TABLE: RawFn<StateCtx> = RawFn::new(fetch_table);
const STAT: RawFn<StateCtx> = RawFn::new(super::api::stat_raw);
const METHOD_STAT: RawFn<StateCtx> = RawFn::new(super::api::method_stat);

/// Puts the message view's primitives into `rust` (the table the prelude receives): the raw
/// fetches by kind and `fetch`, `msg`'s raw methods, the field tables, and `stat`/`stats`.
/// Made once per state: they read the scan's data through `ScanCtx::slot`.
pub(in crate::engine) fn install(lua: &Lua, ctx: &Rc<StateCtx>, rust: &Table) -> mlua::Result<()> {
    let fetch = Slow::new(lua, ctx, |lua, c: &StateCtx, (id, a): (u8, Value)| {
        let data = c.scan.slot.get()?;
        let _unlimited = Unlimited::new(lua, c.memory_limit);
        if id == FieldId::Classify.id() {
            return c.classify(data);
        }
        if id == FieldId::Bayes.id() {
            return c.bayes(data);
        }
        fetch_value(lua, data, id, a)
    })?;
    rust.raw_set(
        "fetch_scalar",
        raw_closure(lua, &fetch, FETCH_SCALAR, None)?,
    )?;
    rust.raw_set("fetch_array", raw_closure(lua, &fetch, FETCH_ARRAY, None)?)?;
    rust.raw_set("fetch_table", raw_closure(lua, &fetch, FETCH_TABLE, None)?)?;
    let methods = lua.create_table()?;
    for &f in FieldId::ALL.iter().filter(|f| f.access() == Access::Method) {
        let m = raw_closure(lua, &fetch, METHOD_SCALAR, Some(f.id()))?;
        methods.raw_set(f.name(), m)?;
    }
    rust.raw_set("methods", methods)?;
    rust.raw_set("fetch", fetch.function().clone())?;
    // the field table, for the prelude: every name's id, the `Simple` ones, the ids each raw
    // fetch answers, and the size of the field cache
    let names = lua.create_table()?;
    let simple = lua.create_table()?;
    for &f in FieldId::ALL {
        names.raw_set(f.name(), f.id())?;
        if f.access() == Access::Simple {
            simple.raw_set(f.name(), f.id())?;
        }
    }
    rust.raw_set("fields", names)?;
    rust.raw_set("simple_fields", simple)?;
    for (name, kind) in [
        ("scalar_fields", FieldKind::Scalar),
        ("array_fields", FieldKind::Array),
        ("table_fields", FieldKind::Records),
    ] {
        rust.raw_set(name, lua.create_sequence_from(FieldId::ids_of(kind))?)?;
    }
    rust.raw_set("cache_slots", FieldId::max_id())?;

    let stat = Slow::new(
        lua,
        ctx,
        |_, c: &StateCtx, (k, w, how, min): (Value, Value, Value, Value)| {
            let r = c.scan.slot.get()?.stat(&c.windows, &k, &w, &how, &min)?;
            Ok((r[0], r[1], r[2], r[3], r[4], r[5], r[6]))
        },
    )?;
    rust.raw_set("stat", raw_closure(lua, &stat, STAT, None)?)?;
    rust.raw_set("stat_method", raw_closure(lua, &stat, METHOD_STAT, None)?)?;
    let c = Rc::clone(ctx);
    rust.raw_set(
        "stats",
        lua.create_function(move |lua, (k, w): (Value, Value)| {
            let data = c.scan.slot.get()?;
            let _unlimited = Unlimited::new(lua, c.memory_limit);
            data.stats_table(lua, &c.windows, &k, &w)
        })?,
    )?;
    Ok(())
}

/// The slow form of every kind: the value of field `id` with its argument, through mlua.
fn fetch_value(lua: &Lua, data: &MessageData<'_>, id: u8, a: Value) -> mlua::Result<Value> {
    let Some(field) = FieldId::from_id(id) else {
        return Err(mlua::Error::runtime(format!("unknown msg field {id}")));
    };
    let bytes = match &a {
        Value::String(s) => Some(s.as_bytes()),
        _ => None,
    };
    let arg = Arg::of(&a, bytes.as_deref());
    let raised = |e: &std::ffi::CStr| mlua::Error::runtime(e.to_string_lossy());
    match field.kind() {
        FieldKind::Scalar => match data.scalar(field, arg).map_err(raised)? {
            Some(v) => scalar_value(lua, v),
            None => Err(mlua::Error::runtime(format!("unknown msg field {id}"))),
        },
        FieldKind::Array => {
            let mut cells = Cells::default();
            if !data.array(field, arg, &mut cells).map_err(raised)? {
                return Err(mlua::Error::runtime(format!("unknown msg field {id}")));
            }
            cells_value(lua, &cells)
        }
        FieldKind::Records | FieldKind::Built | FieldKind::Composite => {
            drop(bytes);
            data.tables(lua, field, a)
        }
    }
}

// ---- scalars ----------------------------------------------------------------------------

/// A scalar, slow form.
fn scalar_value(lua: &Lua, v: Scalar<'_>) -> mlua::Result<Value> {
    match v {
        Scalar::Nil => Ok(Value::Nil),
        Scalar::Int(i) => Ok(Value::Integer(i)),
        Scalar::Str(s) => s.as_ref().into_lua(lua),
    }
}

/// `fetch_scalar(id[, arg])`, the fast form: the fields of kind `Scalar`.
unsafe extern "C-unwind" fn fetch_scalar(l: *mut ffi::lua_State) -> c_int {
    // SAFETY (whole body): see the module contract (1-5); at most three slots.
    let (ctx, data, id, arg) = unsafe { field_call(l) };
    let found = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| match id {
        Some(f) => data.scalar(f, arg),
        None => Ok(None),
    }));
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
            // The string waits in the lent buffer while it is pushed (contract, 3 and 4).
            let Some(scratch) = (unsafe { ctx.scan.slot.scratch.borrow() }) else {
                drop(s);
                return unsafe { slow_call(l, 2) };
            };
            *scratch = s;
            unsafe { ffi::lua_pushlstring(l, scratch.as_ptr().cast(), scratch.len()) };
            ctx.scan.slot.scratch.give_back();
        }
    }
    1
}

/// `msg:header(name)` and the like: `fetch_scalar(id, name)` with the id from upvalue 3 in
/// place of `msg` (argument 1, not read).
unsafe extern "C-unwind" fn method_scalar(l: *mut ffi::lua_State) -> c_int {
    // SAFETY: as `fetch_scalar`'s; the stack is set to two slots and one push replaces slot 1.
    unsafe {
        ffi::lua_settop(l, 2);
        ffi::lua_pushvalue(l, ffi::lua_upvalueindex(3));
        ffi::lua_replace(l, 1);
        fetch_scalar(l)
    }
}

// ---- arrays -----------------------------------------------------------------------------

/// An array, slow form.
fn cells_value(lua: &Lua, cells: &Cells) -> mlua::Result<Value> {
    let t = lua.create_table_with_capacity(cells.cells.len(), 0)?;
    for (i, c) in cells.cells.iter().enumerate() {
        let v = match *c {
            V::Missing => Value::Boolean(false),
            V::Bool(b) => Value::Boolean(b),
            V::Int(n) => Value::Integer(n),
            V::Num(n) => Value::Number(n),
            V::Str(s, e) => cells.str(s, e).into_lua(lua)?,
        };
        t.raw_set(i + 1, v)?;
    }
    Ok(Value::Table(t))
}

/// `fetch_array(id[, arg])`, the fast form: the fields of kind `Array`, built on the stack.
unsafe extern "C-unwind" fn fetch_array(l: *mut ffi::lua_State) -> c_int {
    // SAFETY (whole body): see the module contract (1-5); at most four slots.
    let (ctx, data, id, arg) = unsafe { field_call(l) };
    let lent = &ctx.scan.slot.cells;
    // The values wait in the lent buffer while they are pushed (contract, 3 and 4).
    let Some(cells) = (unsafe { lent.borrow() }) else {
        return unsafe { slow_call(l, 2) };
    };
    let filled = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| match id {
        Some(f) => data.array(f, arg, cells).map(|filled| filled.then_some(())),
        None => Ok(None),
    }));
    if !matches!(filled, Ok(Ok(Some(())))) {
        lent.give_back();
    }
    if let Err(n) = unsafe { settle(l, filled) } {
        return n;
    }
    let len = c_int::try_from(cells.cells.len()).unwrap_or(c_int::MAX);
    unsafe {
        ffi::lua_createtable(l, len, 0);
        for (i, c) in cells.cells.iter().enumerate() {
            match *c {
                V::Missing => ffi::lua_pushboolean(l, 0),
                V::Bool(b) => ffi::lua_pushboolean(l, c_int::from(b)),
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
    lent.give_back();
    1
}

// ---- records ----------------------------------------------------------------------------

/// `fetch_table(id)`, the fast form of the fields of kind `Records` when they need no record:
/// an empty array, or the anomaly set. Record arrays with records go to the mlua `fetch`
/// (their slow form, `MessageData::tables`, whose arrays `records.rs` builds in one protected
/// call), as any argument does.
unsafe extern "C-unwind" fn fetch_table(l: *mut ffi::lua_State) -> c_int {
    // SAFETY (whole body): see the module contract (1-5). The names pushed are static; at most
    // three slots.
    unsafe {
        let (_, data, id, arg) = field_call(l);
        if !matches!(arg, Arg::None) {
            return slow_call(l, 2);
        }
        let shape = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            id.and_then(|f| data.table_shape(f))
        }));
        match shape {
            Ok(Some(TableShape::Empty)) => ffi::lua_createtable(l, 0, 0),
            Ok(Some(TableShape::Set(names))) => {
                ffi::lua_createtable(l, 0, c_int::try_from(names.len()).unwrap_or(0));
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

// ---- shared -----------------------------------------------------------------------------

/// A raw fetch's `StateCtx`, the scan's data, the field (argument 1) and its argument (2).
///
/// # Safety
/// Only in the C function of a `RawFn<StateCtx>` (as `raw_scan`).
unsafe fn field_call<'c>(
    l: *mut ffi::lua_State,
) -> (&'c StateCtx, &'c MessageData<'c>, Option<FieldId>, Arg<'c>) {
    // SAFETY: as the caller's.
    unsafe {
        let (ctx, data) = raw_scan(l);
        let id = match raw_arg(l, 1) {
            Arg::Int(i) => u8::try_from(i).ok().and_then(FieldId::from_id),
            _ => None,
        };
        (ctx, data, id, raw_arg(l, 2))
    }
}

/// A raw fetch's answer from Rust (caught panics included): the value to push, or `Err` with
/// what the C function returns once the mlua `fetch` answered for it (`None`: a field or an
/// argument the raw path leaves to it). Errors are raised.
///
/// # Safety
/// As `slow_call`.
unsafe fn settle<T>(
    l: *mut ffi::lua_State,
    found: std::thread::Result<Result<Option<T>, &'static std::ffi::CStr>>,
) -> Result<T, c_int> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::view::WindowNames;
    use crate::engine::EngineConfig;
    use crate::message::{prepare, Envelope, Limits};

    /// Every field through its fast form and through `fetch` (its slow form), with no
    /// argument and with the arguments fields take (and wrong ones), on fixture messages: the
    /// same values, or an error from both. Methods (`header` ...) too.
    const COMPARE: &str = r#"
        local rust = ...
        local out = {}
        local function same(a, b)
          if type(a) ~= type(b) then return false end
          if type(a) ~= "table" then return a == b end
          for k, v in pairs(a) do if not same(v, b[k]) then return false end end
          for k in pairs(b) do if a[k] == nil then return false end end
          return true
        end
        local ARGS = { false, 1, 2, 9, -1, 1.5, "", "Received", "Subject", "From", "X-None",
          "public", "is_ip", "userinfo", "from", "to", "envelope_rcpt", "date" }
        local seen = 0
        local function check(label, fast, id, arg)
          local ok1, a = pcall(fast, id, arg)
          local ok2, b = pcall(rust.fetch, id, arg)
          seen = seen + 1
          if ok1 ~= ok2 or (ok1 and not same(a, b)) then
            out[#out + 1] = label .. " " .. id .. " " .. tostring(arg) .. ": "
              .. tostring(ok1) .. " " .. tostring(a) .. " / " .. tostring(ok2) .. " " .. tostring(b)
          end
        end
        for list, fast in pairs({ scalar_fields = rust.fetch_scalar,
            array_fields = rust.fetch_array, table_fields = rust.fetch_table }) do
          for _, id in ipairs(rust[list]) do
            check(list, fast, id, nil)
            for _, arg in ipairs(ARGS) do check(list, fast, id, arg) end
          end
        end
        for name, method in pairs(rust.methods) do
          local id = rust.fields[name]
          for _, arg in ipairs(ARGS) do
            check(name, function(_, a) return method(nil, a) end, id, arg)
          end
        end
        return out, seen
    "#;

    #[test]
    fn fast_and_slow_forms_agree_for_every_field() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data");
        let envelope = Envelope {
            client_ip: Some("192.0.2.7".parse().unwrap()),
            helo: Some("mx.example".into()),
            mail_from: Some("a@example.com".into()),
            rcpt_to: vec!["b@example.org".into(), "c@example.org".into()],
            hostname: Some("mx.example".into()),
            user: None,
            queue_id: Some("4AbC".into()),
            deliver_to: None,
            settings_id: None,
        };
        let limits = Limits::default();
        for name in [
            "html_only.eml",
            "phishing_anchor.eml",
            "nested_multipart.eml",
            "received_forged_helo.eml",
            "received_ipv6.eml",
            "idn_urls.eml",
            "missing_headers.eml",
            "broken_mime.eml",
        ] {
            let raw = std::fs::read(root.join(name)).unwrap();
            let input = prepare(&raw, &limits);
            let a = crate::scan::analyze(&input, &envelope, &limits);
            let data = MessageData {
                message: &a.message,
                entities: &a.entities,
                shingles: &a.shingles,
                stats: &[],
                late: None,
                anomalies: &a.anomalies,
                envelope: &envelope,
                now: 1_800_000_000,
                max_html_bytes: 1 << 20,
                classifier: None,
                reputation_window: 0,
                observe: false,
                net: None,
                traffic: Default::default(),
            };
            let lua = Lua::new();
            let config = EngineConfig::default();
            let ctx = Rc::new(StateCtx::new(
                &lua,
                &config,
                None,
                &WindowNames::default(),
                0,
            ));
            let rust = lua.create_table().unwrap();
            install(&lua, &ctx, &rust).unwrap();
            let _scan = ctx.scan.slot.enter(&data);
            let (mismatches, seen): (Vec<String>, usize) = lua.load(COMPARE).call(rust).unwrap();
            assert!(mismatches.is_empty(), "{name}: {mismatches:#?}");
            assert!(seen > 800, "{name}: {seen} comparisons");
        }
    }

    /// A call that finds its buffer lent (here: left lent on purpose, as a push that raised
    /// would leave it) answers through `fetch`, with the same value.
    #[test]
    fn a_lent_buffer_sends_the_call_to_its_slow_path() {
        let raw = std::fs::read(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/html_only.eml"),
        )
        .unwrap();
        let limits = Limits::default();
        let envelope = Envelope {
            rcpt_to: vec!["b@example.org".into()],
            ..Envelope::default()
        };
        let input = prepare(&raw, &limits);
        let a = crate::scan::analyze(&input, &envelope, &limits);
        let data = MessageData {
            message: &a.message,
            entities: &a.entities,
            shingles: &a.shingles,
            stats: &[],
            late: None,
            anomalies: &a.anomalies,
            envelope: &envelope,
            now: 0,
            max_html_bytes: 1 << 20,
            classifier: None,
            reputation_window: 0,
            observe: false,
            net: None,
            traffic: Default::default(),
        };
        let lua = Lua::new();
        let ctx = Rc::new(StateCtx::new(
            &lua,
            &EngineConfig::default(),
            None,
            &WindowNames::default(),
            0,
        ));
        let rust = lua.create_table().unwrap();
        install(&lua, &ctx, &rust).unwrap();
        let _scan = ctx.scan.slot.enter(&data);
        // SAFETY: the reference is dropped at once and the buffer never given back.
        #[allow(unsafe_code)]
        let lent = unsafe { ctx.scan.slot.cells.borrow() }.is_some();
        assert!(lent);
        let rcpt: Vec<String> = lua
            .load("local rust = ... return rust.fetch_array(rust.fields.rcpt)")
            .call(rust)
            .unwrap();
        assert_eq!(rcpt, ["b@example.org"]);
    }
}
