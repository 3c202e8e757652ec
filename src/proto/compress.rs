//! Compressed request bodies: zstd (`rspamc -z`, rspamd's `Compression: zstd`) and zlib
//! (`spamc -z`, spamd's `Compress: zlib`), each decompressed under a limit on what it expands
//! to.
//!
//! Owns: decompression with a bound. Never touches: sockets, headers (each protocol reads its
//! own header naming the coding).

use std::io::Read;

/// Why a compressed body could not be read.
#[derive(Debug, thiserror::Error)]
pub enum Inflate {
    /// Past the body limit once decompressed.
    #[error("the body expands past the limit of {0} bytes")]
    TooLarge(usize),
    #[error("invalid {0} body: {1}")]
    Invalid(&'static str, std::io::Error),
}

/// Decompresses a zstd body (every frame; frames compressed with a dictionary are refused, as
/// shrike has none), stopping as soon as the output passes `max` bytes: a few kilobytes of zstd can
/// expand to gigabytes, so the limit applies to what it expands to, and nothing past `max + 1`
/// bytes is ever held.
pub fn unzstd(body: &[u8], max: usize) -> Result<Vec<u8>, Inflate> {
    let invalid = |e| Inflate::Invalid("zstd", e);
    let decoder = zstd::stream::read::Decoder::with_buffer(body).map_err(invalid)?;
    bounded(decoder, body.len(), max).map_err(|e| match e {
        Inflate::Invalid(_, e) => invalid(e),
        e => e,
    })
}

/// Decompresses a zlib stream (RFC 1950, what spamc's `compress2` writes) under the same bound.
pub fn unzlib(body: &[u8], max: usize) -> Result<Vec<u8>, Inflate> {
    bounded(flate2::read::ZlibDecoder::new(body), body.len(), max).map_err(|e| match e {
        Inflate::Invalid(_, e) => Inflate::Invalid("zlib", e),
        e => e,
    })
}

fn bounded(decoder: impl Read, packed: usize, max: usize) -> Result<Vec<u8>, Inflate> {
    let mut out = Vec::with_capacity(packed.saturating_mul(4).min(max));
    decoder
        .take(max as u64 + 1)
        .read_to_end(&mut out)
        .map_err(|e| Inflate::Invalid("", e))?;
    if out.len() > max {
        return Err(Inflate::TooLarge(max));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn zlib(bytes: &[u8]) -> Vec<u8> {
        let mut e = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::best());
        e.write_all(bytes).unwrap();
        e.finish().unwrap()
    }

    #[test]
    fn zstd_bodies_decompress_within_the_limit() {
        let message = b"Subject: hi\r\n\r\nbody\r\n".repeat(100);
        let packed = zstd::encode_all(&message[..], 3).unwrap();
        assert_eq!(unzstd(&packed, message.len()).unwrap(), message);
        assert!(matches!(
            unzstd(&packed, message.len() - 1),
            Err(Inflate::TooLarge(_))
        ));
        // Two frames back to back are one body.
        let mut two = packed.clone();
        two.extend_from_slice(&packed);
        assert_eq!(unzstd(&two, 1 << 20).unwrap().len(), 2 * message.len());
        // A bomb: 64 MiB of zeros in a few kB, refused at the limit without expanding further.
        let bomb = zstd::encode_all(std::io::repeat(0).take(64 << 20), 19).unwrap();
        assert!(bomb.len() < 16 << 10, "{}", bomb.len());
        assert!(matches!(unzstd(&bomb, 1 << 20), Err(Inflate::TooLarge(_))));
        assert!(matches!(
            unzstd(b"not zstd at all", 1 << 20),
            Err(Inflate::Invalid("zstd", _))
        ));
        let mut cut = packed.clone();
        cut.truncate(packed.len() / 2);
        assert!(matches!(
            unzstd(&cut, 1 << 20),
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
            unzstd(&packed, 1 << 20),
            Err(Inflate::Invalid("zstd", _))
        ));
        // A frame that writes its dictionary id field, as 0 (no dictionary), reads as usual.
        let mut plain = zstd::bulk::Compressor::new(3).unwrap();
        plain
            .set_parameter(zstd::zstd_safe::CParameter::DictIdFlag(true))
            .unwrap();
        let packed = plain.compress(&message).unwrap();
        assert_eq!(unzstd(&packed, 1 << 20).unwrap(), message);
    }

    #[test]
    fn zlib_bodies_decompress_within_the_limit() {
        let message = b"Subject: hi\r\n\r\nbody\r\n".repeat(100);
        let packed = zlib(&message);
        assert_eq!(unzlib(&packed, message.len()).unwrap(), message);
        assert!(matches!(
            unzlib(&packed, message.len() - 1),
            Err(Inflate::TooLarge(_))
        ));
        let bomb = zlib(&vec![0u8; 64 << 20]);
        assert!(bomb.len() < 128 << 10, "{}", bomb.len());
        assert!(matches!(unzlib(&bomb, 1 << 20), Err(Inflate::TooLarge(_))));
        assert!(matches!(
            unzlib(b"not zlib at all", 1 << 20),
            Err(Inflate::Invalid("zlib", _))
        ));
        // Raw deflate without the zlib header is not what spamc sends.
        let mut raw = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::fast());
        raw.write_all(&message).unwrap();
        assert!(unzlib(&raw.finish().unwrap(), 1 << 20).is_err());
        let mut cut = packed.clone();
        cut.truncate(packed.len() / 2);
        assert!(matches!(
            unzlib(&cut, 1 << 20),
            Err(Inflate::Invalid("zlib", _))
        ));
    }
}
