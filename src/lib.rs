//! shrike: an anti-spam rules-engine daemon. See ARCHITECTURE.md for the module map.
//!
//! No unsafe code (`unsafe_code = "deny"` in Cargo.toml's `[lints.rust]`, for every target)
//! outside the two modules that allow it under their safety contracts: `engine::ffi` and
//! `engine::preempt`.

pub mod antivirus;
pub mod auth;
pub mod classify;
pub mod config;
pub mod datadir;
pub mod dns;
pub mod dnsbl;
pub mod engine;
pub mod entities;
pub mod greylist;
pub mod history;
pub mod learn;
pub mod logging;
pub mod message;
pub mod netcheck;
pub mod outbound;
pub mod proto;
pub mod quarantine;
pub mod replay;
pub mod scan;
pub mod secrets;
pub mod server;
pub mod settings;
pub mod shingle;
pub mod sign;
pub mod store;
#[cfg(test)]
mod testing;
pub mod verdict;

/// mimalloc for every binary that links the library (the daemon, the CLI, benches, examples and
/// tests), so they measure the same allocator: a scan allocates and frees many small objects
/// (Lua tables and strings, entity records), and glibc's malloc cost ~14% of a scan worker's
/// CPU under HTTP load (perf; BENCHMARKS.md, "Rules engine and full scan").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;
