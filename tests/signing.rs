//! DKIM signing of authenticated senders' mail through the daemon, checked by an independent
//! verifier (Debian's python3-dkim, dkimpy, with the selector's TXT record served by a stub):
//! RSA keys in PKCS#1 and PKCS#8 read through the `keys` template, an Ed25519 key of a listed
//! domain, each signature verified and failing once the body is changed; never a signature for
//! a From domain that is not the login's, nor without a login; a domain whose key cannot be read
//! gets DKIM_SIGN_FAIL and no signature; the milter adds the header; SIGHUP reads a rotated
//! template key again; an unreadable listed key stops `config check` and the start.

#[allow(dead_code)]
#[path = "common/daemon.rs"]
mod daemon;
#[allow(dead_code)]
#[path = "common/mta.rs"]
mod mta;

use std::path::Path;
use std::process::{Command, Stdio};

use daemon::{Daemon, Options};

const PY: &str = "/usr/bin/python3";

fn openssl(args: &[&str]) {
    let o = Command::new("openssl")
        .args(args)
        .output()
        .expect("openssl is installed (scripts/test.sh installs it)");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

/// The public key of a PEM private key, as DKIM's `p=` (base64 of the DER SubjectPublicKeyInfo,
/// or for Ed25519 the raw 32 bytes).
fn dkim_p(key: &Path, ed25519: bool) -> String {
    let o = Command::new("openssl")
        .args(["pkey", "-pubout", "-outform", "DER", "-in"])
        .arg(key)
        .output()
        .unwrap();
    assert!(o.status.success());
    let der = if ed25519 {
        o.stdout[o.stdout.len() - 32..].to_vec()
    } else {
        o.stdout
    };
    let script = "import base64,sys; print(base64.b64encode(sys.stdin.buffer.read()).decode())";
    let mut child = Command::new(PY)
        .args(["-c", script])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    child.stdin.take().unwrap().write_all(&der).unwrap();
    let out = child.wait_with_output().unwrap();
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// dkimpy's verdict on `message`, the TXT record of each `selector._domainkey.domain` given.
fn dkimpy_verifies(message: &[u8], records: &[(String, String)]) -> bool {
    let table: Vec<String> = records
        .iter()
        .map(|(name, txt)| format!("{name:?}: {txt:?}"))
        .collect();
    let script = format!(
        "import sys, dkim\n\
         records = {{{}}}\n\
         def dns(name, timeout=5):\n    \
             return records.get(name.decode().rstrip('.'), '').encode() or None\n\
         ok = dkim.verify(sys.stdin.buffer.read(), dnsfunc=dns)\n\
         print('PASS' if ok else 'FAIL')\n",
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
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && (said.contains("PASS") || said.contains("FAIL")),
        "dkimpy: {said}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    said.contains("PASS")
}

fn message(from: &str, body: &str) -> String {
    format!(
        "From: Alice <{from}>\r\nTo: bob@elsewhere.example\r\nSubject: the quarterly plan\r\n\
         Date: Sun, 29 Nov 2026 10:00:00 +0000\r\nMessage-ID: <plan-{from}@example>\r\n\
         MIME-Version: 1.0\r\nContent-Type: text/plain; charset=utf-8\r\n\r\n{body}"
    )
}

/// `/checkv2` of `raw` as `user` (None: no login): the reply's JSON.
fn check(d: &Daemon, raw: &str, user: Option<&str>) -> serde_json::Value {
    let mut headers = vec![("Content-Type", "message/rfc822")];
    if let Some(u) = user {
        headers.push(("User", u));
    }
    let r = d.post("/checkv2", &headers, raw.as_bytes());
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()
}

struct Keys {
    dir: tempfile::TempDir,
    records: Vec<(String, String)>,
}

/// example.org (RSA, PKCS#8) and pkcs1.example (RSA, PKCS#1) under the template with selector
/// s2026; ed.example's Ed25519 key listed with selector ed.
fn keys() -> Keys {
    let dir = tempfile::tempdir().unwrap();
    let p = |name: &str| dir.path().join(name).display().to_string();
    openssl(&[
        "genpkey",
        "-algorithm",
        "RSA",
        "-pkeyopt",
        "rsa_keygen_bits:2048",
        "-out",
        &p("example.org.s2026.key"),
    ]);
    openssl(&[
        "genrsa",
        "-traditional",
        "-out",
        &p("pkcs1.example.s2026.key"),
        "2048",
    ]);
    openssl(&["genpkey", "-algorithm", "ed25519", "-out", &p("ed.key")]);
    let pkcs1 = std::fs::read_to_string(p("pkcs1.example.s2026.key")).unwrap();
    assert!(
        pkcs1.starts_with("-----BEGIN RSA PRIVATE KEY-----"),
        "{pkcs1}"
    );
    let rsa = |domain: &str, file: &str| {
        (
            format!("s2026._domainkey.{domain}"),
            format!(
                "v=DKIM1; k=rsa; p={}",
                dkim_p(&dir.path().join(file), false)
            ),
        )
    };
    let records = vec![
        rsa("example.org", "example.org.s2026.key"),
        rsa("pkcs1.example", "pkcs1.example.s2026.key"),
        (
            "ed._domainkey.ed.example".into(),
            format!(
                "v=DKIM1; k=ed25519; p={}",
                dkim_p(&dir.path().join("ed.key"), true)
            ),
        ),
    ];
    Keys { dir, records }
}

fn config(keys: &Keys) -> String {
    format!(
        "[dkim_signing]\nenabled = true\nselector = \"s2026\"\nkeys = \"{dir}/$domain.$selector.key\"\n\
         [[dkim_signing.domain]]\nname = \"ed.example\"\nselector = \"ed\"\nkey = \"{dir}/ed.key\"\n",
        dir = keys.dir.path().display()
    )
}

/// A daemon on `config`, with the directory that holds its data.
fn daemon_with(config: &str) -> (tempfile::TempDir, Daemon) {
    let tmp = tempfile::tempdir().unwrap();
    let d = Daemon::start(
        tmp.path(),
        Options {
            config: Some(config.to_string()),
            ..Options::default()
        },
    );
    (tmp, d)
}

fn symbols(v: &serde_json::Value) -> Vec<String> {
    v["symbols"].as_object().unwrap().keys().cloned().collect()
}

#[test]
fn authenticated_mail_is_signed_and_verifies_and_nothing_else_is() {
    let keys = keys();
    let (_tmp, d) = daemon_with(&config(&keys));
    for (user, from) in [
        ("alice@example.org", "alice@example.org"),
        ("carol@pkcs1.example", "carol@pkcs1.example"),
        ("dave@ed.example", "dave@ed.example"),
    ] {
        let raw = message(
            from,
            "The plan is attached as text.\r\nSee you on Monday.\r\n",
        );
        let v = check(&d, &raw, Some(user));
        let sig = v["dkim-signature"]
            .as_str()
            .unwrap_or_else(|| panic!("{from}: no signature: {v}"));
        assert_eq!(v["milter"]["add_headers"]["DKIM-Signature"]["value"], sig);
        assert!(symbols(&v).contains(&"DKIM_SIGNED".to_string()), "{v}");
        let signed = format!("DKIM-Signature: {sig}\r\n{raw}");
        assert!(
            dkimpy_verifies(signed.as_bytes(), &keys.records),
            "{from}: {signed}"
        );
        let tampered = signed.replace("See you on Monday.", "Send the money.");
        assert!(
            !dkimpy_verifies(tampered.as_bytes(), &keys.records),
            "{from}: tampered"
        );
        if from.ends_with("ed.example") {
            assert!(sig.contains("a=ed25519-sha256"), "{sig}");
        } else {
            assert!(sig.contains("a=rsa-sha256"), "{sig}");
        }
    }

    // No signature for a domain that is not the login's, nor without a login, nor for mail
    // that is refused.
    for (user, from) in [
        (Some("alice@example.org"), "ceo@ed.example"),
        (Some("mallory@elsewhere.example"), "alice@example.org"),
        (None, "alice@example.org"),
    ] {
        let v = check(&d, &message(from, "hello\r\n"), user);
        assert!(v.get("dkim-signature").is_none(), "{user:?} {from}: {v}");
        assert!(
            v["milter"]["add_headers"].get("DKIM-Signature").is_none(),
            "{v}"
        );
        let s = symbols(&v);
        assert!(!s.iter().any(|s| s.starts_with("DKIM_SIGN")), "{s:?}");
    }
    let gtube = message(
        "alice@example.org",
        "XJS*C4JDBQADN1.NSBN3*2IDNEN*GTUBE-STANDARD-ANTI-UBE-TEST-EMAIL*C.34X\r\n",
    );
    let v = check(&d, &gtube, Some("alice@example.org"));
    assert_eq!(v["action"], "reject", "{v}");
    assert!(v.get("dkim-signature").is_none(), "{v}");

    // A domain of ours whose key file is missing: DKIM_SIGN_FAIL with the reason, unsigned.
    let v = check(
        &d,
        &message("bob@nokey.example", "hi\r\n"),
        Some("bob@nokey.example"),
    );
    assert!(v.get("dkim-signature").is_none(), "{v}");
    let fail = &v["symbols"]["DKIM_SIGN_FAIL"];
    assert_eq!(fail["score"], 0.0, "{v}");
    assert!(
        fail["options"][0]
            .as_str()
            .unwrap()
            .contains("nokey.example: cannot read it"),
        "{v}"
    );
}

/// Over the milter, the login comes from `{auth_authen}` and the header is inserted on top.
#[test]
fn the_milter_inserts_the_signature_of_an_authenticated_session() {
    use shrike::proto::milter::{Command, Reply};
    let keys = keys();
    let (_tmp, d) = daemon_with(&config(&keys));
    let raw = message("alice@example.org", "Over the milter.\r\n");
    let session = |login: Option<&str>| -> Vec<Reply> {
        let mut m = mta::Mta::connect(d.milter);
        m.send(&[Command::OptNeg(mta::POSTFIX)]);
        m.until_final();
        let mut cmds =
            mta::transaction("192.0.2.10", "mail.example.org", "alice@example.org", &raw);
        if let Some(login) = login {
            // Postfix sends the MAIL stage's macros before MAIL FROM.
            cmds.insert(
                2,
                Command::Macro {
                    stage: b'M',
                    pairs: vec![(b"{auth_authen}".to_vec(), login.as_bytes().to_vec())],
                },
            );
        }
        m.send(&cmds);
        m.until_final()
    };
    let replies = session(Some("alice@example.org"));
    let value = replies
        .iter()
        .find_map(|r| match r {
            Reply::InsertHeader {
                index: 0,
                name,
                value,
            } if name == "DKIM-Signature" => Some(value.clone()),
            _ => None,
        })
        .unwrap_or_else(|| panic!("{replies:?}"));
    let signed = format!("DKIM-Signature:{value}\r\n{raw}");
    assert!(
        dkimpy_verifies(signed.as_bytes(), &keys.records),
        "{signed}"
    );
    let replies = session(None);
    assert!(
        !replies
            .iter()
            .any(|r| matches!(r, Reply::InsertHeader { name, .. } if name == "DKIM-Signature")),
        "{replies:?}"
    );
}

#[test]
fn sighup_reads_a_rotated_template_key_again() {
    let keys = keys();
    let (_tmp, d) = daemon_with(&config(&keys));
    let raw = message("alice@example.org", "first\r\n");
    let before = check(&d, &raw, Some("alice@example.org"));
    let signed = format!(
        "DKIM-Signature: {}\r\n{raw}",
        before["dkim-signature"].as_str().unwrap()
    );
    assert!(dkimpy_verifies(signed.as_bytes(), &keys.records));
    // The operator rotates the key file: the old signature's record no longer matches it.
    std::fs::copy(
        keys.dir.path().join("pkcs1.example.s2026.key"),
        keys.dir.path().join("example.org.s2026.key"),
    )
    .unwrap();
    let still = check(&d, &raw, Some("alice@example.org"));
    let old = format!(
        "DKIM-Signature: {}\r\n{raw}",
        still["dkim-signature"].as_str().unwrap()
    );
    assert!(
        dkimpy_verifies(old.as_bytes(), &keys.records),
        "kept until SIGHUP"
    );
    d.signal("HUP");
    let rotated = vec![(
        "s2026._domainkey.example.org".to_string(),
        keys.records[1].1.clone(),
    )];
    daemon::wait_until("the rotated key signs", 30, || {
        let after = check(&d, &raw, Some("alice@example.org"));
        let new = format!(
            "DKIM-Signature: {}\r\n{raw}",
            after["dkim-signature"].as_str().unwrap()
        );
        dkimpy_verifies(new.as_bytes(), &rotated)
    });
}

#[test]
fn an_unreadable_listed_key_stops_config_check_and_the_start() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("bad.key"), "not a key\n").unwrap();
    let path = dir.path().join("shrike.toml");
    std::fs::write(
        &path,
        format!(
            "[dkim_signing]\nenabled = true\n[[dkim_signing.domain]]\nname = \"example.org\"\n\
             selector = \"s\"\nkey = \"{}/bad.key\"\n",
            dir.path().display()
        ),
    )
    .unwrap();
    let said = daemon::refused_by_check_and_serve(&path, &dir.path().join("data"));
    for said in [said.0, said.1] {
        assert!(
            said.contains("dkim_signing.domain \"example.org\"")
                && said.contains("not a PEM private key"),
            "{said}"
        );
    }
}

/// `shrike dkim keygen` writes a key the daemon signs with (0600, never over an existing file)
/// and prints the record a verifier finds the signature good with.
#[test]
fn keygen_keys_sign_and_their_printed_records_verify() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let mut records = Vec::new();
    for (domain, algorithm) in [("rsa.example", "rsa"), ("ed.example", "ed25519")] {
        let out = dir.path().join(format!("{domain}.k1.key"));
        let run = || {
            Command::new(env!("CARGO_BIN_EXE_shrike"))
                .args(["dkim", "keygen", "--domain", domain, "--selector", "k1"])
                .args(["--algorithm", algorithm, "--out"])
                .arg(&out)
                .output()
                .unwrap()
        };
        let o = run();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let mode = std::fs::metadata(&out).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        // `k1._domainkey.D. IN TXT ( "v=DKIM1; k=…; p=…" "…" )`: the strings joined.
        let line = String::from_utf8(o.stdout).unwrap();
        assert!(
            line.starts_with(&format!("k1._domainkey.{domain}. IN TXT ( \"")),
            "{line}"
        );
        let text: String = line.split('"').skip(1).step_by(2).collect();
        records.push((format!("k1._domainkey.{domain}"), text));
        let before = std::fs::read(&out).unwrap();
        let again = run();
        assert!(
            !again.status.success(),
            "a second keygen must not overwrite"
        );
        assert_eq!(std::fs::read(&out).unwrap(), before);
    }
    let (_tmp, d) = daemon_with(&format!(
        "[dkim_signing]\nenabled = true\nselector = \"k1\"\nkeys = \"{}/$domain.$selector.key\"\n",
        dir.path().display()
    ));
    for from in ["alice@rsa.example", "alice@ed.example"] {
        let raw = message(from, "Generated keys.\r\n");
        let v = check(&d, &raw, Some(from));
        let sig = v["dkim-signature"]
            .as_str()
            .unwrap_or_else(|| panic!("{v}"));
        let signed = format!("DKIM-Signature: {sig}\r\n{raw}");
        assert!(
            dkimpy_verifies(signed.as_bytes(), &records),
            "{from}: {records:?}"
        );
    }
}

/// Bad input from an authenticated client: a message with no From (nothing says which domain
/// would sign: no signature, no failure, an ordinary answer), and a 10 MB header set to sign (a
/// Subject of 10 MB of folded lines): the daemon answers, the signature covers it whole and
/// dkimpy verifies it.
#[test]
fn a_message_without_from_and_a_ten_megabyte_header_set() {
    let keys = keys();
    let (_tmp, d) = daemon_with(&config(&keys));
    let raw = message("alice@example.org", "No From here.\r\n");
    let no_from: String = raw
        .split_inclusive("\r\n")
        .filter(|l| !l.starts_with("From:"))
        .collect();
    let v = check(&d, &no_from, Some("alice@example.org"));
    let s = symbols(&v);
    assert!(
        !s.contains(&"DKIM_SIGNED".to_string()) && !s.contains(&"DKIM_SIGN_FAIL".to_string()),
        "{v}"
    );
    assert!(v.get("dkim-signature").is_none(), "{v}");

    let mut subject = String::from("Subject: the quarterly plan");
    while subject.len() < 10 << 20 {
        subject.push_str("\r\n ");
        subject.push_str(&"plan ".repeat(200));
    }
    let big = raw.replace("Subject: the quarterly plan", &subject);
    assert!(big.len() > 10 << 20);
    let v = check(&d, &big, Some("alice@example.org"));
    let sig = v["dkim-signature"]
        .as_str()
        .unwrap_or_else(|| panic!("{}", &v.to_string()[..2000.min(v.to_string().len())]))
        .to_string();
    assert!(sig.to_ascii_lowercase().contains(":subject:"), "{sig}");
    let signed = format!("DKIM-Signature:{sig}\r\n{big}");
    // (dkimpy takes ~30 s over 10 MB of header: one verification; a changed byte failing is
    // the other tests' business.)
    assert!(dkimpy_verifies(signed.as_bytes(), &keys.records));
}
