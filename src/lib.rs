//! shrike: an anti-spam rules-engine daemon. See ARCHITECTURE.md for the module map.
#![deny(unsafe_code)]

pub mod classify;
pub mod config;
pub mod engine;
pub mod entities;
pub mod message;
pub mod proto;
pub mod replay;
pub mod scan;
pub mod server;
pub mod shingle;
pub mod store;
