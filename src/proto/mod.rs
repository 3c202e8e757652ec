//! Wire formats and protocol logic, without I/O: the Sendmail milter protocol (v6: the codec and
//! the session state machine), rspamd's HTTP protocol, SpamAssassin's spamd protocol, and the
//! X-Spam-* headers they carry.
//!
//! Owns: bytes and JSON on the wire, and what a milter session answers. Never touches: sockets,
//! threads, the store.

pub mod compress;
pub mod headers;
pub mod milter;
pub mod rspamd;
pub mod spamd;
