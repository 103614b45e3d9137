//! The dispatcher between a connection and the protocol handlers: it chooses
//! one handler per connection from the connection's first byte (protocol
//! detection). It sits above the handlers and imports them; the interface
//! they share (`Handler`, `Ctx`, `Step`, `out_full`) is in `handler`.

use crate::handler::Handler;
use crate::settings::ProtocolChoice;

/// Choose the handler for a new connection from its first byte (`-B auto`:
/// 0x80 is the binary protocol's request magic, anything else is text),
/// as memcached's `try_read_command_negotiate` does.
pub fn new_handler(choice: ProtocolChoice, first_byte: u8) -> Box<dyn Handler> {
    let binary = match choice {
        ProtocolChoice::Auto => first_byte == BINARY_REQUEST_MAGIC,
        ProtocolChoice::Binary => true,
        ProtocolChoice::Ascii => false,
    };
    if binary {
        Box::new(crate::binary::BinaryHandler::new())
    } else {
        Box::new(crate::text::AsciiHandler::new())
    }
}

/// The first byte of every binary-protocol request.
pub const BINARY_REQUEST_MAGIC: u8 = 0x80;
