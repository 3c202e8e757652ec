//! Record tables for Lua built through the raw C API, in one protected call per table: the
//! fast form of the `Records` fields' arrays (`MessageData::tables`) and of `msg:stats`.
//!
//! The view hands rules arrays of records (Received hops, URLs, addresses, parts). Through
//! mlua's safe API each record costs a registry handle (moved to the reference thread and back)
//! and each field a string interning of its key: ~600 instructions a field, ~1,600 a record.
//! Here a whole array is built inside one `Lua::exec_raw`: keys are static C strings, which
//! `lua_setfield` finds in Lua's string cache by address, and records go straight into the
//! array without a handle of their own.
//!
//! Safety (the module contract, 3 and 5): the closure passed to `exec_raw` runs inside mlua's
//! protected call, so a Lua error (only "not enough memory" can occur: the tables have no
//! metatables) unwinds to that call. The closure's frames own nothing with a destructor (it
//! reads rows borrowed from the caller), so unwinding over them skips nothing; it uses at most
//! three stack slots, which `exec_raw` checks for. A collection the pushes run cannot change
//! the rows: they are borrowed immutably from the caller's frame.

use std::ffi::{c_int, CStr};

use mlua::{ffi, Lua, Result, Table};

/// A field of a record: `Nil` leaves it out.
#[derive(Clone, Copy, Debug)]
pub enum Field<'s> {
    Nil,
    Str(&'s str),
    Int(i64),
    Bool(bool),
    Num(f64),
}

/// One record: its keys (static, so Lua's string cache knows them by address) and values.
pub type Row<'s, const N: usize> = [(&'static CStr, Field<'s>); N];

/// Pushes a field's value; false (and nothing pushed) for `Nil`.
///
/// # Safety
/// `state` must be a valid Lua state with a free stack slot, inside a protected call.
unsafe fn push(state: *mut ffi::lua_State, field: Field<'_>) -> bool {
    // SAFETY: as above.
    unsafe {
        match field {
            Field::Nil => return false,
            Field::Str(s) => {
                ffi::lua_pushlstring(state, s.as_ptr().cast(), s.len());
            }
            Field::Int(i) => ffi::lua_pushinteger(state, i),
            Field::Bool(b) => ffi::lua_pushboolean(state, c_int::from(b)),
            Field::Num(n) => ffi::lua_pushnumber(state, n),
        }
    }
    true
}

/// Pushes a new table holding one record.
///
/// # Safety
/// As `push`, with two free stack slots.
unsafe fn push_record<const N: usize>(state: *mut ffi::lua_State, row: &Row<'_, N>) {
    // SAFETY: as above.
    unsafe {
        ffi::lua_createtable(state, 0, N as c_int);
        for (key, field) in row {
            if push(state, *field) {
                ffi::lua_setfield(state, -2, key.as_ptr());
            }
        }
    }
}

/// One record as a table.
pub(in crate::engine) fn record<const N: usize>(lua: &Lua, row: &Row<'_, N>) -> Result<Table> {
    // SAFETY: see the module documentation; two slots are used.
    unsafe { lua.exec_raw::<Table>((), |state| push_record(state, row)) }
}

/// An array of records.
pub(in crate::engine) fn records<const N: usize>(lua: &Lua, rows: &[Row<'_, N>]) -> Result<Table> {
    let len = c_int::try_from(rows.len()).unwrap_or(c_int::MAX);
    // SAFETY: see the module documentation; three slots are used (array, record, value).
    unsafe {
        lua.exec_raw::<Table>((), |state| {
            ffi::lua_createtable(state, len, 0);
            for (i, row) in rows.iter().enumerate() {
                push_record(state, row);
                ffi::lua_rawseti(state, -2, i as ffi::lua_Integer + 1);
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_hold_their_fields_and_leave_nil_ones_out() {
        let lua = Lua::new();
        let rows = [
            [
                (c"name", Field::Str("a.example")),
                (c"n", Field::Int(7)),
                (c"ok", Field::Bool(true)),
                (c"ratio", Field::Num(0.25)),
                (c"gone", Field::Nil),
            ],
            [
                (c"name", Field::Str("b")),
                (c"n", Field::Int(-1)),
                (c"ok", Field::Bool(false)),
                (c"ratio", Field::Num(1.5)),
                (c"gone", Field::Str("here")),
            ],
        ];
        let t = records(&lua, &rows).unwrap();
        lua.globals().set("t", t).unwrap();
        let got: String = lua
            .load(
                r#"local out = {}
                for i, r in ipairs(t) do
                  local keys = 0
                  for _ in pairs(r) do keys = keys + 1 end
                  out[i] = string.format("%s %d %s %.2f %s %d", r.name, r.n, tostring(r.ok),
                    r.ratio, tostring(r.gone), keys)
                end
                return #t .. ": " .. table.concat(out, " | ")"#,
            )
            .eval()
            .unwrap();
        assert_eq!(
            got,
            "2: a.example 7 true 0.25 nil 4 | b -1 false 1.50 here 5"
        );
        let empty = records::<1>(&lua, &[]).unwrap();
        assert_eq!(empty.raw_len(), 0);
        let one = record(&lua, &[(c"x", Field::Str("y\0z"))]).unwrap();
        assert_eq!(
            one.get::<mlua::String>("x").unwrap().as_bytes(),
            &b"y\0z"[..]
        );
    }
}
