//! Compressed request bodies: zstd (`rspamc -z`, rspamd's `Compression: zstd`) and zlib
//! (`spamc -z`, spamd's `Compress: zlib`), each decompressed under a limit on what it expands
//! to, and only as far as the caller grants the memory for it.
//!
//! Owns: decompression with a bound, and what a decompression holds in memory (the decoder's
//! window and buffers, the output as it grows). Never touches: sockets, headers (each protocol
//! reads its own header naming the coding), the daemon's budget (the caller's `hold` grants or
//! refuses each step).

use std::io::Read;

/// Why a compressed body could not be read.
#[derive(Debug, thiserror::Error)]
pub enum Inflate {
    /// Past the body limit once decompressed.
    #[error("the body expands past the limit of {0} bytes")]
    TooLarge(usize),
    /// The memory for the next step was not granted (`hold` said no).
    #[error("the memory to decompress the body was not granted")]
    Refused,
    #[error("invalid {0} body: {1}")]
    Invalid(&'static str, std::io::Error),
}

/// Bytes the decoder hands over per read.
const CHUNK: usize = 64 * 1024;
/// zstd's largest block: the decoder keeps one being read and one being written beside its
/// window.
const ZSTD_BLOCK: usize = 128 * 1024;
/// A decoding context's tables (Huffman, FSE, its state), generously.
const ZSTD_CONTEXT: usize = 256 * 1024;
/// miniz_oxide's inflate state: a 32 KiB dictionary and its tables.
const ZLIB_STATE: usize = 64 * 1024;

/// Decompresses a zstd body (every frame; frames compressed with a dictionary are refused, as
/// shrike has none), stopping as soon as the output passes `max` bytes: a few kilobytes of zstd
/// can expand to gigabytes, so the limit applies to what it expands to, and nothing past `max`
/// bytes of output is ever held.
///
/// `hold(total)` is asked, before each allocation, whether the decompression may hold `total`
/// bytes in all from then on (the decoder's window and buffers and the output's capacity, with
/// the old block too for the moment a growing output moves); a smaller `total` gives memory
/// back. It is asked for the decoder first, with the window its frames' headers name, before
/// anything is decompressed. A refusal stops with [`Inflate::Refused`].
pub fn unzstd(
    body: &[u8],
    max: usize,
    hold: &mut dyn FnMut(usize) -> bool,
) -> Result<Vec<u8>, Inflate> {
    let invalid = |e| Inflate::Invalid("zstd", e);
    let frames = zstd_frames(body, max);
    if frames.content.is_some_and(|n| n > max as u64) {
        return Err(Inflate::TooLarge(max));
    }
    let decoder_bytes = frames.window + 2 * ZSTD_BLOCK + ZSTD_CONTEXT + CHUNK;
    // With every frame's size declared the output is allocated once, at that size (a frame
    // that lies about it fails to decode).
    let initial = match frames.content {
        Some(n) => n as usize,
        None => body.len().saturating_mul(4).min(max),
    };
    if !hold(decoder_bytes + initial) {
        return Err(Inflate::Refused);
    }
    let decoder = zstd::stream::read::Decoder::with_buffer(body).map_err(invalid)?;
    bounded(decoder, decoder_bytes, initial, max, hold).map_err(|e| match e {
        Inflate::Invalid(_, e) => invalid(e),
        e => e,
    })
}

/// Decompresses a zlib stream (RFC 1950, what spamc's `compress2` writes) under the same bound
/// and grants as [`unzstd`].
pub fn unzlib(
    body: &[u8],
    max: usize,
    hold: &mut dyn FnMut(usize) -> bool,
) -> Result<Vec<u8>, Inflate> {
    let decoder_bytes = ZLIB_STATE + CHUNK;
    let initial = body.len().saturating_mul(4).min(max);
    if !hold(decoder_bytes + initial) {
        return Err(Inflate::Refused);
    }
    let decoder = flate2::bufread::ZlibDecoder::new(body);
    bounded(decoder, decoder_bytes, initial, max, hold).map_err(|e| match e {
        Inflate::Invalid(_, e) => Inflate::Invalid("zlib", e),
        e => e,
    })
}

/// Reads `decoder` to its end into an output that starts at `initial` bytes and doubles (at
/// most to `max`) when full, each growth granted by `hold` first; `decoder_bytes` is what the
/// decoder holds meanwhile. Ends holding only the output.
fn bounded(
    mut decoder: impl Read,
    decoder_bytes: usize,
    initial: usize,
    max: usize,
    hold: &mut dyn FnMut(usize) -> bool,
) -> Result<Vec<u8>, Inflate> {
    let mut out: Vec<u8> = Vec::with_capacity(initial);
    let mut chunk = vec![0u8; CHUNK];
    loop {
        let n = match decoder.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(Inflate::Invalid("", e)),
        };
        let need = out.len() + n;
        if need > max {
            return Err(Inflate::TooLarge(max));
        }
        if need > out.capacity() {
            let old = out.capacity();
            let new = old.saturating_mul(2).min(max).max(need);
            if !hold(decoder_bytes + old + new) {
                return Err(Inflate::Refused);
            }
            out.reserve_exact(new - out.len());
            hold(decoder_bytes + out.capacity());
        }
        out.extend_from_slice(&chunk[..n]);
    }
    drop(decoder);
    drop(chunk);
    hold(out.capacity());
    Ok(out)
}

/// What a zstd body's frame headers say about its decompression.
#[derive(Debug, PartialEq, Eq)]
struct Frames {
    /// The largest window a frame asks the decoder to keep (the output it copies matches
    /// from), at most that frame's declared content size and at most `max`: the window fills
    /// only as output is produced, and output stops at `max`.
    window: usize,
    /// The declared content sizes' sum, when every frame declares one.
    content: Option<u64>,
}

/// Reads the frame headers of a zstd body (RFC 8878, 3.1.1), without decompressing. What it
/// cannot read is left to the decoder, which refuses it.
fn zstd_frames(body: &[u8], max: usize) -> Frames {
    const MAGIC: u32 = 0xFD2F_B528;
    let mut frames = Frames {
        window: 0,
        content: Some(0),
    };
    let mut at = 0;
    while let Some(magic) = le(body, at, 4) {
        let magic = magic as u32;
        if magic & 0xFFFF_FFF0 == 0x184D_2A50 {
            // A skippable frame: its length, then that many bytes nobody decodes.
            let Some(len) = le(body, at + 4, 4) else {
                break;
            };
            at = at.saturating_add(8).saturating_add(len as usize);
            continue;
        }
        if magic != MAGIC {
            break;
        }
        let Some(&descriptor) = body.get(at + 4) else {
            break;
        };
        let single_segment = descriptor & 0x20 != 0;
        let mut pos = at + 5;
        let mut window = None;
        if !single_segment {
            let Some(&w) = body.get(pos) else { break };
            pos += 1;
            let base = 1u64 << (10 + u32::from(w >> 3));
            window = Some(base + base / 8 * u64::from(w & 7));
        }
        pos += [0, 1, 2, 4][usize::from(descriptor & 3)];
        let content = match (descriptor >> 6, single_segment) {
            (0, false) => None,
            (0, true) => le(body, pos, 1),
            (1, _) => le(body, pos, 2).map(|n| n + 256),
            (2, _) => le(body, pos, 4),
            _ => le(body, pos, 8),
        };
        let window = match (window, content) {
            (Some(w), Some(c)) => w.min(c),
            (Some(w), None) => w,
            (None, c) => c.unwrap_or(0),
        };
        frames.window = frames
            .window
            .max(usize::try_from(window).unwrap_or(usize::MAX).min(max));
        frames.content = match (frames.content, content) {
            (Some(sum), Some(c)) => Some(sum.saturating_add(c)),
            _ => None,
        };
        match zstd::zstd_safe::find_frame_compressed_size(&body[at..]) {
            Ok(n) if n > 0 => at += n,
            _ => break,
        }
    }
    frames
}

/// The little-endian number of `n` bytes at `at`, if there.
fn le(bytes: &[u8], at: usize, n: usize) -> Option<u64> {
    let b = bytes.get(at..at.checked_add(n)?)?;
    Some(b.iter().rev().fold(0, |v, &x| v << 8 | u64::from(x)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    /// A `hold` that grants everything.
    fn any(_: usize) -> bool {
        true
    }

    fn zlib(bytes: &[u8]) -> Vec<u8> {
        let mut e = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::best());
        e.write_all(bytes).unwrap();
        e.finish().unwrap()
    }

    #[test]
    fn zstd_bodies_decompress_within_the_limit() {
        let message = b"Subject: hi\r\n\r\nbody\r\n".repeat(100);
        let packed = zstd::encode_all(&message[..], 3).unwrap();
        assert_eq!(unzstd(&packed, message.len(), &mut any).unwrap(), message);
        assert!(matches!(
            unzstd(&packed, message.len() - 1, &mut any),
            Err(Inflate::TooLarge(_))
        ));
        // Two frames back to back are one body.
        let mut two = packed.clone();
        two.extend_from_slice(&packed);
        assert_eq!(
            unzstd(&two, 1 << 20, &mut any).unwrap().len(),
            2 * message.len()
        );
        // A bomb: 64 MiB of zeros in a few kB, refused at the limit without expanding further.
        let bomb = zstd::encode_all(std::io::repeat(0).take(64 << 20), 19).unwrap();
        assert!(bomb.len() < 16 << 10, "{}", bomb.len());
        assert!(matches!(
            unzstd(&bomb, 1 << 20, &mut any),
            Err(Inflate::TooLarge(_))
        ));
        assert!(matches!(
            unzstd(b"not zstd at all", 1 << 20, &mut any),
            Err(Inflate::Invalid("zstd", _))
        ));
        let mut cut = packed.clone();
        cut.truncate(packed.len() / 2);
        assert!(matches!(
            unzstd(&cut, 1 << 20, &mut any),
            Err(Inflate::Invalid("zstd", _))
        ));
    }

    #[test]
    fn zstd_frames_needing_a_dictionary_are_refused_and_dictionary_id_0_is_none() {
        let message = b"Subject: hi\r\n\r\nbody body body\r\n".repeat(20);
        let dict = b"Subject: hi\r\n\r\nbody body body\r\n".repeat(4);
        let mut with_dict = zstd::bulk::Compressor::with_dictionary(3, &dict).unwrap();
        let packed = with_dict.compress(&message).unwrap();
        assert!(matches!(
            unzstd(&packed, 1 << 20, &mut any),
            Err(Inflate::Invalid("zstd", _))
        ));
        // A frame that writes its dictionary id field, as 0 (no dictionary), reads as usual.
        let mut plain = zstd::bulk::Compressor::new(3).unwrap();
        plain
            .set_parameter(zstd::zstd_safe::CParameter::DictIdFlag(true))
            .unwrap();
        let packed = plain.compress(&message).unwrap();
        assert_eq!(unzstd(&packed, 1 << 20, &mut any).unwrap(), message);
    }

    #[test]
    fn zlib_bodies_decompress_within_the_limit() {
        let message = b"Subject: hi\r\n\r\nbody\r\n".repeat(100);
        let packed = zlib(&message);
        assert_eq!(unzlib(&packed, message.len(), &mut any).unwrap(), message);
        assert!(matches!(
            unzlib(&packed, message.len() - 1, &mut any),
            Err(Inflate::TooLarge(_))
        ));
        let bomb = zlib(&vec![0u8; 64 << 20]);
        assert!(bomb.len() < 128 << 10, "{}", bomb.len());
        assert!(matches!(
            unzlib(&bomb, 1 << 20, &mut any),
            Err(Inflate::TooLarge(_))
        ));
        assert!(matches!(
            unzlib(b"not zlib at all", 1 << 20, &mut any),
            Err(Inflate::Invalid("zlib", _))
        ));
        // Raw deflate without the zlib header is not what spamc sends.
        let mut raw = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::fast());
        raw.write_all(&message).unwrap();
        assert!(unzlib(&raw.finish().unwrap(), 1 << 20, &mut any).is_err());
        let mut cut = packed.clone();
        cut.truncate(packed.len() / 2);
        assert!(matches!(
            unzlib(&cut, 1 << 20, &mut any),
            Err(Inflate::Invalid("zlib", _))
        ));
    }

    /// What a decompression asked `hold` for: the largest total, and the last one.
    fn asked(
        f: impl FnOnce(&mut dyn FnMut(usize) -> bool) -> Result<Vec<u8>, Inflate>,
        limit: usize,
    ) -> (Result<Vec<u8>, Inflate>, usize, usize) {
        let (mut peak, mut last) = (0, 0);
        let result = f(&mut |total| {
            if total > limit {
                return false;
            }
            peak = peak.max(total);
            last = total;
            true
        });
        (result, peak, last)
    }

    #[test]
    fn inflation_asks_for_its_memory_before_taking_it_and_stops_when_refused() {
        // 40 MiB of one byte, a few kB at level 19 (an 8 MiB window), no size declared.
        let bomb = zstd::encode_all(std::io::repeat(b'a').take(40 << 20), 19).unwrap();
        let frames = zstd_frames(&bomb, 50 << 20);
        assert_eq!(frames.content, None);
        assert_eq!(frames.window, 8 << 20, "level 19's window");
        // Granted: the output's growth, never more than the decoder, the output's old block
        // and its new one (doubled, at most to the limit); at the end only the output is held.
        let (out, peak, last) = asked(|h| unzstd(&bomb, 50 << 20, h), usize::MAX);
        let out = out.unwrap();
        assert_eq!(out.len(), 40 << 20);
        assert_eq!(last, out.capacity());
        assert!(out.capacity() <= 50 << 20);
        assert!(peak <= (9 << 20) + (40 << 20) + (50 << 20), "{peak}");
        // Refused at 16 MiB: it stops there, having held no more than that.
        let (out, peak, _) = asked(|h| unzstd(&bomb, 50 << 20, h), 16 << 20);
        assert!(matches!(out, Err(Inflate::Refused)), "{out:?}");
        assert!(peak <= 16 << 20);
        // A body that cannot get its decoder's window is refused before anything is decoded.
        let (out, peak, _) = asked(|h| unzstd(&bomb, 50 << 20, h), 1 << 20);
        assert!(matches!(out, Err(Inflate::Refused)), "{out:?}");
        assert_eq!(peak, 0);
        // The same under zlib.
        let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::best());
        std::io::copy(&mut std::io::repeat(b'a').take(40 << 20), &mut z).unwrap();
        let zbomb = z.finish().unwrap();
        let (out, peak, _) = asked(|h| unzlib(&zbomb, 50 << 20, h), 16 << 20);
        assert!(matches!(out, Err(Inflate::Refused)), "{out:?}");
        assert!(peak <= 16 << 20);
        let (out, _, last) = asked(|h| unzlib(&zbomb, 50 << 20, h), usize::MAX);
        assert_eq!(out.unwrap().len(), 40 << 20);
        assert!(last >= 40 << 20);
    }

    #[test]
    fn declared_sizes_allocate_once_and_a_declared_excess_is_refused_unread() {
        let message = b"Subject: hi\r\n\r\nbody\r\n".repeat(1000);
        // One-shot compression declares the content size in the frame header.
        let packed = zstd::bulk::compress(&message, 3).unwrap();
        let frames = zstd_frames(&packed, 1 << 20);
        assert_eq!(frames.content, Some(message.len() as u64));
        assert!(frames.window <= message.len(), "{frames:?}");
        let mut two = packed.clone();
        two.extend_from_slice(&packed);
        assert_eq!(
            zstd_frames(&two, 1 << 20).content,
            Some(2 * message.len() as u64)
        );
        let mut asks = Vec::new();
        let out = unzstd(&packed, 1 << 20, &mut |t| {
            asks.push(t);
            true
        })
        .unwrap();
        assert_eq!(out, message);
        assert_eq!(out.capacity(), message.len(), "allocated once, at the size");
        assert_eq!(asks.last(), Some(&message.len()));
        // Declared past the limit: refused before the decoder or the output exist.
        let mut asked = false;
        let e = unzstd(&packed, message.len() - 1, &mut |_| {
            asked = true;
            true
        });
        assert!(matches!(e, Err(Inflate::TooLarge(_))));
        assert!(!asked);
        // Headers that do not parse are left to the decoder.
        assert_eq!(
            zstd_frames(b"\x28\xb5\x2f", 100),
            Frames {
                window: 0,
                content: Some(0)
            }
        );
    }
}
