/*
 * SPDX-FileCopyrightText: 2020 Stalwart Labs LLC <hello@stalw.art>
 *
 * SPDX-License-Identifier: Apache-2.0 OR MIT
 */

use crate::{HeaderValue, parsers::MessageStream};

impl<'x> MessageStream<'x> {
    // Patched in shrike's vendored copy (see vendor/README.md): the value's lines are found
    // with memchr instead of one iterator step per byte; the result and the stream's position
    // afterwards are the same as the original loop's.
    pub fn parse_raw(&mut self) -> HeaderValue<'x> {
        let data = self.data;
        let is_space = |b: &u8| matches!(b, b' ' | b'\t' | b'\r');
        let mut first: Option<usize> = None;
        let mut last = 0;
        let mut line = self.offset();
        let end = loop {
            let rest = &data[line..];
            let newline = memchr::memchr(b'\n', rest);
            let text = &rest[..newline.unwrap_or(rest.len())];
            if let Some(f) = text.iter().position(|b| !is_space(b)) {
                first.get_or_insert(line + f);
                last = line + text.iter().rposition(|b| !is_space(b)).unwrap_or(f) + 1;
            }
            let Some(n) = newline else {
                // The original loop stepped once more past the end.
                break self.pos.max(data.len()) + 1;
            };
            let after = line + n + 1;
            match data.get(after) {
                // A folded line: the leading space is consumed with the newline.
                Some(b' ' | b'\t') => line = after + 1,
                _ => break after,
            }
        };
        self.pos = end;
        self.iter = data.get(end..).unwrap_or_default().iter().peekable();

        match first {
            Some(first) => HeaderValue::Text(crate::decoders::utf8_lossy(&data[first..last])),
            None => HeaderValue::Empty,
        }
    }

    pub fn parse_and_ignore(&mut self) {
        while let Some(&ch) = self.next() {
            if ch == b'\n' && !self.try_next_is_space() {
                break;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::{MessageParser, parsers::MessageStream};

    /// The original byte loop, kept to check the memchr version against (shrike's patch).
    fn parse_raw_reference<'x>(stream: &mut MessageStream<'x>) -> crate::HeaderValue<'x> {
        let mut token_start: usize = 0;
        let mut token_end: usize = 0;
        while let Some(ch) = stream.next() {
            match ch {
                b'\n' => {
                    if !stream.try_next_is_space() {
                        break;
                    } else {
                        continue;
                    }
                }
                b' ' | b'\t' | b'\r' => continue,
                _ => (),
            }
            if token_start == 0 {
                token_start = stream.offset();
            }
            token_end = stream.offset();
        }
        if token_start > 0 {
            crate::HeaderValue::Text(String::from_utf8_lossy(
                stream.bytes(token_start - 1..token_end),
            ))
        } else {
            crate::HeaderValue::Empty
        }
    }

    #[test]
    fn parse_raw_matches_the_original_loop() {
        let alphabet = [b'a', b' ', b'\t', b'\r', b'\n', b':', 0xc3, 0xa9, 0xff];
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        for _ in 0..200_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let len = (x % 12) as usize;
            let input: Vec<u8> = (0..len)
                .map(|i| alphabet[((x >> (8 + 4 * i)) % alphabet.len() as u64) as usize])
                .collect();
            for start in 0..=len + 1 {
                let mut a = MessageStream::new(&input);
                let mut b = MessageStream::new(&input);
                for _ in 0..start {
                    a.next();
                    b.next();
                }
                let va = a.parse_raw();
                let vb = parse_raw_reference(&mut b);
                assert_eq!(va, vb, "{input:?} from {start}");
                assert_eq!(a.pos, b.pos, "{input:?} from {start}");
                assert_eq!(a.next(), b.next(), "{input:?} from {start}");
            }
        }
    }

    #[test]
    fn parse_raw_text() {
        let inputs = [
            ("Saying Hello\nMessage-Id", "Saying Hello"),
            ("Re: Saying Hello\r\n \r\nFrom:", "Re: Saying Hello"),
            (
                concat!(
                    " from x.y.test\n      by example.net\n      via TCP\n",
                    "      with ESMTP\n      id ABC12345\n      ",
                    "for <mary@example.net>;  21 Nov 1997 10:05:43 -0600\n"
                ),
                concat!(
                    "from x.y.test\n      by example.net\n      via TCP\n",
                    "      with ESMTP\n      id ABC12345\n      ",
                    "for <mary@example.net>;  21 Nov 1997 10:05:43 -0600"
                ),
            ),
            ("Re: Saying Hello", "Re: Saying Hello"), // No newline test
        ];

        for (input, expected) in inputs {
            assert_eq!(
                MessageStream::new(input.as_bytes())
                    .parse_raw()
                    .unwrap_text(),
                expected,
                "Failed for '{:?}'",
                input
            );
        }
    }

    #[test]
    fn ordered_raw_headers() {
        let input = br#"From: Art Vandelay <art@vandelay.com>
To: jane@example.com
Date: Sat, 20 Nov 2021 14:22:01 -0800
Subject: Why not both importing AND exporting? =?utf-8?b?4pi6?=
Content-Type: multipart/mixed; boundary="festivus";

Here's a message body.
"#;
        let message = MessageParser::default().parse(input).unwrap();
        let mut iter = message.headers_raw();
        assert_eq!(
            iter.next().unwrap(),
            ("From", " Art Vandelay <art@vandelay.com>\n")
        );
        assert_eq!(iter.next().unwrap(), ("To", " jane@example.com\n"));
        assert_eq!(
            iter.next().unwrap(),
            ("Date", " Sat, 20 Nov 2021 14:22:01 -0800\n")
        );
        assert_eq!(
            iter.next().unwrap(),
            (
                "Subject",
                " Why not both importing AND exporting? =?utf-8?b?4pi6?=\n"
            )
        );
        assert_eq!(
            iter.next().unwrap(),
            ("Content-Type", " multipart/mixed; boundary=\"festivus\";\n")
        );
    }
}
