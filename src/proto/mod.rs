//! Wire formats and protocol logic, without I/O: the Sendmail milter protocol (v6: the codec and
//! the session state machine), rspamd's HTTP protocol, and the X-Spam-* headers both carry.
//!
//! Owns: bytes and JSON on the wire, and what a milter session answers. Never touches: sockets,
//! threads, the store.

pub mod headers;
pub mod milter;
pub mod rspamd;
