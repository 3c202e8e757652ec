//! Mail authentication and DNS lists against a real DNS server on loopback
//! (`common/dns_server.rs`), through the real resolver code: the network checks in-process
//! (`Checker`, what `serve` runs before queueing a message), and the daemon over HTTP.
//! Messages are DKIM-signed and ARC-sealed here with mail-auth's signer (RSA and Ed25519),
//! then broken in each way that matters.

#[allow(dead_code)]
#[path = "common/daemon.rs"]
mod daemon;
#[allow(dead_code)]
#[path = "common/dns_server.rs"]
mod dns_server;

use std::time::{Duration, Instant};

use base64_encode::b64;
use daemon::{Daemon, Options};
use dns_server::DnsServer;
use mail_auth::arc::ArcSealer;
use mail_auth::common::crypto::{Ed25519Key, RsaKey, Sha256};
use mail_auth::common::headers::HeaderWriter;
use mail_auth::dkim::DkimSigner;
use mail_auth::{AuthenticatedMessage, AuthenticationResults, MessageAuthenticator};
use rustls_pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};
use shrike::auth::Status;
use shrike::dns::{DnsConfig, Resolver};
use shrike::dnsbl::{resolve_all, ZoneConfig};
use shrike::message::Envelope;
use shrike::netcheck::{Checker, NetChecks};

mod base64_encode {
    const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    pub fn b64(data: &[u8]) -> String {
        let mut out = String::new();
        for c in data.chunks(3) {
            let n = (c[0] as u32) << 16
                | (*c.get(1).unwrap_or(&0) as u32) << 8
                | *c.get(2).unwrap_or(&0) as u32;
            for i in 0..4 {
                if i <= c.len() {
                    out.push(T[(n >> (18 - 6 * i) & 63) as usize] as char);
                } else {
                    out.push('=');
                }
            }
        }
        out
    }
}

const SENDER_IP: &str = "192.0.2.10";
const OTHER_IP: &str = "198.51.100.66";

fn message(from: &str, subject: &str) -> String {
    format!(
        "From: Alice <{from}>\r\nTo: bob@rcpt.example\r\nSubject: {subject}\r\n\
         Date: Fri, 27 Nov 2026 10:00:00 +0000\r\nMessage-ID: <{subject}@sender.example>\r\n\
         MIME-Version: 1.0\r\nContent-Type: text/plain; charset=us-ascii\r\n\r\n\
         Hello Bob,\r\n\r\nthe quarterly numbers are attached as promised.\r\n\r\nAlice\r\n"
    )
}

fn rsa_key(file: &str) -> RsaKey<Sha256> {
    let der = std::fs::read(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/data/dkim")
            .join(file),
    )
    .expect("test key");
    RsaKey::<Sha256>::from_key_der(PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(der)))
        .expect("RSA key")
}

const SIGNED: [&str; 5] = ["From", "To", "Subject", "Date", "Message-ID"];

fn sign_rsa(raw: &str, domain: &str, selector: &str, key: &str) -> String {
    let sig = DkimSigner::from_key(rsa_key(key))
        .domain(domain)
        .selector(selector)
        .headers(SIGNED)
        .sign(raw.as_bytes())
        .expect("sign");
    format!("{}{raw}", sig.to_header())
}

/// The zones of the tests: sender.example publishes SPF, DKIM keys (RSA `rsa`, Ed25519 `ed`)
/// and DMARC p=reject; soft.example has ~all and p=quarantine; none.example publishes nothing.
struct World {
    dns: DnsServer,
    ed_pkcs8: Vec<u8>,
}

fn world() -> World {
    let dns = DnsServer::start();
    dns.txt("sender.example", &format!("v=spf1 ip4:{SENDER_IP} -all"));
    dns.txt("_dmarc.sender.example", "v=DMARC1; p=reject");
    let rsa_pub = rsa_key("rsa2048.pk8.der").public_key();
    dns.txt(
        "rsa._domainkey.sender.example",
        &format!("v=DKIM1; k=rsa; p={}", b64(&rsa_pub)),
    );
    let ed_pkcs8 = Ed25519Key::generate_pkcs8().expect("ed25519 key");
    let ed = Ed25519Key::from_pkcs8_der(&ed_pkcs8).unwrap();
    dns.txt(
        "ed._domainkey.sender.example",
        &format!("v=DKIM1; k=ed25519; p={}", b64(&ed.public_key())),
    );
    dns.txt("soft.example", &format!("v=spf1 ip4:{SENDER_IP} ~all"));
    dns.txt("_dmarc.soft.example", "v=DMARC1; p=quarantine");
    dns.txt("neutral.example", "v=spf1 ?all");
    // an include loop, and a chain of more than 10 lookups (RFC 7208 4.6.4)
    dns.txt("loop-a.example", "v=spf1 include:loop-b.example -all");
    dns.txt("loop-b.example", "v=spf1 include:loop-a.example -all");
    for i in 0..12 {
        dns.txt(
            &format!("l{i}.deep.example"),
            &format!("v=spf1 include:l{}.deep.example -all", i + 1),
        );
    }
    dns.txt("l12.deep.example", &format!("v=spf1 ip4:{SENDER_IP} -all"));
    dns.txt("deep.example", "v=spf1 include:l0.deep.example -all");
    // a forwarder that ARC-seals
    let arc_pub = rsa_key("rsa2048-other.pk8.der").public_key();
    dns.txt(
        "arc._domainkey.forwarder.example",
        &format!("v=DKIM1; k=rsa; p={}", b64(&arc_pub)),
    );
    World { dns, ed_pkcs8 }
}

fn checker(dns: &DnsServer, budget_ms: u64, zones: &[ZoneConfig]) -> Checker {
    let config = DnsConfig {
        enabled: Some(true),
        servers: vec![dns.addr.to_string()],
        timeout_ms: 400,
        attempts: 1,
        ..Default::default()
    };
    Checker::new(
        Resolver::new(&config).expect("resolver"),
        resolve_all(zones).expect("zones"),
        Duration::from_millis(budget_ms),
        "mx.shrike.test",
    )
}

fn envelope(ip: &str, mail_from: &str) -> Envelope {
    Envelope {
        client_ip: Some(ip.parse().unwrap()),
        helo: Some("mail.sender.example".into()),
        mail_from: Some(format!("<{mail_from}>")),
        rcpt_to: vec!["bob@rcpt.example".into()],
        ..Default::default()
    }
}

fn run(c: &Checker, raw: &str, env: &Envelope) -> NetChecks {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(c.check(raw.as_bytes(), env))
}

async fn check(c: &Checker, raw: &str, env: &Envelope) -> NetChecks {
    c.check(raw.as_bytes(), env).await
}

#[tokio::test]
async fn spf_pass_fail_softfail_neutral_none_loops_and_the_lookup_limit() {
    let w = world();
    let c = checker(&w.dns, 3000, &[]);
    let raw = message("alice@sender.example", "spf");
    let spf = |n: &NetChecks| n.auth.spf.clone().unwrap();
    let n = check(&c, &raw, &envelope(SENDER_IP, "alice@sender.example")).await;
    assert!(n.complete);
    assert_eq!(spf(&n).result, Status::Pass);
    assert_eq!(spf(&n).domain.as_deref(), Some("sender.example"));
    let n = check(&c, &raw, &envelope(OTHER_IP, "alice@sender.example")).await;
    assert_eq!(spf(&n).result, Status::Fail);
    let n = check(&c, &raw, &envelope(OTHER_IP, "x@soft.example")).await;
    assert_eq!(spf(&n).result, Status::SoftFail);
    let n = check(&c, &raw, &envelope(OTHER_IP, "x@neutral.example")).await;
    assert_eq!(spf(&n).result, Status::Neutral);
    let n = check(&c, &raw, &envelope(OTHER_IP, "x@none.example")).await;
    assert_eq!(spf(&n).result, Status::None);
    // an include loop and more than 10 DNS-querying terms are permanent errors, and neither
    // makes the check run away: it stops at the limit
    let before = w.dns.queries();
    let n = check(&c, &raw, &envelope(OTHER_IP, "x@loop-a.example")).await;
    assert_eq!(spf(&n).result, Status::PermError, "{n:?}");
    assert!(
        w.dns.queries() - before < 40,
        "{} queries",
        w.dns.queries() - before
    );
    let n = check(&c, &raw, &envelope(SENDER_IP, "x@deep.example")).await;
    assert_eq!(spf(&n).result, Status::PermError, "{n:?}");
    let asked = w.dns.asked();
    assert!(
        !asked.iter().any(|q| q.starts_with("l12.deep.example")),
        "went past the limit"
    );
}

#[tokio::test]
async fn an_unsigned_messages_results_are_reused_for_its_sender_and_a_signed_ones_never() {
    let w = world();
    let c = checker(&w.dns, 3000, &[]);
    let off = checker(&w.dns, 3000, &[]).with_auth_memo(Duration::ZERO);
    let env = envelope(SENDER_IP, "alice@sender.example");
    let raw = message("alice@sender.example", "memo");
    let first = check(&c, &raw, &env).await;
    assert_eq!(first.auth.spf.as_ref().unwrap().result, Status::Pass);
    assert_eq!(first.auth.dmarc.as_ref().unwrap().result, Status::Pass);
    assert_eq!(c.auth_memo_hits(), 0);
    // the same sender again, another unsigned message: the results come from the memo, and
    // they are what a checker without one finds
    let again = check(&c, &message("alice@sender.example", "other"), &env).await;
    assert_eq!(c.auth_memo_hits(), 1);
    assert_eq!(again.auth, first.auth);
    let fresh = check(&off, &raw, &env).await;
    assert_eq!(fresh.auth, first.auth);
    assert_eq!(off.auth_memo_hits(), 0);
    // another client address is another key: SPF fails, DMARC with it
    let other = check(&c, &raw, &envelope(OTHER_IP, "alice@sender.example")).await;
    assert_eq!(c.auth_memo_hits(), 1);
    assert_eq!(other.auth.spf.as_ref().unwrap().result, Status::Fail);
    assert_eq!(other.auth.dmarc.as_ref().unwrap().result, Status::Fail);
    // a signed message of the same sender is verified, its broken signature seen
    let signed = sign_rsa(&raw, "sender.example", "rsa", "rsa2048.pk8.der");
    let broken = signed.replace("memo", "m3mo");
    let n = check(&c, &broken, &env).await;
    assert_eq!(c.auth_memo_hits(), 1);
    assert_eq!(n.auth.dkim.len(), 1);
    assert_eq!(n.auth.dkim[0].result, Status::Fail, "{n:?}");
}

#[tokio::test]
async fn dkim_rsa_and_ed25519_pass_and_each_breakage_is_caught() {
    let w = world();
    let c = checker(&w.dns, 3000, &[]);
    let env = envelope(SENDER_IP, "alice@sender.example");
    let raw = message("alice@sender.example", "dkim");
    let rsa = sign_rsa(&raw, "sender.example", "rsa", "rsa2048.pk8.der");
    let n = check(&c, &rsa, &env).await;
    assert_eq!(n.auth.dkim.len(), 1);
    let d = &n.auth.dkim[0];
    assert_eq!(d.result, Status::Pass, "{d:?}");
    assert_eq!(
        (d.domain.as_deref(), d.selector.as_deref(), d.aligned),
        (Some("sender.example"), Some("rsa"), true)
    );
    assert_eq!(n.auth.aligned_dkim_domain(), Some("sender.example"));

    let ed = Ed25519Key::from_pkcs8_der(&w.ed_pkcs8).unwrap();
    let sig = DkimSigner::from_key(ed)
        .domain("sender.example")
        .selector("ed")
        .headers(SIGNED)
        .sign(raw.as_bytes())
        .unwrap();
    let ed_signed = format!("{}{raw}", sig.to_header());
    let n = check(&c, &ed_signed, &env).await;
    assert_eq!(n.auth.dkim[0].result, Status::Pass, "{:?}", n.auth.dkim);

    // body changed, header changed, wrong key, expired, key not published
    let body = rsa.replace("quarterly numbers", "quarterly numbers (and a link)");
    let header = rsa.replace("Subject: dkim", "Subject: dkim urgent");
    let wrong = sign_rsa(&raw, "sender.example", "rsa", "rsa2048-other.pk8.der");
    let missing = sign_rsa(&raw, "sender.example", "gone", "rsa2048.pk8.der");
    for (what, m, want) in [
        ("body", &body, Status::Fail),
        ("header", &header, Status::Fail),
        ("wrong key", &wrong, Status::Fail),
        ("no key", &missing, Status::PermError),
    ] {
        let n = check(&c, m, &env).await;
        assert_eq!(n.auth.dkim.len(), 1, "{what}");
        assert_eq!(n.auth.dkim[0].result, want, "{what}: {:?}", n.auth.dkim[0]);
        assert!(n.auth.dkim[0].reason.is_some(), "{what}");
        assert_eq!(n.auth.aligned_dkim_domain(), None, "{what}");
    }
    let sig = DkimSigner::from_key(rsa_key("rsa2048.pk8.der"))
        .domain("sender.example")
        .selector("rsa")
        .headers(SIGNED)
        .expiration(1)
        .sign(raw.as_bytes())
        .unwrap();
    let expiring = format!("{}{raw}", sig.to_header());
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let n = check(&c, &expiring, &env).await;
    assert_ne!(
        n.auth.dkim[0].result,
        Status::Pass,
        "expired: {:?}",
        n.auth.dkim[0]
    );
    let reason = n.auth.dkim[0]
        .reason
        .clone()
        .unwrap_or_default()
        .to_lowercase();
    assert!(reason.contains("expired"), "{reason}");
    // unsigned: no DKIM result at all
    let n = check(&c, &raw, &env).await;
    assert!(n.auth.dkim.is_empty());
}

#[tokio::test]
async fn dmarc_reject_quarantine_and_alignment() {
    let w = world();
    let c = checker(&w.dns, 3000, &[]);
    let raw = message("alice@sender.example", "dmarc");
    let signed = sign_rsa(&raw, "sender.example", "rsa", "rsa2048.pk8.der");
    let dmarc = |n: &NetChecks| n.auth.dmarc.clone().unwrap();
    // aligned SPF pass alone
    let n = check(&c, &raw, &envelope(SENDER_IP, "alice@sender.example")).await;
    assert_eq!(dmarc(&n).result, Status::Pass);
    assert_eq!(dmarc(&n).policy.as_deref(), Some("reject"));
    // aligned DKIM pass alone (SPF fails: a forwarder's address)
    let n = check(&c, &signed, &envelope(OTHER_IP, "alice@sender.example")).await;
    assert_eq!(dmarc(&n).result, Status::Pass);
    // SPF passes but for another domain (unaligned), no DKIM: the From domain's p=reject
    let forged = message("ceo@sender.example", "dmarc-forged");
    let n = check(&c, &forged, &envelope(SENDER_IP, "x@soft.example")).await;
    assert_eq!(n.auth.spf.clone().unwrap().result, Status::Pass);
    assert_eq!(dmarc(&n).result, Status::Fail);
    assert_eq!(dmarc(&n).policy.as_deref(), Some("reject"));
    assert_eq!(dmarc(&n).domain.as_deref(), Some("sender.example"));
    // DKIM valid but by an unaligned domain does not pass DMARC for sender.example
    let other = sign_rsa(&forged, "forwarder.example", "arc", "rsa2048-other.pk8.der");
    let n = check(&c, &other, &envelope(OTHER_IP, "x@none.example")).await;
    assert_eq!(n.auth.dkim[0].result, Status::Pass);
    assert!(!n.auth.dkim[0].aligned);
    assert_eq!(dmarc(&n).result, Status::Fail);
    // quarantine policy
    let soft = message("x@soft.example", "dmarc-soft");
    let n = check(&c, &soft, &envelope(OTHER_IP, "x@soft.example")).await;
    assert_eq!(
        (dmarc(&n).result, dmarc(&n).policy.as_deref()),
        (Status::Fail, Some("quarantine"))
    );
    // no record
    let none = message("x@none.example", "dmarc-none");
    let n = check(&c, &none, &envelope(OTHER_IP, "x@none.example")).await;
    assert_eq!(dmarc(&n).result, Status::None);
}

#[tokio::test]
async fn arc_chain_sealed_by_a_forwarder_passes_and_a_broken_one_fails() {
    let w = world();
    let c = checker(&w.dns, 3000, &[]);
    let raw = sign_rsa(
        &message("alice@sender.example", "arc"),
        "sender.example",
        "rsa",
        "rsa2048.pk8.der",
    );
    // The forwarder verifies what it received (against the same DNS) and seals.
    let resolver = Resolver::new(&DnsConfig {
        servers: vec![w.dns.addr.to_string()],
        ..Default::default()
    })
    .unwrap();
    let fwd = MessageAuthenticator(resolver.hickory().clone());
    let msg = AuthenticatedMessage::parse(raw.as_bytes()).unwrap();
    let arc_in = fwd.verify_arc(&msg).await;
    let dkim_in = fwd.verify_dkim(&msg).await;
    let results = AuthenticationResults::new("mx.forwarder.example")
        .with_dkim_results(&dkim_in, "sender.example");
    let set = ArcSealer::from_key(rsa_key("rsa2048-other.pk8.der"))
        .domain("forwarder.example")
        .selector("arc")
        .headers(["From", "To", "Subject", "DKIM-Signature"])
        .seal(&msg, &results, &arc_in)
        .expect("seal");
    let sealed = format!("{}{raw}", set.to_header());
    let env = envelope(OTHER_IP, "list@forwarder.example");
    let n = check(&c, &sealed, &env).await;
    let arc = n.auth.arc.clone().unwrap();
    assert_eq!(arc.result, Status::Pass, "{arc:?}");
    assert_eq!(arc.domain.as_deref(), Some("forwarder.example"));
    // changed after sealing
    let broken = sealed.replace("as promised", "as promised, see http://x.example/");
    let n = check(&c, &broken, &env).await;
    assert_eq!(
        n.auth.arc.clone().unwrap().result,
        Status::Fail,
        "{:?}",
        n.auth.arc
    );
    // no seal
    let n = check(&c, &raw, &env).await;
    assert_eq!(n.auth.arc.clone().unwrap().result, Status::None);
}

fn zones() -> Vec<ZoneConfig> {
    let text = r#"
[[dnsbl]]
zone = "zen.spamhaus.org"
[[dnsbl]]
zone = "dbl.spamhaus.org"
[[dnsbl]]
zone = "multi.uribl.com"
[[dnsbl]]
zone = "bl.test.example"
kind = "ip"
checks = ["client_ip"]
returncodes = { TEST_BL = "127.0.0.2", TEST_BL_MANY = ["127.0.0.3", "127.0.0.4"] }
"#;
    #[derive(serde::Deserialize)]
    struct Z {
        dnsbl: Vec<ZoneConfig>,
    }
    toml::from_str::<Z>(text).unwrap().dnsbl
}

#[tokio::test]
async fn dns_lists_listings_and_refusals_each_name_once() {
    let w = world();
    let dns = &w.dns;
    // client 192.0.2.10 on ZEN as XBL and on the custom list; a Received hop on SBL
    dns.a("10.2.0.192.zen.spamhaus.org", "127.0.0.4");
    dns.a("10.2.0.192.bl.test.example", "127.0.0.3");
    dns.a("7.100.51.198.zen.spamhaus.org", "127.0.0.2");
    dns.a("spammy.example.dbl.spamhaus.org", "127.0.1.2");
    dns.a("spammy.example.multi.uribl.com", "127.0.0.2");
    // refusals: never listings
    dns.a("typo.example.dbl.spamhaus.org", "127.255.255.252");
    dns.a("open.example.dbl.spamhaus.org", "127.255.255.254");
    dns.a("volume.example.dbl.spamhaus.org", "127.255.255.255");
    dns.a("refused.example.multi.uribl.com", "127.0.0.1");
    let c = checker(dns, 3000, &zones());
    let raw = "Received: from relay.example (relay.example [198.51.100.7]) by mx.example; \
               Fri, 27 Nov 2026 10:00:00 +0000\r\n\
               From: x@sender.example\r\nSubject: lists\r\n\r\n\
               http://www.spammy.example/a http://spammy.example/b https://typo.example/\r\n\
               http://open.example/ http://volume.example/ http://refused.example/\r\n";
    let n = check(&c, raw, &envelope(SENDER_IP, "x@sender.example")).await;
    assert!(n.complete);
    let sym = |s: &str| n.lists.iter().filter(|h| h.symbol == s).count();
    assert_eq!(sym("RBL_SPAMHAUS_XBL"), 1);
    assert_eq!(sym("RBL_SPAMHAUS_SBL"), 1);
    assert_eq!(sym("TEST_BL_MANY"), 1);
    assert_eq!(sym("DBL_SPAM"), 1);
    assert_eq!(sym("URIBL_BLACK"), 1);
    assert_eq!(sym("DBL_BLOCKED"), 3, "{:?}", n.lists);
    assert_eq!(sym("URIBL_BLOCKED"), 1);
    assert!(n
        .lists
        .iter()
        .filter(|h| h.symbol.ends_with("_BLOCKED"))
        .all(|h| h.blocked));
    // each name asked once per zone, though the message names spammy.example twice
    let asked = dns.asked();
    let spammy = asked
        .iter()
        .filter(|q| q.starts_with("spammy.example.dbl.spamhaus.org"))
        .count();
    assert_eq!(spammy, 1, "{asked:?}");
    // the next message with the same names is answered from the cache, positive and negative
    // answers alike, with the same hits
    let again = check(&c, raw, &envelope(SENDER_IP, "x@sender.example")).await;
    assert_eq!(again.lists, n.lists);
    let asked_again = dns.asked();
    assert!(
        !asked_again[asked.len()..].iter().any(|q| q.ends_with(" A")),
        "{:?}",
        &asked_again[asked.len()..]
    );
    // private addresses are never asked
    let n = check(&c, raw, &envelope("10.1.2.3", "x@sender.example")).await;
    assert!(!n.lists.iter().any(|h| h.check == "client_ip"));
    assert!(!dns.asked().iter().any(|q| q.contains("3.2.1.10.")));
}

/// A resolver that never answers: the checks give up at the budget (the rules see temporary
/// failures), and a late answer still lands in the cache.
#[test]
fn a_silent_resolver_costs_the_budget_and_no_more() {
    let w = world();
    w.dns.set_silent(true);
    w.dns.a("10.2.0.192.zen.spamhaus.org", "127.0.0.4");
    let c = checker(&w.dns, 300, &zones());
    let raw = sign_rsa(
        &message("alice@sender.example", "silent"),
        "sender.example",
        "rsa",
        "rsa2048.pk8.der",
    );
    let start = Instant::now();
    let n = run(&c, &raw, &envelope(SENDER_IP, "alice@sender.example"));
    let took = start.elapsed();
    assert!(took >= Duration::from_millis(300), "{took:?}");
    assert!(took < Duration::from_millis(300 + 700), "{took:?}");
    assert!(!n.complete);
    assert_eq!(n.auth.spf.clone().unwrap().result, Status::TempError);
    assert_eq!(n.auth.dkim.len(), 1);
    assert_eq!(n.auth.dkim[0].result, Status::TempError);
    assert_eq!(n.auth.dmarc.clone().unwrap().result, Status::TempError);
    assert!(n.lists.is_empty());
    assert!(n.list_failures.contains(&"zen.spamhaus.org".to_string()));
    assert_eq!(
        c.health_word(),
        "ok",
        "nothing has failed yet: the queries are still out"
    );
    w.dns.set_silent(false);
    std::thread::sleep(Duration::from_millis(600));
    let n = run(&c, &raw, &envelope(SENDER_IP, "alice@sender.example"));
    assert!(n.complete);
    assert_eq!(n.auth.dkim[0].result, Status::Pass, "{n:?}");
}

// --- through the daemon -------------------------------------------------------------------

fn symbols(reply: &serde_json::Value) -> Vec<String> {
    let mut s: Vec<String> = reply["symbols"]
        .as_object()
        .map(|o| o.keys().cloned().collect())
        .unwrap_or_default();
    s.sort();
    s
}

fn checkv2(d: &Daemon, raw: &str, ip: &str, from: &str) -> serde_json::Value {
    let r = d.post(
        "/checkv2",
        &[
            ("IP", ip),
            ("Helo", "mail.sender.example"),
            ("From", from),
            ("Rcpt", "bob@rcpt.example"),
        ],
        raw.as_bytes(),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()
}

#[test]
fn checkv2_reports_the_rspamd_symbols() {
    let w = world();
    w.dns.a("66.100.51.198.zen.spamhaus.org", "127.0.0.4");
    w.dns
        .a("volume.example.dbl.spamhaus.org", "127.255.255.255");
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "{}\n[[dnsbl]]\nzone = \"zen.spamhaus.org\"\n[[dnsbl]]\nzone = \"dbl.spamhaus.org\"\n",
        w.dns.dns_section(2000)
    );
    let d = Daemon::start(
        dir.path(),
        Options {
            config: Some(config),
            ..Default::default()
        },
    );
    let raw = message("alice@sender.example", "daemon-pass");
    let signed = sign_rsa(&raw, "sender.example", "rsa", "rsa2048.pk8.der");
    let good = checkv2(&d, &signed, SENDER_IP, "alice@sender.example");
    let s = symbols(&good);
    for want in [
        "R_SPF_ALLOW",
        "R_DKIM_ALLOW",
        "DMARC_POLICY_ALLOW",
        "ARC_NA",
    ] {
        assert!(s.contains(&want.to_string()), "{want} not in {s:?}");
    }
    assert!(!s.iter().any(|x| x.starts_with("RBL_")), "{s:?}");
    assert_eq!(
        good["symbols"]["R_DKIM_ALLOW"]["options"][0],
        "sender.example"
    );

    let forged = message("ceo@sender.example", "daemon-forged")
        .replace("as promised.", "as promised: http://volume.example/pay");
    let bad = checkv2(&d, &forged, OTHER_IP, "ceo@sender.example");
    let s = symbols(&bad);
    for want in [
        "R_SPF_FAIL",
        "R_DKIM_NA",
        "DMARC_POLICY_REJECT",
        "DBL_BLOCKED",
        "RBL_SPAMHAUS_XBL",
    ] {
        assert!(s.contains(&want.to_string()), "{want} not in {s:?}");
    }
    // a refusal scores nothing and is not a listing
    assert_eq!(bad["symbols"]["DBL_BLOCKED"]["score"].as_f64(), Some(0.0));
    assert!(!s.iter().any(|x| x.starts_with("DBL_SPAM")));
    assert!(bad["score"].as_f64().unwrap() > good["score"].as_f64().unwrap());
    assert!(
        d.log_text().contains("DNS list refused our resolver"),
        "{}",
        d.log_text()
    );
    let health = d.get("/health").json();
    assert_eq!(health["dns"], "ok");
    let metrics = d.get("/metrics").text();
    assert!(metrics.contains("shrike_dns_messages_total 2"), "{metrics}");
}

#[test]
fn a_silent_resolver_delays_each_scan_by_the_budget_at_most_and_health_says_degraded() {
    let w = world();
    w.dns.set_silent(true);
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start(
        dir.path(),
        Options {
            config: Some(format!(
                "{}\n[[dnsbl]]\nzone = \"zen.spamhaus.org\"\n",
                w.dns.dns_section(300)
            )),
            ..Default::default()
        },
    );
    let raw = sign_rsa(
        &message("alice@sender.example", "daemon-silent"),
        "sender.example",
        "rsa",
        "rsa2048.pk8.der",
    );
    for i in 0..3 {
        let start = Instant::now();
        let r = checkv2(&d, &raw, SENDER_IP, "alice@sender.example");
        let took = start.elapsed();
        // the budget plus a generous margin for a debug build on a shared machine
        assert!(
            took < Duration::from_millis(300 + 1500),
            "scan {i} took {took:?}"
        );
        let s = symbols(&r);
        for want in ["R_SPF_DNSFAIL", "R_DKIM_TEMPFAIL", "DMARC_DNSFAIL"] {
            assert!(s.contains(&want.to_string()), "{want} not in {s:?}");
        }
        assert!(!s.iter().any(|x| x.starts_with("RBL_")), "{s:?}");
    }
    // the queries time out (timeout_ms 500) after the budget: then DNS is degraded
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let h = d.get("/health").json();
        if h["dns"] == "degraded" {
            break;
        }
        assert!(Instant::now() < deadline, "health never said degraded: {h}");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(d.get("/metrics").text().contains("shrike_dns_degraded 1"));
    // answering again clears it (once the queries still out have timed out: a new query for
    // a name already asked joins the one in flight)
    std::thread::sleep(Duration::from_millis(700));
    w.dns.set_silent(false);
    let r = checkv2(&d, &raw, SENDER_IP, "alice@sender.example");
    assert!(
        symbols(&r).contains(&"R_DKIM_ALLOW".to_string()),
        "{r}\n{:?}",
        w.dns.asked()
    );
    assert_eq!(d.get("/health").json()["dns"], "ok");
}

#[test]
fn dns_off_means_no_auth_symbols_and_no_queries() {
    let w = world();
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start(
        dir.path(),
        Options {
            config: Some(format!(
                "[dns]\nenabled = false\nservers = [\"{}\"]\n[[dnsbl]]\nzone = \"zen.spamhaus.org\"\n",
                w.dns.addr
            )),
            ..Default::default()
        },
    );
    let raw = message("alice@sender.example", "offline");
    let r = checkv2(&d, &raw, SENDER_IP, "alice@sender.example");
    let s = symbols(&r);
    assert!(
        !s.iter().any(|x| x.starts_with("R_SPF")
            || x.starts_with("R_DKIM")
            || x.starts_with("DMARC")
            || x.starts_with("ARC_")),
        "{s:?}"
    );
    assert_eq!(w.dns.queries(), 0);
    assert_eq!(d.get("/health").json()["dns"], "off");
}

// --- milter: Authentication-Results -------------------------------------------------------

#[allow(dead_code)]
#[path = "common/mta.rs"]
mod mta;

/// A daemon checking DNS against the test server, authserv-id `mx.shrike.test`, plus `extra`.
fn milter_daemon(w: &World, extra: &str) -> (tempfile::TempDir, Daemon) {
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start(
        dir.path(),
        Options {
            config: Some(format!(
                "{}\n[auth]\nauthserv_id = \"mx.shrike.test\"\n{extra}",
                w.dns.dns_section(2000)
            )),
            ..Default::default()
        },
    );
    (dir, d)
}

/// A message from alice@sender.example signed with sender.example's RSA key.
fn signed_by_alice(subject: &str) -> String {
    sign_rsa(
        &message("alice@sender.example", subject),
        "sender.example",
        "rsa",
        "rsa2048.pk8.der",
    )
}

#[test]
fn milter_adds_authentication_results_and_removes_forged_ones() {
    use shrike::proto::milter::{Command, Reply};
    let w = world();
    let (_dir, d) = milter_daemon(&w, "");
    let raw = signed_by_alice("milter");
    // a forged result claiming our id (before the signature and after it), and a third
    // party's, which stays
    let raw = format!(
        "Authentication-Results: MX.shrike.test; dkim=pass header.d=bank.example\r\n\
         Authentication-Results: relay.other.example; spf=pass smtp.mailfrom=x@y.example\r\n{}",
        raw.replacen(
            "\r\nFrom:",
            "\r\nAuthentication-Results: mx.shrike.test;\r\n\tdmarc=pass header.from=bank.example\r\nFrom:",
            1
        )
    );
    let mut mta = mta::Mta::connect(d.milter);
    mta.send(&[Command::OptNeg(mta::POSTFIX)]);
    mta.until_final();
    mta.send(&mta::transaction(
        SENDER_IP,
        "mail.sender.example",
        "alice@sender.example",
        &raw,
    ));
    let replies = mta.until_final();
    assert!(matches!(replies.last(), Some(Reply::Accept)), "{replies:?}");
    let removed: Vec<u32> = replies
        .iter()
        .filter_map(|r| match r {
            Reply::ChangeHeader { index, name, value }
                if name == "Authentication-Results" && value.is_empty() =>
            {
                Some(*index)
            }
            _ => None,
        })
        .collect();
    // the first and third of the three, highest index first
    assert_eq!(removed, vec![3, 1], "{replies:?}");
    let added: Vec<&String> = replies
        .iter()
        .filter_map(|r| match r {
            Reply::InsertHeader {
                index: 0,
                name,
                value,
            } if name == "Authentication-Results" => Some(value),
            _ => None,
        })
        .collect();
    assert_eq!(added.len(), 1, "{replies:?}");
    let v = added[0];
    assert!(v.starts_with(" mx.shrike.test;"), "{v}");
    for part in [
        "dkim=pass header.d=sender.example header.s=rsa",
        "spf=pass smtp.mailfrom=alice@sender.example",
        "dmarc=pass policy.dmarc=reject header.from=sender.example",
    ] {
        assert!(v.contains(part), "{part} not in {v}");
    }
    // the X-Spam headers are still there too
    assert!(replies
        .iter()
        .any(|r| matches!(r, Reply::AddHeader { name, .. } if name == "X-Spam-Status")));
}

#[test]
fn milter_lookups_start_at_end_of_headers_before_the_body_arrives() {
    use shrike::proto::milter::{Command, Reply};
    let w = world();
    let (_dir, d) = milter_daemon(&w, "[[dnsbl]]\nzone = \"zen.spamhaus.org\"\n");
    let raw = signed_by_alice("early");
    let mut mta = mta::Mta::connect(d.milter);
    mta.send(&[Command::OptNeg(mta::POSTFIX)]);
    mta.until_final();
    let cmds = mta::transaction(
        OTHER_IP,
        "mail.sender.example",
        "alice@sender.example",
        &raw,
    );
    let eoh = cmds
        .iter()
        .position(|c| matches!(c, Command::EndOfHeaders))
        .unwrap();
    let want = [
        "sender.example txt",
        "_dmarc.sender.example txt",
        "rsa._domainkey.sender.example txt",
        "66.100.51.198.zen.spamhaus.org a",
    ];
    let missing = || {
        let asked = w.dns.asked();
        want.iter()
            .filter(|n| !asked.iter().any(|a| a.eq_ignore_ascii_case(n)))
            .map(|n| n.to_string())
            .collect::<Vec<_>>()
    };
    // nothing is asked before the header section is complete
    mta.send(&cmds[..eoh]);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(missing().len(), want.len(), "{:?}", w.dns.asked());
    // at end of headers every lookup starts, with the body not sent
    mta.send(&cmds[eoh..=eoh]);
    let start = std::time::Instant::now();
    while !missing().is_empty() && start.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        missing().is_empty(),
        "not asked: {:?}; asked {:?}",
        missing(),
        w.dns.asked()
    );
    mta.send(&cmds[eoh + 1..]);
    let replies = mta.until_final();
    assert!(matches!(replies.last(), Some(Reply::Accept)), "{replies:?}");
    let results = replies
        .iter()
        .find_map(|r| match r {
            Reply::InsertHeader { name, value, .. } if name == "Authentication-Results" => {
                Some(value.clone())
            }
            _ => None,
        })
        .expect("an Authentication-Results header");
    assert!(results.contains("dkim=pass"), "{results}");
    assert!(results.contains("spf=fail"), "{results}");
    // each name asked once: the end of message found the answers in the caches
    let asked = w.dns.asked();
    for n in want {
        assert_eq!(
            asked.iter().filter(|a| a.eq_ignore_ascii_case(n)).count(),
            1,
            "{n}: {asked:?}"
        );
    }
}

/// The aligned DKIM domain is a reputation key: a sender that signs builds a history that a
/// forger of its From address (who cannot sign) does not get.
#[test]
fn an_aligned_dkim_domain_builds_a_reputation_a_forger_cannot_borrow() {
    let w = world();
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start(
        dir.path(),
        Options {
            config: Some(w.dns.dns_section(2000)),
            ..Default::default()
        },
    );
    for i in 0..12 {
        let raw = sign_rsa(
            &message("alice@sender.example", &format!("weekly-{i}")),
            "sender.example",
            "rsa",
            "rsa2048.pk8.der",
        );
        let r = checkv2(&d, &raw, SENDER_IP, "alice@sender.example");
        assert_eq!(r["action"], "no action", "{r}");
    }
    let rep = d
        .get("/reputation?type=dkim_domain&value=sender.example")
        .json();
    let ham = rep["keys"][0]["windows"]["7d"]["ham"].as_u64();
    assert!(ham >= Some(10), "{rep}");
    let raw = sign_rsa(
        &message("alice@sender.example", "weekly-next"),
        "sender.example",
        "rsa",
        "rsa2048.pk8.der",
    );
    let r = checkv2(&d, &raw, SENDER_IP, "alice@sender.example");
    assert!(symbols(&r).contains(&"REP_DKIM_GOOD".to_string()), "{r}");
    // the same From, from elsewhere, unsigned: no borrowed reputation
    let forged = message("alice@sender.example", "weekly-forged");
    let r = checkv2(&d, &forged, OTHER_IP, "alice@sender.example");
    let s = symbols(&r);
    assert!(!s.contains(&"REP_DKIM_GOOD".to_string()), "{s:?}");
    assert!(s.contains(&"DMARC_POLICY_REJECT".to_string()), "{s:?}");
    // nor with a signature by the wrong key
    let wrong = sign_rsa(
        &message("alice@sender.example", "weekly-wrong-key"),
        "sender.example",
        "rsa",
        "rsa2048-other.pk8.der",
    );
    let r = checkv2(&d, &wrong, OTHER_IP, "alice@sender.example");
    assert!(!symbols(&r).contains(&"REP_DKIM_GOOD".to_string()), "{r}");
}

/// `shrike scan` runs offline (its results repeat) unless its config turns DNS on.
#[test]
fn scan_cli_is_offline_unless_dns_is_enabled() {
    let w = world();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("m.eml");
    let raw = sign_rsa(
        &message("alice@sender.example", "cli"),
        "sender.example",
        "rsa",
        "rsa2048.pk8.der",
    );
    std::fs::write(&file, &raw).unwrap();
    let scan = |config: &str| -> serde_json::Value {
        let cfg = dir.path().join("c.toml");
        std::fs::write(&cfg, config).unwrap();
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_shrike"))
            .arg("--config")
            .arg(&cfg)
            .args(["scan", "--ip", SENDER_IP, "--helo", "mail.sender.example"])
            .args(["--from", "alice@sender.example"])
            .arg(&file)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let offline = scan(&format!("[dns]\nservers = [\"{}\"]\n", w.dns.addr));
    assert_eq!(w.dns.queries(), 0);
    let s = symbols(&offline);
    assert!(
        !s.iter()
            .any(|x| x.starts_with("R_SPF") || x.starts_with("R_DKIM")),
        "{s:?}"
    );
    let online = scan(&w.dns.dns_section(2000));
    let s = symbols(&online);
    for want in ["R_SPF_ALLOW", "R_DKIM_ALLOW", "DMARC_POLICY_ALLOW"] {
        assert!(s.contains(&want.to_string()), "{want} not in {s:?}");
    }
}

/// Under a dead resolver the lookups of earlier messages are still out; past the in-flight
/// bound a message gets temporary failures at once, without queries, so memory stays bounded.
#[test]
fn past_the_in_flight_bound_a_message_gets_temporary_failures_at_once() {
    let w = world();
    w.dns.set_silent(true);
    let c = checker(&w.dns, 200, &zones()).with_max_in_flight(1);
    let raw = message("alice@sender.example", "shed");
    let env = envelope(SENDER_IP, "alice@sender.example");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let first = rt.block_on(c.check(raw.as_bytes(), &env));
    assert!(!first.complete);
    let asked = w.dns.queries();
    let start = Instant::now();
    let second = rt.block_on(c.check(raw.as_bytes(), &env));
    assert!(
        start.elapsed() < Duration::from_millis(150),
        "{:?}",
        start.elapsed()
    );
    let spf = second.auth.spf.clone().unwrap();
    assert_eq!(spf.result, Status::TempError);
    assert_eq!(
        spf.reason.as_deref(),
        Some("too many messages waiting for DNS")
    );
    assert_eq!(w.dns.queries(), asked, "a shed message asks nothing");
    // once the first message's lookups give up (budget + timeout), checks run again
    std::thread::sleep(Duration::from_millis(700));
    let third = rt.block_on(c.check(raw.as_bytes(), &env));
    assert_eq!(
        third.auth.spf.unwrap().reason.as_deref(),
        Some("no answer within the message's DNS budget")
    );
}

/// A DNS list of the operator's own, scored in the config alone: its symbols reach the
/// verdict with their scores and the names listed, without a rule; a symbol the zone never
/// gives, or a score for a refusal, is refused before anything starts.
#[test]
fn an_own_zone_scores_from_the_config_without_a_rule() {
    let w = world();
    let reversed = SENDER_IP.split('.').rev().collect::<Vec<_>>().join(".");
    w.dns.a(&format!("{reversed}.bl.own.example"), "127.0.0.2");
    let zone = "[[dnsbl]]\nzone = \"bl.own.example\"\nkind = \"ip\"\nchecks = [\"client_ip\"]\n\
                returncodes = { OWN_BL = \"127.0.0.2\", OWN_BL_OLD = \"127.0.0.3\" }\n";
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "{}\n{zone}scores = {{ OWN_BL = 3.5, OWN_BL_OLD = 1.0 }}\n",
        w.dns.dns_section(2000)
    );
    let d = Daemon::start(
        dir.path(),
        Options {
            config: Some(config.clone()),
            ..Default::default()
        },
    );
    let raw = message("alice@sender.example", "own-zone");
    let listed = checkv2(&d, &raw, SENDER_IP, "alice@sender.example");
    let own = &listed["symbols"]["OWN_BL"];
    assert_eq!(own["score"].as_f64(), Some(3.5), "{listed}");
    assert_eq!(own["options"][0], SENDER_IP);
    assert!(listed["symbols"].get("OWN_BL_OLD").is_none());
    let clean = checkv2(&d, &raw, OTHER_IP, "alice@sender.example");
    assert!(clean["symbols"].get("OWN_BL").is_none(), "{clean}");
    drop(d);
    // Without `scores` the hit reaches the rules (msg:dnsbl()) but scores nothing.
    let bare = tempfile::tempdir().unwrap();
    let d = Daemon::start(
        bare.path(),
        Options {
            config: Some(format!("{}\n{zone}", w.dns.dns_section(2000))),
            ..Default::default()
        },
    );
    let unscored = checkv2(&d, &raw, SENDER_IP, "alice@sender.example");
    assert!(unscored["symbols"].get("OWN_BL").is_none(), "{unscored}");
    drop(d);
    for (scores, says) in [
        ("scores = { NOT_MINE = 2.0 }", "never gives"),
        (
            "scores = { BL_OWN_EXAMPLE_BLOCKED = 1.0 }",
            "never a listing",
        ),
    ] {
        let path = dir.path().join("bad.toml");
        std::fs::write(&path, format!("{zone}{scores}\n")).unwrap();
        let o = std::process::Command::new(env!("CARGO_BIN_EXE_shrike"))
            .args(["--config", path.to_str().unwrap(), "config", "check"])
            .output()
            .unwrap();
        assert!(!o.status.success(), "{scores}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(says), "{scores}: {err}");
    }
}
