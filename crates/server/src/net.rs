//! placeholder
pub fn main_with_args(_args: Vec<std::ffi::OsString>) -> i32 { todo!() }
