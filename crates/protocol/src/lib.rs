//! memcached protocol codecs: text (classic and meta) and binary.
//!
//! Parsers borrow from the connection's read buffer and never panic on client
//! input: every malformed request maps to the error memcached would send.
//! [`client`] is the other side: request encoders and a reply parser.

pub mod binary;
pub mod client;
#[cfg(feature = "fuzzing")]
pub mod fuzzing;
pub mod meta;

pub mod text;
