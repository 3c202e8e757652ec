//! No free ham points (docs/rules.md): a spam message whose only change is a header or part
//! its sender can forge without authentication must not score lower for it. Through the binary:
//! a daemon with the shipped rules that has seen a newsletter domain for a while and whose users
//! rescued a sender's mail, then each spam message, and each one again with one forgery at a
//! time (a known From domain, a rescued From address, a reply's headers, a signature part, links
//! to its own From domain, a mailing list's tag and headers, an ARC seal, a reply naming an id our users never sent, the From of
//! someone our user wrote to without DKIM or SPF). Every symbol with a negative score on a forged copy
//! must have had it on the original.

#[allow(dead_code)]
#[path = "common/daemon.rs"]
mod daemon;

use std::collections::BTreeMap;

use daemon::{Daemon, Options};

fn message(from: &str, subject: &str, id: &str, body: &str) -> String {
    format!(
        "Received: from mx.sender.example (mx.sender.example [198.51.100.77])\r\n\
         \tby mx.example.com (Postfix) with ESMTP id {id}\r\n\
         \tfor <alice@example.com>; Tue, 3 Sep 2002 08:00:12 +0000 (UTC)\r\n\
         From: {from}\r\nTo: alice@example.com\r\nSubject: {subject}\r\n\
         Date: Tue, 3 Sep 2002 08:00:00 +0000\r\nMessage-ID: <{id}@mx.sender.example>\r\n\
         MIME-Version: 1.0\r\nContent-Type: text/plain; charset=us-ascii\r\n\r\n{body}"
    )
}

const SPAM: [(&str, &str, &str); 3] = [
    (
        "Best Deals <deals@offers-4u.example>",
        "High Returns, Safe Investment! 20% Monthly!",
        "Dear friend,\r\n\r\nInvest now and earn 20% every month, guaranteed. Act now, limited \
         time offer! Click https://invest-4u.example/now to claim your bonus.\r\n",
    ),
    (
        "Pharmacy <sales@meds-cheap.example>",
        "Penis Enlargement Pills - 100% Guarantee",
        "Cheap pills, no prescription needed. Order today at https://meds-cheap.example/buy \
         and save 80%! Satisfaction guaranteed or your money back.\r\n",
    ),
    (
        "Winner Notice <notice@prize-center.example>",
        "You have WON $1,000,000",
        "Congratulations! You have won one million dollars. Send your bank details to claim \
         your prize at https://prize-center.example/claim within 24 hours.\r\n",
    ),
];

/// The symbols with a negative score, and the total score.
fn negatives(d: &Daemon, raw: &str) -> (BTreeMap<String, f64>, f64) {
    let r = d.post("/checkv2", &[], raw.as_bytes());
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    let mut out = BTreeMap::new();
    for (name, s) in v["symbols"].as_object().expect("symbols") {
        let score = s["score"].as_f64().unwrap_or(0.0);
        if score < 0.0 {
            out.insert(name.clone(), score);
        }
    }
    (out, v["score"].as_f64().expect("score"))
}

fn replace_header(raw: &str, name: &str, value: &str) -> String {
    raw.split("\r\n")
        .map(|l| {
            if l.to_ascii_lowercase()
                .starts_with(&format!("{}:", name.to_ascii_lowercase()))
            {
                format!("{name}: {value}")
            } else {
                l.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\r\n")
}

fn add_headers(raw: &str, headers: &str) -> String {
    format!("{headers}{raw}")
}

fn split(raw: &str) -> (&str, &str) {
    raw.split_once("\r\n\r\n").expect("head and body")
}

#[test]
fn a_forged_header_or_part_buys_no_negative_score() {
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start(
        dir.path(),
        Options {
            workers: Some(1),
            ..Options::default()
        },
    );
    // The history a forger would borrow: a newsletter domain seen for a while, never reported,
    // linking its own site; a sender whose mail users rescued five times.
    for i in 0..4 {
        let news = message(
            "Town Letter <issue@letters.example.org>",
            &format!("Town letter, issue {i}"),
            &format!("news{i}"),
            "This week in town: the market opens on Saturday. Read more at \
             https://www.letters.example.org/issues/latest\r\n",
        );
        assert_eq!(d.post("/checkv2", &[], news.as_bytes()).status, 200);
    }
    for i in 0..5 {
        let friend = message(
            "Bob Smith <bob@example.org>",
            "lunch",
            &format!("bob{i}"),
            &format!("See you at noon, {i}.\r\n"),
        );
        assert_eq!(d.post("/learnham", &[], friend.as_bytes()).status, 200);
    }

    // Our user alice wrote to bob@example.org (a known correspondent, when bob authenticates)
    // with a Message-ID a reply could name.
    let sent = message(
        "Alice <alice@example.com>",
        "lunch on Friday",
        "sent1",
        "Shall we meet at noon?\r\n",
    )
    .replace("To: alice@example.com", "To: bob@example.org");
    let r = d.post(
        "/checkv2",
        &[("User", "alice@example.com"), ("Rcpt", "bob@example.org")],
        sent.as_bytes(),
    );
    assert!(r.text().contains("OUTBOUND"), "{}", r.text());
    // (What the forgeries below lack: the id alice's mail carried earns REPLY.)
    let genuine = add_headers(
        &message(
            "Bob <bob@example.org>",
            "Re: lunch on Friday",
            "bob9",
            "Noon is fine.\r\n",
        ),
        "In-Reply-To: <sent1@mx.sender.example>\r\n",
    );
    assert!(negatives(&d, &genuine).0.contains_key("REPLY"));

    let mut bought = Vec::new();
    for (n, (from, subject, body)) in SPAM.iter().enumerate() {
        let raw = message(from, subject, &format!("spam{n}"), body);
        let (base, base_score) = negatives(&d, &raw);
        let (head, text) = split(&raw);
        let own_domain = from.split('@').nth(1).unwrap().trim_end_matches('>');
        let forgeries: Vec<(&str, String)> = vec![
            (
                "a known newsletter's From",
                replace_header(&raw, "From", "Town Letter <issue@letters.example.org>"),
            ),
            (
                "a rescued sender's From",
                replace_header(&raw, "From", "Bob Smith <bob@example.org>"),
            ),
            (
                "a reply's headers",
                replace_header(
                    &add_headers(
                        &raw,
                        "In-Reply-To: <x1@example.com>\r\nReferences: <x1@example.com>\r\n",
                    ),
                    "Subject",
                    &format!("Re: {subject}"),
                ),
            ),
            (
                "a reply naming a random Message-ID of our domain",
                replace_header(
                    &add_headers(
                        &raw,
                        "In-Reply-To: <8c1f04e2a7@mx.sender.example>\r\n\
                         References: <sent2@mx.sender.example> <x9@example.com>\r\n",
                    ),
                    "Subject",
                    &format!("Re: {subject}"),
                ),
            ),
            (
                "a known correspondent's From without DKIM or SPF",
                replace_header(&raw, "From", "Bob <bob@example.org>"),
            ),
            (
                "a PGP signature part",
                format!(
                    "{}\r\n\r\n--sig\r\nContent-Type: text/plain\r\n\r\n{text}\r\n--sig\r\n\
                     Content-Type: application/pgp-signature\r\n\r\n-----BEGIN PGP SIGNATURE-----\r\n\
                     iQEzBAEBCAAdFiEEforged\r\n-----END PGP SIGNATURE-----\r\n--sig--\r\n",
                    head.replace(
                        "Content-Type: text/plain; charset=us-ascii",
                        "Content-Type: multipart/signed; protocol=\"application/pgp-signature\"; \
                         micalg=pgp-sha256; boundary=\"sig\"",
                    )
                ),
            ),
            (
                "links to its own From domain",
                format!("{head}\r\n\r\n{text}Unsubscribe: https://www.{own_domain}/unsubscribe\r\n"),
            ),
            (
                "a known newsletter's From with its links",
                format!(
                    "{}\r\n\r\n{text}More at https://www.letters.example.org/issues/latest\r\n",
                    split(&replace_header(
                        &raw,
                        "From",
                        "Town Letter <issue@letters.example.org>"
                    ))
                    .0
                ),
            ),
            (
                "a mailing list's tag and headers",
                replace_header(
                    &add_headers(
                        &raw,
                        "List-Id: Town Letter <letters.example.org>\r\n\
                         List-Unsubscribe: <https://www.letters.example.org/leave>\r\n\
                         Precedence: list\r\n",
                    ),
                    "Subject",
                    &format!("[Town] {subject}"),
                ),
            ),
            (
                "an ARC seal",
                add_headers(
                    &raw,
                    "ARC-Seal: i=1; a=rsa-sha256; cv=none; d=forwarder.example; s=s1; t=1; b=Zm9yZ2Vk\r\n\
                     ARC-Message-Signature: i=1; a=rsa-sha256; c=relaxed/relaxed; d=forwarder.example; \
                     s=s1; h=from:subject; bh=Zm9yZ2Vk; b=Zm9yZ2Vk\r\n\
                     ARC-Authentication-Results: i=1; forwarder.example; spf=pass; dkim=pass; dmarc=pass\r\n\
                     Authentication-Results: mx.example.com; dkim=pass; spf=pass; dmarc=pass\r\n",
                ),
            ),
        ];
        for (what, forged) in forgeries {
            let (neg, score) = negatives(&d, &forged);
            for (symbol, value) in &neg {
                if !base.contains_key(symbol) {
                    bought.push(format!(
                        "spam {n} with {what}: {symbol} {value} (score {score} against {base_score})"
                    ));
                }
            }
        }
    }
    assert!(
        bought.is_empty(),
        "ham points bought:\n{}",
        bought.join("\n")
    );
}
