//! A test MTA speaking the milter protocol to the daemon, with shrike's own codec: what
//! tests/milter.rs and tests/dnsauth.rs drive the milter with.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use shrike::proto::milter::{encode_command, Command, OptNeg, Reply, ReplyDecoder};

/// Postfix 3.7's offer (see ../shared/tools/mta/captures).
pub const POSTFIX: OptNeg = OptNeg {
    version: 6,
    actions: 0x1ff,
    protocol: 0x1f_ffff,
};

pub struct Mta {
    /// The socket, for tests that write raw bytes.
    pub s: TcpStream,
    replies: ReplyDecoder,
}

impl Mta {
    pub fn connect(port: u16) -> Mta {
        let s = TcpStream::connect(("127.0.0.1", port)).expect("connect to the milter");
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        Mta {
            s,
            replies: ReplyDecoder::new(1 << 20),
        }
    }

    pub fn send(&mut self, cmds: &[Command]) {
        let mut out = Vec::new();
        for c in cmds {
            encode_command(c, &mut out);
        }
        self.s.write_all(&out).unwrap();
    }

    /// Reads replies until one of them is final (accept, reject, tempfail, discard, reply code,
    /// continue, option negotiation); returns them all.
    pub fn until_final(&mut self) -> Vec<Reply> {
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            while let Some(r) = self.replies.next_reply().expect("a well-formed reply") {
                let done = matches!(
                    r,
                    Reply::Accept
                        | Reply::Reject
                        | Reply::Tempfail
                        | Reply::Discard
                        | Reply::ReplyCode(_)
                        | Reply::Continue
                        | Reply::OptNeg(_)
                );
                got.push(r);
                if done {
                    return got;
                }
            }
            let n = self.s.read(&mut buf).expect("read from the milter");
            assert!(n > 0, "milter closed the connection; got {got:?}");
            self.replies.feed(&buf[..n]);
        }
    }

    /// True when the server closed the connection (EOF) within the read timeout.
    pub fn closed(&mut self) -> bool {
        let mut buf = [0u8; 64];
        matches!(self.s.read(&mut buf), Ok(0) | Err(_))
    }
}

/// A whole SMTP transaction for `raw` (CRLF), headers sent with their leading space.
pub fn transaction(ip: &str, helo: &str, mail_from: &str, raw: &str) -> Vec<Command> {
    let (head, body) = raw.split_once("\r\n\r\n").unwrap();
    let mut cmds = vec![
        Command::Connect {
            hostname: b"client.example".to_vec(),
            family: b'4',
            port: 40000,
            address: ip.as_bytes().to_vec(),
        },
        Command::Helo(helo.as_bytes().to_vec()),
        Command::Mail(vec![format!("<{mail_from}>").into_bytes()]),
        Command::Rcpt(vec![b"<bob@rcpt.example>".to_vec()]),
        Command::Data,
    ];
    cmds.extend(header_commands(head.split("\r\n"), "\r\n"));
    cmds.push(Command::EndOfHeaders);
    cmds.push(Command::Body(body.as_bytes().to_vec()));
    cmds.push(Command::EndOfMessage(Vec::new()));
    cmds
}

/// One `Header` command a header of the section given line by line, continuation lines folded
/// back in after `fold`; values keep their leading space (HDR_LEADSPC).
pub fn header_commands<'a>(lines: impl Iterator<Item = &'a str>, fold: &str) -> Vec<Command> {
    let mut headers: Vec<(String, String)> = Vec::new();
    for line in lines {
        if line.starts_with([' ', '\t']) {
            if let Some(last) = headers.last_mut() {
                last.1.push_str(fold);
                last.1.push_str(line);
            }
        } else if let Some((n, v)) = line.split_once(':') {
            headers.push((n.to_string(), v.to_string()));
        }
    }
    headers
        .into_iter()
        .map(|(n, v)| Command::Header {
            name: n.into_bytes(),
            value: v.into_bytes(),
        })
        .collect()
}
