//! ARC sealing (`[arc]`) through the daemon, against a DNS server on loopback that publishes the
//! sender's SPF and our sealing key: an accepted inbound message gets an ARC set whose chain
//! dkimpy's `arc_verify` (python3-dkim, an independent verifier) and shrike's own ARC check both
//! validate (over HTTP, and as the milter's inserted headers leave it), and again after a second
//! seal on top (i=2); a changed body breaks it for both and
//! our next seal says cv=fail, after which nothing is sealed again; outbound mail and refused
//! mail are not sealed; a key that is no RSA key, or none, stops `config check` and `serve`.

#[allow(dead_code)]
#[path = "common/daemon.rs"]
mod daemon;
#[allow(dead_code)]
#[path = "common/dns_server.rs"]
mod dns_server;
#[allow(dead_code)]
#[path = "common/mta.rs"]
mod mta;

use std::path::Path;
use std::process::{Command, Stdio};

use daemon::{Daemon, Options};
use dns_server::DnsServer;

const PY: &str = "/usr/bin/python3";
const SENDER_IP: &str = "198.51.100.7";

/// base64 of the DER SubjectPublicKeyInfo of a PEM private key: DKIM's `p=`.
fn dkim_p(key: &Path) -> String {
    let o = Command::new("openssl")
        .args(["pkey", "-pubout", "-outform", "DER", "-in"])
        .arg(key)
        .output()
        .expect("openssl is installed (scripts/test.sh installs it)");
    assert!(o.status.success());
    let script = "import base64,sys; print(base64.b64encode(sys.stdin.buffer.read()).decode())";
    let mut child = Command::new(PY)
        .args(["-c", script])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    child.stdin.take().unwrap().write_all(&o.stdout).unwrap();
    String::from_utf8(child.wait_with_output().unwrap().stdout)
        .unwrap()
        .trim()
        .to_string()
}

/// dkimpy's `arc_verify` on `message` with `records` for DNS: its `cv` ("pass", "fail", "none").
fn dkimpy_arc(message: &[u8], records: &[(String, String)]) -> String {
    let table: Vec<String> = records
        .iter()
        .map(|(name, txt)| format!("{name:?}: {txt:?}"))
        .collect();
    let script = format!(
        "import sys, dkim\n\
         records = {{{}}}\n\
         def dns(name, timeout=5):\n    \
             return records.get(name.decode().rstrip('.'), '').encode() or None\n\
         cv, results, reason = dkim.arc_verify(sys.stdin.buffer.read(), dnsfunc=dns)\n\
         print('CV=' + (cv.decode() if cv else 'None'), reason)\n",
        table.join(", ")
    );
    let mut child = Command::new(PY)
        .args(["-c", &script])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3-dkim is installed (scripts/test.sh installs it)");
    use std::io::Write;
    child.stdin.take().unwrap().write_all(message).unwrap();
    let out = child.wait_with_output().unwrap();
    let said = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success() && said.starts_with("CV="),
        "dkimpy: {said}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    said.trim_start_matches("CV=")
        .split_whitespace()
        .next()
        .unwrap_or("")
        .to_string()
}

fn message(body: &str) -> String {
    format!(
        "From: Alice <alice@sender.example>\r\nTo: list@lists.example\r\nSubject: meeting notes\r\n\
         Date: Sun, 29 Nov 2026 10:00:00 +0000\r\nMessage-ID: <notes-1@sender.example>\r\n\
         MIME-Version: 1.0\r\nContent-Type: text/plain; charset=us-ascii\r\n\r\n{body}"
    )
}

fn check(d: &Daemon, raw: &str, user: Option<&str>) -> serde_json::Value {
    let mut headers = vec![
        ("IP", SENDER_IP),
        ("Helo", "mail.sender.example"),
        ("From", "alice@sender.example"),
        ("Rcpt", "list@lists.example"),
    ];
    if let Some(u) = user {
        headers.push(("User", u));
    }
    let r = d.post("/checkv2", &headers, raw.as_bytes());
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()
}

fn symbols(v: &serde_json::Value) -> Vec<String> {
    v["symbols"].as_object().unwrap().keys().cloned().collect()
}

/// The ARC set of a reply, as header lines on top of `raw` (ARC-Seal first).
fn sealed(v: &serde_json::Value, raw: &str) -> String {
    let add = &v["milter"]["add_headers"];
    let mut out = String::new();
    for name in [
        "ARC-Seal",
        "ARC-Message-Signature",
        "ARC-Authentication-Results",
    ] {
        let value = add[name]["value"]
            .as_str()
            .unwrap_or_else(|| panic!("no {name}: {v}"));
        out.push_str(&format!("{name}: {value}\r\n"));
    }
    out + raw
}

#[test]
fn accepted_inbound_mail_is_sealed_and_both_verifiers_validate_the_chain() {
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("arc.key");
    let o = Command::new("openssl")
        .args([
            "genpkey",
            "-algorithm",
            "RSA",
            "-pkeyopt",
            "rsa_keygen_bits:2048",
            "-out",
        ])
        .arg(&key)
        .output()
        .expect("openssl");
    assert!(o.status.success());
    let record = format!("v=DKIM1; k=rsa; p={}", dkim_p(&key));
    let dns = DnsServer::start();
    dns.txt("sender.example", &format!("v=spf1 ip4:{SENDER_IP} -all"));
    dns.txt("arc._domainkey.mx.example", &record);
    let records = vec![("arc._domainkey.mx.example".to_string(), record)];
    let config = format!(
        "{}[arc]\nenabled = true\ndomain = \"mx.example\"\nselector = \"arc\"\nkey = \"{}\"\n",
        dns.dns_section(3000),
        key.display()
    );
    let d = Daemon::start(
        dir.path(),
        Options {
            config: Some(config),
            ..Options::default()
        },
    );

    let raw = message("Notes from today's meeting are below.\r\n");
    let v = check(&d, &raw, None);
    assert!(symbols(&v).contains(&"ARC_SEALED".into()), "{v}");
    assert_eq!(
        v["symbols"]["ARC_SEALED"]["options"][0], "mx.example",
        "{v}"
    );
    let once = sealed(&v, &raw);
    assert!(
        once.contains("spf=pass"),
        "the seal carries our results: {once}"
    );
    assert_eq!(dkimpy_arc(once.as_bytes(), &records), "pass", "{once}");

    // shrike's own ARC check of the sealed message: a valid chain; and our second seal on
    // top of it (i=2, cv=pass) validates for both again.
    let v2 = check(&d, &once, None);
    assert!(symbols(&v2).contains(&"ARC_ALLOW".into()), "{v2}");
    let twice = sealed(&v2, &once);
    assert!(twice.contains("i=2"), "{twice}");
    assert_eq!(dkimpy_arc(twice.as_bytes(), &records), "pass", "{twice}");
    assert!(symbols(&check(&d, &twice, None)).contains(&"ARC_ALLOW".into()));

    // A forwarder that changes the body breaks the chain for both.
    let tampered = once.replace("are below", "are elsewhere");
    assert_eq!(dkimpy_arc(tampered.as_bytes(), &records), "fail");
    let v3 = check(&d, &tampered, None);
    let s = symbols(&v3);
    assert!(!s.contains(&"ARC_ALLOW".into()), "{v3}");
    assert!(
        s.iter().any(|x| x == "ARC_REJECT" || x == "ARC_INVALID"),
        "{v3}"
    );
    // RFC 8617 5.1.2: the next sealer records the failure with cv=fail ...
    let failed = sealed(&v3, &tampered);
    assert!(failed.contains("cv=fail"), "{failed}");
    let cv = dkimpy_arc(failed.as_bytes(), &records);
    assert_ne!(cv, "pass", "{failed}");
    // ... and nobody seals a chain that says cv=fail again: said, not sealed.
    let v4 = check(&d, &failed, None);
    assert!(symbols(&v4).contains(&"ARC_SEAL_FAIL".into()), "{v4}");
    assert!(
        v4["milter"]["add_headers"].get("ARC-Seal").is_none(),
        "{v4}"
    );

    // Over the milter the set is inserted on top, ARC-Seal first; the message as the MTA then
    // holds it validates.
    {
        use shrike::proto::milter::{Command as Milter, Reply};
        let mut m = mta::Mta::connect(d.milter);
        m.send(&[Milter::OptNeg(mta::POSTFIX)]);
        m.until_final();
        m.send(&mta::transaction(
            SENDER_IP,
            "mail.sender.example",
            "alice@sender.example",
            &raw,
        ));
        let replies = m.until_final();
        let inserted: Vec<(String, String)> = replies
            .iter()
            .filter_map(|r| match r {
                Reply::InsertHeader {
                    index: 0,
                    name,
                    value,
                } if name.starts_with("ARC-") => Some((name.clone(), value.clone())),
                _ => None,
            })
            .collect();
        assert_eq!(inserted.len(), 3, "{replies:?}");
        // Each insertion at index 0 goes above the ones before it.
        let mut head = raw.clone();
        for (name, value) in &inserted {
            head = format!("{name}:{value}\r\n{head}");
        }
        assert!(head.starts_with("ARC-Seal:"), "{head}");
        assert_eq!(dkimpy_arc(head.as_bytes(), &records), "pass", "{head}");
    }

    // Outbound mail (a login) and refused mail are not sealed.
    let v = check(&d, &raw, Some("alice@sender.example"));
    assert!(!symbols(&v).contains(&"ARC_SEALED".into()), "{v}");
    let gtube = message("XJS*C4JDBQADN1.NSBN3*2IDNEN*GTUBE-STANDARD-ANTI-UBE-TEST-EMAIL*C.34X\r\n");
    let v = check(&d, &gtube, None);
    assert_eq!(v["action"], "reject");
    assert!(v["milter"]["add_headers"].get("ARC-Seal").is_none(), "{v}");
}

#[test]
fn an_arc_key_that_is_no_rsa_key_stops_config_check() {
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("ed.key");
    let o = Command::new("openssl")
        .args(["genpkey", "-algorithm", "ed25519", "-out"])
        .arg(&key)
        .output()
        .expect("openssl");
    assert!(o.status.success());
    for (what, path) in [
        ("ed25519", key.clone()),
        ("missing", dir.path().join("none.key")),
    ] {
        let cfg = dir.path().join(format!("{what}.toml"));
        std::fs::write(
            &cfg,
            format!(
                "[arc]\nenabled = true\ndomain = \"mx.example\"\nkey = \"{}\"\n",
                path.display()
            ),
        )
        .unwrap();
        let (check, serve) = daemon::refused_by_check_and_serve(&cfg, &dir.path().join("data"));
        for out in [check, serve] {
            assert!(out.contains("mx.example"), "{what}: {out}");
        }
    }
}
