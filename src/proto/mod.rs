//! Wire formats, without I/O: the Sendmail milter protocol (v6) and rspamd's HTTP protocol.
//!
//! Owns: bytes and JSON on the wire. Never touches: sockets, threads, the store.

pub mod milter;
pub mod rspamd;
