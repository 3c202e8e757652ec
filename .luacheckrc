-- luacheck settings for shrike's rule files (rules/) and library (lua/): Lua 5.4 with the
-- globals the engine's sandbox adds (docs/rules.md; lua/shrike.d.lua annotates them).
std = "lua54"
read_globals = {
  "rule", "feature", "re", "log", "list", "ratelimit", "char_counts", "is_private_ip",
}
-- `check = function(msg) … end` often ignores `msg`, and hit tables are built field by field.
unused_args = false
-- phrase lists and descriptions run long
max_line_length = false
exclude_files = { "target/", "vendor/", "fuzz/" }

files["lua/shrike.d.lua"] = {
  -- the annotation file declares the globals it describes, with empty bodies
  globals = { "rule", "feature", "re", "log", "list", "ratelimit", "char_counts", "is_private_ip" },
  ignore = { "212", "241", "631" },
}
