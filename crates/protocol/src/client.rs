//! The client side of memcached's three protocols, for the lab, the load
//! generator and the differential tester: [`request`] encoders append
//! requests to a buffer; [`reply`] cuts what the server sends back into
//! frames, incrementally and without trusting it.

pub mod reply;
pub mod request;

pub use reply::{parse_reply, parse_single_get, Frame, Reply, ReplyError, ReplyParser};
