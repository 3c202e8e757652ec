// The default rule set and its Lua library are compiled into the binary (include_dir); rebuild
// when they change. Lua 5.4.8 itself is compiled here from vendor/ as one translation unit
// (vendor/onelua.c, vendor/README.md) and linked for mlua (mlua-sys's "external" feature). A
// release build with the GCC that recorded vendor/lua-pgo/ uses that profile of the scan
// pipeline (scripts/lua_pgo.sh makes it).
use std::path::{Path, PathBuf};
use std::process::Command;

const LUA_SRC: &str = "vendor/lua-5.4.8";
const PGO_DIR: &str = "vendor/lua-pgo";

fn main() {
    println!("cargo:rerun-if-changed=rules");
    println!("cargo:rerun-if-changed=lua");
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=vendor/onelua.c");
    println!("cargo:rerun-if-changed={LUA_SRC}");
    println!("cargo:rerun-if-changed={PGO_DIR}");
    println!("cargo:rerun-if-env-changed=SHRIKE_LUA_PGO_GEN");
    println!("cargo:rerun-if-env-changed=SHRIKE_LUA_PGO");
    build_lua();
}

fn build_lua() {
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("OUT_DIR"));
    // The sources are compiled from a copy in OUT_DIR, by relative names: the profile's
    // checksums hold the file names, which so do not depend on where the checkout is.
    let dir = out.join("lua");
    std::fs::create_dir_all(&dir).expect("create OUT_DIR/lua");
    let mut sources = vec![PathBuf::from("vendor/onelua.c")];
    let mut names: Vec<_> = std::fs::read_dir(LUA_SRC)
        .expect("vendor/lua-5.4.8")
        .map(|e| e.expect("read vendor/lua-5.4.8").path())
        .collect();
    names.sort();
    sources.extend(names);
    let mut key = Fnv::new();
    for src in &sources {
        let bytes = std::fs::read(src).expect("read a Lua source");
        key.add(src.file_name().unwrap().as_encoded_bytes());
        key.add(&bytes);
        std::fs::write(dir.join(src.file_name().unwrap()), bytes).expect("copy a Lua source");
    }

    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    let debug_assertions = std::env::var_os("CARGO_CFG_DEBUG_ASSERTIONS").is_some();
    let mut lua = cc::Build::new();
    lua.include(".")
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
    if debug_assertions {
        lua.define("LUA_USE_APICHECK", None);
    }
    let tool = lua.get_compiler();
    if !tool.is_like_gnu() || tool.is_like_clang() || tool.is_like_msvc() {
        // another compiler: cc's own per-file build of the same unit, without a profile
        lua.include(&dir)
            .file(dir.join("onelua.c"))
            .compile("lua5.4");
        return;
    }
    let version = Command::new(tool.path())
        .arg("-dumpfullversion")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    key.add(version.as_bytes());
    for a in tool.args() {
        key.add(a.as_encoded_bytes());
    }
    let key = format!("{:016x}", key.0);

    let mut cmd = tool.to_command();
    cmd.current_dir(&dir)
        .args(["-c", "onelua.c", "-o", "onelua.o"]);
    let prefix = format!("-fprofile-prefix-path={}", dir.display());
    let generate = std::env::var_os("SHRIKE_LUA_PGO_GEN");
    if let Some(gen) = &generate {
        // scripts/lua_pgo.sh: an instrumented build that writes GEN/onelua.gcda at exit
        let gen = PathBuf::from(gen);
        std::fs::create_dir_all(&gen).expect("create SHRIKE_LUA_PGO_GEN");
        std::fs::write(gen.join("key"), &key).expect("write the profile's key");
        cmd.arg(format!("-fprofile-generate={}", gen.display()))
            .arg(&prefix);
    } else if use_profile(&key, debug_assertions) {
        let pgo = out.join("pgo");
        std::fs::create_dir_all(&pgo).expect("create OUT_DIR/pgo");
        std::fs::copy(
            Path::new(PGO_DIR).join("onelua.gcda"),
            pgo.join("onelua.gcda"),
        )
        .expect("copy the Lua profile");
        cmd.arg(format!("-fprofile-use={}", pgo.display()))
            .arg(&prefix)
            // what the training run did not reach is optimized as without a profile
            .arg("-fprofile-partial-training")
            .arg("-Wno-error=coverage-mismatch");
    }
    let status = cmd.status().expect("run the C compiler");
    assert!(status.success(), "compiling vendor/onelua.c failed");
    cc::Build::new()
        .object(dir.join("onelua.o"))
        .compile("lua5.4");
    if generate.is_some() {
        println!("cargo:rustc-link-lib=gcov");
    }
}

/// Whether to compile with vendor/lua-pgo's profile: a release build (the profile is of one),
/// not turned off (`SHRIKE_LUA_PGO=0`), and the profile's key (the sources, the compiler's
/// version and arguments) is this build's. A stale profile is left out with a warning.
fn use_profile(key: &str, debug_assertions: bool) -> bool {
    if debug_assertions || std::env::var("SHRIKE_LUA_PGO").is_ok_and(|v| v == "0") {
        return false;
    }
    let recorded = std::fs::read_to_string(Path::new(PGO_DIR).join("key")).unwrap_or_default();
    if recorded.trim() != key {
        if !recorded.is_empty() {
            println!(
                "cargo:warning=vendor/lua-pgo does not match this compiler or these Lua sources; Lua is built without it (scripts/lua_pgo.sh remakes it)"
            );
        }
        return false;
    }
    Path::new(PGO_DIR).join("onelua.gcda").is_file()
}

/// FNV-1a, 64 bits: the profile's key.
struct Fnv(u64);

impl Fnv {
    fn new() -> Self {
        Fnv(0xcbf2_9ce4_8422_2325)
    }

    fn add(&mut self, bytes: &[u8]) {
        for &b in bytes.iter().chain(&[0xff]) {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
    }
}
