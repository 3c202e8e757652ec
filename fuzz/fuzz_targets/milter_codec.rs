//! Fuzzes the milter codec (`shrike::proto::milter`) with arbitrary MTA bytes.
//!
//! Input: one mode byte, then the stream. Mode bits 0-4 choose how the stream is split
//! into `feed` calls, and bits 5-6 choose the decoder's packet limit. The target checks that
//! the decoder never panics and that its buffer stays bounded. It checks that every decoded
//! command is canonical: re-encoded, it decodes to itself. Every offer goes through
//! `negotiate` + `encode`. Strings from the MTA are echoed back as replies to check that
//! reply framing survives any input, and `ReplyDecoder` must read those replies back.
#![no_main]

#[path = "split.rs"]
mod split;

use libfuzzer_sys::fuzz_target;
use shrike::proto::milter::{
    actions, encode, encode_command, negotiate, protocol, Command, Decoder, Reply, ReplyDecoder,
    DEFAULT_MAX_PACKET, MAX_REPLY_PACKET,
};
use split::chunk_len;

fuzz_target!(|data: &[u8]| {
    let Some((&mode, stream)) = data.split_first() else {
        return;
    };
    let max_packet = match (mode >> 5) & 3 {
        0 => 16,
        1 => 300,
        2 => 65_536,
        _ => DEFAULT_MAX_PACKET,
    };
    let pattern = mode & 0x1f;
    let mut decoder = Decoder::new(max_packet);
    let mut rest = stream;
    let mut step = 0;
    let mut largest = 0;
    while !rest.is_empty() {
        let n = chunk_len(pattern, step, rest.len()).clamp(1, rest.len());
        step += 1;
        largest = largest.max(n);
        let (chunk, tail) = rest.split_at(n);
        rest = tail;
        decoder.feed(chunk);
        assert!(decoder.buffered() <= max_packet + 4 + largest);
        loop {
            match decoder.next_command() {
                Ok(Some(command)) => check_command(&command),
                Ok(None) => break,
                Err(err) => {
                    // Errors are final and free the buffer.
                    assert_eq!(decoder.buffered(), 0);
                    assert_eq!(decoder.next_command(), Err(err));
                    return;
                }
            }
        }
        assert!(decoder.buffered() < max_packet + 4);
    }
    assert_eq!(decoder.finish().is_ok(), decoder.buffered() == 0);
});

fn check_command(command: &Command) {
    // Canonical: encode_command then decode gives the same command back.
    let mut bytes = Vec::new();
    encode_command(command, &mut bytes);
    let mut again = Decoder::new(usize::MAX);
    again.feed(&bytes);
    assert_eq!(again.next_command(), Ok(Some(command.clone())));
    assert_eq!(again.buffered(), 0);

    match command {
        Command::OptNeg(offer) => {
            let want_actions = actions::ADDHDRS | actions::CHGHDRS | actions::QUARANTINE;
            let want_protocol = protocol::NOUNKNOWN
                | protocol::SKIP
                | protocol::NR_HDR
                | protocol::HDR_LEADSPC
                | protocol::MDS_256K
                | protocol::MDS_1M;
            match negotiate(offer, want_actions, want_protocol) {
                Ok(reply) => {
                    assert!(reply.version >= 2 && reply.version <= 6);
                    assert!(reply.version <= offer.version);
                    assert_eq!(reply.actions & !offer.actions, 0);
                    assert_eq!(reply.protocol & !offer.protocol, 0);
                    assert_eq!(reply.protocol & (protocol::MDS_256K | protocol::MDS_1M), 0);
                    let mut out = Vec::new();
                    encode(&Reply::OptNeg(reply), &mut out);
                    assert_eq!(out.len(), 17);
                    assert_eq!(out.get(..5), Some(&[0, 0, 0, 13, b'O'][..]));
                }
                Err(_) => assert!(offer.version < 2),
            }
        }
        Command::Header { name, value } => {
            let reply = Reply::ChangeHeader {
                index: 1,
                name: String::from_utf8_lossy(name).into_owned(),
                value: String::from_utf8_lossy(value).into_owned(),
            };
            check_reply(&reply, 4, 2);
        }
        Command::Helo(text) | Command::Unknown(text) => {
            let text = String::from_utf8_lossy(text).into_owned();
            check_reply(&Reply::ReplyCode(format!("550 5.7.1 {text}")), 0, 1);
            check_reply(&Reply::Quarantine(text), 0, 1);
        }
        _ => {}
    }
}

/// Encodes `reply` and checks its framing: the length field, the size limit, and exactly
/// `strings` NUL terminators after the `fixed` leading bytes, the last at the very end.
/// Line-based replies must carry no CR or LF.
fn check_reply(reply: &Reply, fixed: usize, strings: usize) {
    let mut out = Vec::new();
    encode(reply, &mut out);
    let len = u32::from_be_bytes([out[0], out[1], out[2], out[3]]) as usize;
    assert_eq!(len + 4, out.len());
    assert!(len <= MAX_REPLY_PACKET);
    assert_eq!(out[4], reply.code());
    let body = &out[5 + fixed..];
    assert_eq!(body.iter().filter(|&&b| b == 0).count(), strings);
    assert_eq!(body.last(), Some(&0));
    if matches!(reply, Reply::ReplyCode(_) | Reply::Quarantine(_)) {
        assert!(!body.contains(&b'\r') && !body.contains(&b'\n'));
    }
    // The MTA side reads it back, and sanitizing is idempotent.
    let mut replies = ReplyDecoder::new(MAX_REPLY_PACKET);
    replies.feed(&out);
    let read = replies
        .next_reply()
        .expect("a well-formed reply")
        .expect("one reply");
    assert_eq!(replies.buffered(), 0);
    let mut again = Vec::new();
    encode(&read, &mut again);
    assert_eq!(again, out);
}
