//! The flash tier (SlimCache, issue 12). What is built so far: the
//! checksummed, compressed container that every item written to flash
//! travels in ([`container`]), the file layer ([`device`]) and the DRAM
//! index ([`index`]).

pub mod container;
pub mod device;
pub mod index;
