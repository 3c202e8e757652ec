//! The Sendmail milter protocol, version 6, sans I/O: `codec` turns bytes into [`Command`]s and
//! [`Reply`]s into bytes (its items are re-exported here: `proto::milter::Decoder`, ...), and
//! [`session`] is one connection's state machine (what a command means where it arrives, the
//! message it collects, the replies a verdict earns). `server::milter` feeds both from a socket.

mod codec;
pub mod session;

pub use codec::*;
