// The default rule set and its Lua library are compiled into the binary (include_dir); rebuild
// when they change. Lua 5.4.8 itself is compiled here from vendor/ as one translation unit
// (vendor/onelua.c, vendor/README.md) and linked for mlua (mlua-sys's "external" feature).
fn main() {
    println!("cargo:rerun-if-changed=rules");
    println!("cargo:rerun-if-changed=lua");
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=vendor/onelua.c");
    println!("cargo:rerun-if-changed=vendor/lua-5.4.8");

    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    let mut lua = cc::Build::new();
    lua.file("vendor/onelua.c")
        .include("vendor/lua-5.4.8")
        // as the lua-src crate (mlua's "vendored" build) configures Lua 5.4
        .define("LUA_COMPAT_5_3", None)
        .warnings(false)
        .flag_if_supported("-fno-common")
        // The interpreter loop wants every register: 3% fewer instructions than with the
        // frame pointer cc asks for in a build with debug info.
        .flag_if_supported("-fomit-frame-pointer");
    match os.as_str() {
        "linux" | "freebsd" | "netbsd" | "openbsd" => lua.define("LUA_USE_LINUX", None),
        "macos" => lua.define("LUA_USE_MACOSX", None),
        "windows" => lua.define("LUA_USE_WINDOWS", None),
        _ => lua.define("LUA_USE_POSIX", None),
    };
    // Test builds check every C API call (an assertion aborts), as lua-src does in debug.
    if std::env::var_os("CARGO_CFG_DEBUG_ASSERTIONS").is_some() {
        lua.define("LUA_USE_APICHECK", None);
    }
    lua.compile("lua5.4");
}
