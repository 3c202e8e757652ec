// The default rule set and its Lua library are compiled into the binary (include_dir); rebuild
// when they change.
fn main() {
    println!("cargo:rerun-if-changed=rules");
    println!("cargo:rerun-if-changed=lua");
    println!("cargo:rerun-if-changed=build.rs");
}
