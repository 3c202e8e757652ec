-- shrike's Lua prelude: builds the sandbox every rule file runs in and the `msg` view.
-- Run once per Lua state, with the raw globals, before any rule or library file. It receives
-- the Rust side's primitives and returns the functions the engine calls per scan.
local rust = ...

local raw_pcall, raw_xpcall, raw_load, raw_error = pcall, xpcall, load, error
local setmetatable, getmetatable, type, select = setmetatable, getmetatable, type, select
local rawget, rawset, next, tostring = rawget, rawset, next, tostring
-- The engine removes these from the globals once the prelude has run.
local raw_collectgarbage = collectgarbage
local stopped = rust.stopped

-- Hide the string metatable and remove the one string function that leaks bytecode.
string.dump = nil
getmetatable("").__metatable = false

-- Rule files are isolated from each other: each runs with globals of its own, and every table
-- they share (the libraries, `log`, `re`, what `require` returns) reaches them as a read-only
-- view, so one file's `string.find = nil` cannot break the files loaded after it. A view reads
-- through to its table at table-lookup speed (`__index` is a table, not a function); writing
-- to it, `rawset` on it and `setmetatable` on it raise, naming the file and line.
local VIEWS = setmetatable({}, { __mode = "k" })   -- view -> name
local function refuse(name)
  -- (level: the assignment's frame; 2 from a metamethod, 3 from a sandbox wrapper)
  return function(_, k, _v, level)
    raw_error("cannot assign " .. name .. "." .. tostring(k)
      .. ": tables shared between rule files are read-only", level or 2)
  end
end
-- A view of `t`: reads go to `t` itself (the libraries' functions and numbers).
local function readonly(t, name)
  local view = setmetatable({}, {
    __index = t, __newindex = refuse(name), __metatable = false,
    __pairs = function() return next, t, nil end,
    __len = function() return #t end,
  })
  VIEWS[view] = name
  return view
end
-- A view of a module's value, nested tables included (phrase lists, sets): the view reads a
-- copy of the table's fields taken at `require`, nested tables replaced by their views, and
-- falls back to the table itself for fields added later.
local function readonly_deep(t, name, seen)
  local done = seen[t]
  if done then return done end
  local shadow = setmetatable({}, { __index = t })
  local view = readonly(shadow, name)
  seen[t] = view
  for k, v in next, t do
    if type(v) == "table" then
      v = readonly_deep(v, type(k) == "string" and name .. "." .. k or name .. "[]", seen)
    end
    rawset(shadow, k, v)
  end
  return view
end

local SANDBOX = {
  assert = assert, error = error, ipairs = ipairs, next = next, pairs = pairs,
  rawequal = rawequal, rawget = rawget, rawlen = rawlen, select = select,
  setmetatable = setmetatable, getmetatable = getmetatable, tonumber = tonumber,
  tostring = tostring, type = type, _VERSION = _VERSION,
  string = readonly(string, "string"), table = readonly(table, "table"),
  math = readonly(math, "math"), utf8 = readonly(utf8, "utf8"),
  os = readonly({ time = os.time, clock = os.clock, date = os.date, difftime = os.difftime }, "os"),
}
SANDBOX.rawset = function(t, k, v)
  local name = VIEWS[t]
  if name then refuse(name)(t, k, nil, 3) end
  return rawset(t, k, v)
end

-- A file's globals: its own table over the sandbox (protected: `getmetatable(_ENV)` must not
-- hand out the sandbox itself).
local ENV_MT = { __index = SANDBOX, __metatable = false }
local function new_env()
  return setmetatable({}, ENV_MT)
end

-- A rule cannot catch the engine stopping it: protected calls re-raise once the budget is spent.
local function pass(ok, ...)
  if not ok and stopped() then
    raw_error((...), 0)
  end
  return ok, ...
end
SANDBOX.pcall = function(f, ...) return pass(raw_pcall(f, ...)) end
-- The stop is raised from inside a debug hook, where Lua runs the message handler with hooks
-- off: a handler that loops would never be stopped. It does not run once the budget is spent.
SANDBOX.xpcall = function(f, handler, ...)
  if type(handler) ~= "function" then return pass(raw_xpcall(f, handler, ...)) end
  return pass(raw_xpcall(f, function(e)
    if stopped() then return e end
    return handler(e)
  end, ...))
end
-- Finalizers run inside the collector with hooks off (nothing could stop one that loops), so
-- rules cannot set them. Lua marks an object for finalization only when its metatable has
-- __gc at setmetatable time, so checking here is enough.
SANDBOX.setmetatable = function(t, mt)
  if VIEWS[t] then refuse(VIEWS[t])(t, "__metatable", nil, 3) end
  if type(mt) == "table" and rawget(mt, "__gc") ~= nil then
    raw_error("__gc metamethods are not available to rules", 2)
  end
  return setmetatable(t, mt)
end

SANDBOX.load = function(chunk, name, _mode, env)
  return raw_load(chunk, name, "t", env or new_env())
end

SANDBOX.collectgarbage = function(opt)
  if opt == "count" then return raw_collectgarbage("count") end
  raw_error("collectgarbage: only \"count\" is allowed in rules", 2)
end

-- Logging, through tracing, tagged with the running rule.
local emit, format = rust.log, string.format
local log = {}
for level, name in ipairs({ "error", "warn", "info", "debug" }) do
  log[name] = function(fmt, ...)
    if select("#", ...) > 0 then fmt = format(fmt, ...) end
    emit(level, tostring(fmt))
  end
end
SANDBOX.log = readonly(log, "log")
SANDBOX.print = function(...)
  local parts = table.pack(...)
  for i = 1, parts.n do parts[i] = tostring(parts[i]) end
  emit(3, table.concat(parts, "\t"))
end

-- Regular expressions (Rust regex, cached).
SANDBOX.re = readonly({
  match = rust.re_match, find = rust.re_find, captures = rust.re_captures, count = rust.re_count,
  compile = rust.re_compile, phrases = rust.re_phrases,
}, "re")

-- Lists, opened once per state.
local list_open, lists = rust.list_open, {}
SANDBOX.list = function(name)
  local l = lists[name]
  if l == nil then
    l = list_open(name)
    lists[name] = l
  end
  return l
end

SANDBOX.ratelimit = rust.ratelimit
SANDBOX.char_counts = rust.char_counts
SANDBOX.is_private_ip = rust.is_private_ip
local rust_rule = rust.rule
SANDBOX.rule = function(def)
  local err = rust_rule(def)
  if err then raw_error(err, 2) end
end

-- require: library modules of the rule set, then the built-in library; never the filesystem.
local module_source, loaded, LOADING = rust.module_source, {}, {}
SANDBOX.require = function(name)
  local v = loaded[name]
  if v == LOADING then raw_error("require: circular dependency on " .. name, 2) end
  if v ~= nil then return v end
  local text, chunkname = module_source(name)
  if not text then raw_error("require: no module " .. tostring(name), 2) end
  loaded[name] = LOADING
  local f, err = raw_load(text, "@" .. chunkname, "t", new_env())
  if not f then loaded[name] = nil; raw_error(err, 0) end
  local ok, res = raw_pcall(f, name)
  if not ok then loaded[name] = nil; raw_error(res, 0) end
  if res == nil then res = true end
  if type(res) == "table" then res = readonly_deep(res, name, {}) end
  loaded[name] = res
  return res
end

-- The message view. Field names and ids come from Rust (`engine/fields.rs`): `rust.fields`
-- maps every name to its id, `rust.simple_fields` the plain accessors, and the three id lists
-- say which raw function fetches each field.
--
-- A `msg` is valid only during its scan. Outside a scan `cache` is OUTSIDE, whose every read
-- raises; when a scan ends, its `msg`'s metatable answers every lookup with `outside`, so any
-- method called on a kept `msg` raises too; and the Rust primitives refuse to run outside a
-- scan. So the accessors need no check of their own: each is one call and one table lookup on
-- the hot path (a Lua call and a check cost more than the lookup, and rules read `msg` fields
-- a hundred times a message).
local NIL = {}
-- (read only while the prelude runs; a name Rust does not know stops the state's build)
local F = setmetatable(rust.fields, {
  __index = function(_, name) raw_error("prelude: no msg field " .. tostring(name), 2) end,
})
local fetch, stats = rust.fetch, rust.stats
-- Fields that are one string or number are read by a plain C function (much cheaper to call
-- than an mlua one); it hands long strings and anything else to `fetch`.
local fetch_scalar, RAW = rust.fetch_scalar, {}
for _, id in ipairs(rust.scalar_fields) do RAW[id] = fetch_scalar end
-- Fields that are an array of strings or numbers are built by another plain C function.
for _, id in ipairs(rust.array_fields) do RAW[id] = rust.fetch_array end
-- The anomaly set, and record arrays when empty, by a third (which hands records to `fetch`).
for _, id in ipairs(rust.table_fields) do RAW[id] = rust.fetch_table end
local function outside() raw_error("msg used outside its scan", 3) end
local OUTSIDE = setmetatable({}, { __index = outside, __newindex = outside, __metatable = false })
-- what a method looked up on a dead `msg` is: it raises when called
local function dead() return outside end
local cache = OUTSIDE
local Msg = {}
Msg.__newindex = function() raw_error("msg is read-only", 2) end

-- The accessor of field `id`: `fetch(id)` cached for the scan (NIL stands for a nil value).
local function field(id)
  local get = RAW[id] or fetch
  return function()
    local v = cache[id]
    if v == nil then
      v = get(id)
      if v == nil then cache[id] = NIL else cache[id] = v end
      return v
    elseif v == NIL then
      return nil
    end
    return v
  end
end

for name, id in pairs(rust.simple_fields) do
  Msg[name] = field(id)
end

local from_record, reply_to_record, anomalies = field(F.from), field(F.reply_to), Msg.anomalies
-- (arrays of strings: empty without the header, false for a missing display name)
function Msg:from()
  local t = from_record()
  local a = t[1]
  if a then return a, t[2], t[3] or nil end
end
function Msg:reply_to()
  local t = reply_to_record()
  local a = t[1]
  if a then return a, t[2] end
end
function Msg:has_anomaly(name)
  return anomalies()[name] == true
end
-- Lookups with an argument (a header name, a role). One string or number is looked up in Rust
-- on every call: cheaper than a per-scan cache keyed by argument, which pays for a new key (and
-- the table's growth) on every argument asked once. Tables are cached per scan by field and
-- argument: they are built once.
local function keyed(id, default)
  if RAW[id] == fetch_scalar then
    return function(_, arg)
      if arg == nil then arg = default end
      return fetch_scalar(id, arg)
    end
  end
  local get = RAW[id] or fetch
  return function(_, arg)
    if arg == nil then arg = default end
    local c = cache[id]
    if c == nil then
      c = {}
      cache[id] = c
    end
    local v = c[arg]
    if v == nil then
      v = get(id, arg)
      if v == nil then c[arg] = NIL else c[arg] = v end
      return v
    elseif v == NIL then
      return nil
    end
    return v
  end
end
-- The Date's zone when it is wrong: "bad_offset" or "malformed", and the zone as written.
local date_zone = field(F.date_zone)
function Msg:date_zone()
  local v = date_zone()
  if v then return string.sub(v, 1, 1) == "b" and "bad_offset" or "malformed", string.sub(v, 3) end
end
Msg.first_url = keyed(F.first_url)
-- Addresses of one role are picked out in Rust ("" stands for all of them).
Msg.emails = keyed(F.emails, "")
Msg.email_count = keyed(F.email_count, "")
Msg.received_time = keyed(F.received_time, 1)
Msg.headers = keyed(F.headers)
-- (C functions called as the methods themselves: `msg` is their first argument, not read:
-- `header`, `raw_header`, `header_count`)
for name, method in pairs(rust.methods) do Msg[name] = method end
Msg.stat = rust.stat_method
function Msg.stats(_, kind, window) return stats(kind, window) end
local SHINGLES, CLASSIFY, BAYES = F.shingles, F.classify, F.bayes
function Msg.shingles(_, kind) return fetch(SHINGLES, kind) end
function Msg.classify() return fetch(CLASSIFY) end
function Msg.bayes() return fetch(BAYES) end

-- The SMTP envelope in one table, built once a scan: what the MTA said (nil where it said
-- nothing; `rcpt` an array).
local ENVELOPE = F.envelope
function Msg:envelope()
  local t = cache[ENVELOPE]
  if t == nil then
    t = { ip = self:ip(), helo = self:helo(), hostname = self:hostname(), user = self:user(),
      mail_from = self:mail_from(), rcpt = self:rcpt(), queue_id = self:queue_id(),
      deliver_to = self:deliver_to() }
    cache[ENVELOPE] = t
  end
  return t
end

-- Windowed features (engine/feature.rs): `feature { … }` registers a feature in Rust, which
-- checks it and gives its index; its functions stay here. `msg:feature(name)` runs them once
-- per scan (the first read), hands the key and value to Rust and reads the window there.
local rust_feature, feature_state = rust.feature, rust.feature_state
local feature_set, feature_read = rust.feature_set, rust.feature_read
local FEATURES, FEATURE_INDEX = {}, {}
SANDBOX.feature = function(def)
  local err, i = rust_feature(def)
  if err then raw_error(err, 2) end
  FEATURES[i] = { key = def.key, value = def.value }
  FEATURE_INDEX[def.name] = i
end
-- (a failure is handed to Rust, which reports it; the budget's stop is raised on, as `pcall`'s)
local function feature_compute(i, msg)
  local f = FEATURES[i]
  local ok, k = pass(raw_pcall(f.key, msg))
  if not ok then return feature_set(i, false, "key: " .. tostring(k)) end
  local v
  if k ~= nil and f.value then
    ok, v = pass(raw_pcall(f.value, msg))
    if not ok then return feature_set(i, false, "value: " .. tostring(v)) end
  end
  return feature_set(i, true, k, v)
end
function Msg:feature(name)
  local i = FEATURE_INDEX[name]
  if not i then raw_error("msg:feature: no feature " .. tostring(name) .. " is declared", 2) end
  if feature_state(i) == 0 then feature_compute(i, self) end
  return feature_read(i)
end

local M = {}
M.feature_compute = feature_compute

-- The names of `msg`'s methods and of the sandbox's globals, sorted (the editor annotations'
-- drift test, lua/shrike.d.lua).
local function sorted_names(t)
  local names = {}
  for k, v in pairs(t) do
    if type(k) == "string" and string.sub(k, 1, 2) ~= "__" and v ~= nil then
      names[#names + 1] = k
    end
  end
  table.sort(names)
  return names
end
function M.msg_methods() return sorted_names(Msg) end
function M.globals() return sorted_names(SANDBOX) end

-- Runs a rule file (or any chunk) in a fresh environment over the sandbox.
function M.load_file(text, chunkname)
  local f, err = raw_load(text, "@" .. chunkname, "t", new_env())
  if not f then raw_error(err, 0) end
  return f()
end

-- Starts a scan and returns the new `msg` (the primitives read the scan's data from Rust).
-- Each scan's `msg` has its own metatable (a protected metatable cannot be swapped, but its
-- fields can): `finish` points its `__index` at `outside`.
--
-- Nothing a scan creates is stored in a field or upvalue of an old object: in the generational
-- collector, such a store (an upvalue set to a new table) makes the new object old at once, with
-- all it holds, and only a major collection frees it. So scans share one field cache, emptied
-- when a scan ends, and the scan's metatable is kept in a slot of a table (which only marks
-- that table for the next minor collection to look at).
-- The field ids (1..rust.cache_slots) index the cache's array part, which the constructor
-- sizes at once.
local CACHE_SLOTS = rust.cache_slots
local CACHE = raw_load("return {" .. string.rep("nil,", CACHE_SLOTS) .. "}", "=cache", "t", {})()
local current = { mt = false }

local function clear_cache()
  for i = 1, CACHE_SLOTS do CACHE[i] = nil end
end

function M.begin()
  -- (a scan that failed before `finish` left its fields)
  if cache ~= OUTSIDE then clear_cache() end
  cache = CACHE
  local mt = { __index = Msg, __newindex = Msg.__newindex, __metatable = false }
  current.mt = mt
  return setmetatable({}, mt)
end

-- Ends a scan: the old `msg` stops working.
function M.finish()
  local mt = current.mt
  if mt then mt.__index = dead end
  current.mt = false
  cache = OUTSIDE
  clear_cache()
end

return M
