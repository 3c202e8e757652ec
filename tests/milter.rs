//! The milter server as a real process, driven packet by packet with shrike's codec playing the
//! MTA: negotiation, no-reply steps, verdicts (550, headers, forged X-Spam-* removal), several
//! messages per connection, abort, an old MTA without the no-reply bits, bad packets, and the
//! fallback when the queue is full.

#[allow(dead_code)]
#[path = "common/daemon.rs"]
mod daemon;
#[allow(dead_code)]
#[path = "common/mta.rs"]
mod mta;

use mta::{Mta, POSTFIX};

use std::io::Write;
use std::path::Path;

use daemon::{Daemon, Options};
use shrike::proto::milter::{encode_command, protocol, Command, Decoder, OptNeg, Reply};

fn message_commands(path: &str, extra_header: Option<(&str, &str)>) -> Vec<Command> {
    let raw = std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/data")
            .join(path),
    )
    .expect("test message");
    let text = String::from_utf8_lossy(&raw).replace("\r\n", "\n");
    let (head, body) = text.split_once("\n\n").unwrap_or((&text, ""));
    let mut cmds = vec![
        Command::Macro {
            stage: b'M',
            pairs: vec![(b"i".to_vec(), b"4ABCDEF".to_vec())],
        },
        Command::Mail(vec![b"<sender@example.net>".to_vec()]),
        Command::Rcpt(vec![b"<bob@example.com>".to_vec()]),
        Command::Data,
    ];
    if let Some((n, v)) = extra_header {
        cmds.push(Command::Header {
            name: n.as_bytes().to_vec(),
            value: format!(" {v}").into_bytes(),
        });
    }
    cmds.extend(mta::header_commands(head.lines(), "\n"));
    cmds.push(Command::EndOfHeaders);
    let body = body.replace('\n', "\r\n").into_bytes();
    for chunk in body.chunks(1000) {
        cmds.push(Command::Body(chunk.to_vec()));
    }
    cmds.push(Command::EndOfMessage(Vec::new()));
    cmds
}

fn connect_commands() -> Vec<Command> {
    vec![
        Command::Macro {
            stage: b'C',
            pairs: vec![(b"{client_addr}".to_vec(), b"192.0.2.44".to_vec())],
        },
        Command::Connect {
            hostname: b"mail.example.org".to_vec(),
            family: b'4',
            port: 40000,
            address: b"192.0.2.44".to_vec(),
        },
        Command::Helo(b"mail.example.org".to_vec()),
    ]
}

fn header<'a>(replies: &'a [Reply], name: &str) -> Option<&'a str> {
    replies.iter().find_map(|r| match r {
        Reply::AddHeader { name: n, value } if n == name => Some(value.as_str()),
        _ => None,
    })
}

#[test]
fn postfix_like_session_gets_verdicts_in_one_round_trip_each() {
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start(dir.path(), Options::default());
    let mut mta = Mta::connect(d.milter);
    mta.send(&[Command::OptNeg(POSTFIX)]);
    let neg = mta.until_final();
    let Reply::OptNeg(ours) = neg[0] else {
        panic!("{neg:?}")
    };
    assert_eq!(ours.version, 6);
    assert_eq!(
        ours.actions,
        0x01 | 0x10 | 0x20,
        "ADDHDRS | CHGHDRS | QUARANTINE"
    );
    for bit in [
        protocol::NR_CONN,
        protocol::NR_HELO,
        protocol::NR_MAIL,
        protocol::NR_RCPT,
        protocol::NR_HDR,
        protocol::NR_BODY,
        protocol::NR_EOH,
        protocol::NR_DATA,
        protocol::SKIP,
        protocol::HDR_LEADSPC,
    ] {
        assert_ne!(ours.protocol & bit, 0, "bit {bit:#x} not requested");
    }
    assert_eq!(ours.protocol & (protocol::NOHDRS | protocol::NOBODY), 0);

    // GTUBE: everything goes out at once; the only answer is the 550 at end of message.
    let mut cmds = connect_commands();
    cmds.extend(message_commands("gtube.eml", None));
    mta.send(&cmds);
    let r = mta.until_final();
    assert_eq!(r.len(), 1, "{r:?}");
    let Reply::ReplyCode(text) = &r[0] else {
        panic!("{r:?}")
    };
    assert!(text.starts_with("550 5.7.1 "), "{text}");

    // A second message on the same connection, with a forged X-Spam-Status.
    mta.send(&message_commands(
        "daemon/ham.eml",
        Some(("X-Spam-Status", "No, forged")),
    ));
    let r = mta.until_final();
    assert_eq!(r.last(), Some(&Reply::Accept), "{r:?}");
    assert!(
        r.contains(&Reply::ChangeHeader {
            index: 1,
            name: "X-Spam-Status".into(),
            value: String::new(),
        }),
        "{r:?}"
    );
    let status = header(&r, "X-Spam-Status").expect("X-Spam-Status added");
    assert!(status.starts_with(" No, score="), "{status:?}");
    assert!(header(&r, "X-Spam-Score").is_some());
    assert!(header(&r, "X-Spam-Symbols").is_some());

    // Abort in the middle of a message, then a full one.
    let mut partial = message_commands("gtube.eml", None);
    partial.truncate(6);
    partial.push(Command::Abort);
    mta.send(&partial);
    mta.send(&message_commands("daemon/ham.eml", None));
    let r = mta.until_final();
    assert_eq!(r.last(), Some(&Reply::Accept), "{r:?}");

    mta.send(&[Command::Quit]);
    assert!(mta.closed());
    let stat = d.get("/stat").json();
    assert_eq!(stat["scanned"], 3, "{stat}");
    assert_eq!(stat["actions"]["reject"], 1);
}

#[test]
fn old_mta_without_no_reply_bits_gets_a_continue_per_step() {
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start(dir.path(), Options::default());
    let mut mta = Mta::connect(d.milter);
    mta.send(&[Command::OptNeg(OptNeg {
        version: 2,
        actions: 0x01,
        protocol: 0x7f,
    })]);
    let Reply::OptNeg(ours) = mta.until_final()[0] else {
        panic!("no optneg")
    };
    assert_eq!(ours.version, 2);
    assert_eq!(ours.actions, 0x01);
    assert_eq!(
        ours.protocol & !0x7f,
        0,
        "asked for bits the MTA did not offer"
    );
    let mut steps = connect_commands();
    steps.extend(message_commands("daemon/ham.eml", None));
    for cmd in steps {
        let is_macro = matches!(cmd, Command::Macro { .. });
        let is_eom = matches!(cmd, Command::EndOfMessage(_));
        mta.send(std::slice::from_ref(&cmd));
        if is_macro {
            continue;
        }
        let r = mta.until_final();
        if is_eom {
            assert_eq!(r.last(), Some(&Reply::Accept), "{r:?}");
            assert!(header(&r, "X-Spam-Score").is_some(), "{r:?}");
            // Without HDR_LEADSPC the MTA adds the space itself.
            assert!(!header(&r, "X-Spam-Score").unwrap().starts_with(' '));
        } else {
            assert_eq!(r, [Reply::Continue], "after {cmd:?}");
        }
    }
}

#[test]
fn bad_packets_close_only_their_connection() {
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start(dir.path(), Options::default());
    // A 4 GiB length.
    let mut bad = Mta::connect(d.milter);
    bad.s.write_all(&[0xff, 0xff, 0xff, 0xff, b'B']).unwrap();
    assert!(bad.closed());
    // An unknown command.
    let mut bad = Mta::connect(d.milter);
    bad.s.write_all(&[0, 0, 0, 1, b'Z']).unwrap();
    assert!(bad.closed());
    // A client that vanishes mid-message.
    let mut gone = Mta::connect(d.milter);
    let mut cmds = vec![Command::OptNeg(POSTFIX)];
    cmds.extend(connect_commands());
    let mut msg = message_commands("gtube.eml", None);
    msg.truncate(8);
    cmds.extend(msg);
    gone.send(&cmds);
    drop(gone);
    // The daemon still serves.
    let mut mta = Mta::connect(d.milter);
    let mut cmds = vec![Command::OptNeg(POSTFIX)];
    cmds.extend(connect_commands());
    cmds.extend(message_commands("gtube.eml", None));
    mta.send(&cmds);
    let _ = mta.until_final();
    let r = mta.until_final();
    assert!(
        matches!(&r[0], Reply::ReplyCode(t) if t.starts_with("550")),
        "{r:?}"
    );
    let m = d.get("/metrics").text();
    let errors = m
        .lines()
        .find(|l| l.starts_with("shrike_milter_protocol_errors_total "))
        .unwrap();
    assert_eq!(errors, "shrike_milter_protocol_errors_total 2");
}

#[test]
fn full_queue_gets_the_configured_fallback() {
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start(dir.path(), daemon::slow_setup(dir.path(), ""));
    let port = d.milter;
    let handles: Vec<_> = (0..6)
        .map(|_| {
            std::thread::spawn(move || {
                let mut mta = Mta::connect(port);
                let mut cmds = vec![Command::OptNeg(POSTFIX)];
                cmds.extend(connect_commands());
                cmds.extend(message_commands("daemon/ham.eml", None));
                mta.send(&cmds);
                let _ = mta.until_final();
                mta.until_final()
            })
        })
        .collect();
    let results: Vec<Vec<Reply>> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    let accepted = results
        .iter()
        .filter(|r| r.last() == Some(&Reply::Accept))
        .count();
    let tempfailed = results
        .iter()
        .filter(|r| matches!(r.as_slice(), [Reply::ReplyCode(t)] if t.starts_with("451 4.7.1")))
        .count();
    assert!(accepted >= 1, "{results:?}");
    assert!(
        tempfailed >= 1,
        "no fallback with a queue of one: {results:?}"
    );
    assert_eq!(accepted + tempfailed, 6, "{results:?}");
}

#[test]
fn decoder_reads_our_own_command_encoding() {
    // The test client's encoder and the server's decoder agree on every command used above.
    let mut cmds = vec![Command::OptNeg(POSTFIX)];
    cmds.extend(connect_commands());
    cmds.extend(message_commands("gtube.eml", Some(("X-Spam-Flag", "YES"))));
    cmds.push(Command::Quit);
    let mut bytes = Vec::new();
    for c in &cmds {
        encode_command(c, &mut bytes);
    }
    let mut d = Decoder::new(1 << 20);
    d.feed(&bytes);
    let mut back = Vec::new();
    while let Some(c) = d.next_command().unwrap() {
        back.push(c);
    }
    assert_eq!(back, cmds);
}
