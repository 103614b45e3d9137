//! The sequences that need the clock: short TTLs (set, touch, gat, meta `T`,
//! binary exptimes) and `flush_all` with a delay, one per family.
//!
//! Both servers count time in whole seconds from their own start, so their
//! ticks are out of phase. Every check sits far from a boundary: a TTL of 3 s
//! is read back at once (it cannot end before 2 s have passed) and again
//! after 4.5 s (at least 4 ticks later); `flush_all 3` fires 1 to 2 s after
//! it is sent, and is checked at once and after 4 s.

use super::gen::{Cmd, Family, Key, MFlag, Seq, Step, TextStore};
use cachalot_protocol::client::request::binary as b;

fn step(cmd: Cmd) -> Step {
    Step {
        cmd,
        new_batch: false,
    }
}

fn sleep(ms: u64) -> Step {
    Step {
        cmd: Cmd::Sleep { ms },
        new_batch: true,
    }
}

fn set(key: Key, exptime: i64) -> Step {
    step(Cmd::Store {
        op: TextStore::Set,
        key,
        flags: 0,
        exptime,
        value: b"val".to_vec(),
        noreply: false,
    })
}

fn get(keys: &[Key]) -> Step {
    step(Cmd::Retrieve {
        cas: false,
        exptime: None,
        keys: keys.to_vec(),
    })
}

fn mg(key: Key, flags: Vec<MFlag>) -> Step {
    step(Cmd::Meta {
        op: "mg",
        key,
        value: None,
        flags,
    })
}

fn bin(opcode: u8, extras: &[u8], key: Option<Key>, value: &[u8]) -> Step {
    step(Cmd::Binary {
        opcode,
        opaque: 7,
        cas: None,
        extras: extras.to_vec(),
        key,
        value: value.to_vec(),
    })
}

const A: Key = Key::General(0);
const B: Key = Key::General(1);
const C: Key = Key::General(2);
const D: Key = Key::General(3);

pub fn sequences() -> Vec<Seq> {
    let text = vec![
        set(A, 3),
        set(B, 0),
        set(C, 0),
        set(D, 0),
        step(Cmd::Touch {
            key: C,
            exptime: 3,
            noreply: false,
        }),
        step(Cmd::Retrieve {
            cas: true,
            exptime: Some(3),
            keys: vec![D],
        }),
        get(&[A, B, C, D]),
        sleep(4500),
        get(&[A, B, C, D]),
        step(Cmd::FlushAll {
            delay: Some(3),
            noreply: false,
        }),
        get(&[B]),
        sleep(4000),
        get(&[B]),
        set(B, 0),
        get(&[B]),
    ];
    let v = |t: &str| Some(t.as_bytes().to_vec());
    let meta = vec![
        step(Cmd::Meta {
            op: "ms",
            key: A,
            value: v("val"),
            flags: vec![MFlag::Int(b'T', 3)],
        }),
        step(Cmd::Meta {
            op: "ms",
            key: B,
            value: v("val"),
            flags: vec![],
        }),
        mg(B, vec![MFlag::Bare(b'v'), MFlag::Int(b'T', 3)]),
        step(Cmd::Meta {
            op: "ma",
            key: C,
            value: None,
            flags: vec![MFlag::Int(b'N', 3), MFlag::Bare(b'v')],
        }),
        mg(A, vec![MFlag::Bare(b'v')]),
        mg(B, vec![MFlag::Bare(b'v')]),
        mg(C, vec![MFlag::Bare(b'v')]),
        sleep(4500),
        mg(A, vec![MFlag::Bare(b'v')]),
        mg(B, vec![MFlag::Bare(b'v')]),
        mg(C, vec![MFlag::Bare(b'v')]),
        step(Cmd::Meta {
            op: "ms",
            key: D,
            value: v("val"),
            flags: vec![],
        }),
        step(Cmd::FlushAll {
            delay: Some(3),
            noreply: false,
        }),
        mg(D, vec![MFlag::Bare(b'v')]),
        sleep(4000),
        mg(D, vec![MFlag::Bare(b'v')]),
    ];
    let binary = vec![
        bin(0x01, &b::store_extras(1, 3), Some(A), b"val"),
        bin(0x01, &b::store_extras(2, 0), Some(B), b"val"),
        bin(0x01, &b::store_extras(3, 0), Some(C), b"val"),
        bin(0x1c, &b::time_extras(3), Some(B), b""),
        bin(0x1d, &b::time_extras(3), Some(C), b""),
        bin(0x05, &b::arith_extras(1, 5, 3), Some(D), b""),
        bin(0x0c, &[], Some(A), b""),
        bin(0x0c, &[], Some(B), b""),
        bin(0x0c, &[], Some(C), b""),
        bin(0x0c, &[], Some(D), b""),
        sleep(4500),
        bin(0x0c, &[], Some(A), b""),
        bin(0x0c, &[], Some(B), b""),
        bin(0x0c, &[], Some(C), b""),
        bin(0x0c, &[], Some(D), b""),
        bin(0x01, &b::store_extras(4, 0), Some(A), b"val"),
        bin(0x08, &b::time_extras(3), None, b""),
        bin(0x0c, &[], Some(A), b""),
        sleep(4000),
        bin(0x0c, &[], Some(A), b""),
    ];
    [
        (Family::Text, text),
        (Family::Meta, meta),
        (Family::Binary, binary),
    ]
    .into_iter()
    .enumerate()
    .map(|(i, (family, mut steps))| {
        steps[0].new_batch = true;
        Seq {
            seed: i as u64,
            zone: false,
            family,
            steps,
        }
    })
    .collect()
}
