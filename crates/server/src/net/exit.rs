//! The exit codes memcached ends with: sysexits.h's and its plain failure.
//! The command line, the listeners and the process set-up all use them.

/// sysexits.h codes memcached uses.
pub const EX_USAGE: i32 = 64;
pub const EX_NOUSER: i32 = 67;
pub const EX_OSERR: i32 = 71;
/// memcached's plain `return 1` / `exit(EXIT_FAILURE)`.
pub const EXIT_FAILURE: i32 = 1;
