//! `[[settings]]` matching with 10,000 entries (issue 60's target: ≤ 2 µs a message). One
//! lookup is what a message with one recipient costs: recipient address, recipient domain (one
//! probe per listed depth), user, sender, client network (one probe per listed prefix length),
//! most specific first. Measured for a recipient-domain hit and for a message no entry matches
//! (every kind probed: the worst case), with a deep subdomain and a network-only match. Also
//! greylisting's cost a message on the memory store (issue 60: ≤ 5% of a `/checkv2`): a triple
//! deferred (3 reads, 2 counted hits) and one that passed (1 read, 1 hit). Run:
//!
//!     cargo bench --bench settings

use std::collections::BTreeSet;
use std::hint::black_box;
use std::net::IpAddr;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use shrike::settings::{Query, SettingsEntry, SettingsTable};
use shrike::verdict::VerdictConfig;

/// 10,000 entries: 6,000 by recipient domain (2 and 3 labels), 2,000 by recipient address,
/// 1,000 by user, 500 by sender, 500 by network over 17 prefix lengths (/16 to /32, and /48 to
/// /64 for IPv6).
fn entries() -> Vec<SettingsEntry> {
    let mut out = Vec::with_capacity(10_000);
    for i in 0..10_000u32 {
        let mut e = SettingsEntry {
            name: format!("e{i}"),
            ..SettingsEntry::default()
        };
        match i {
            0..6_000 if i % 2 == 0 => e.rcpt_domains = vec![format!("customer{i}.example")],
            0..6_000 => e.rcpt_domains = vec![format!("mail.customer{i}.example")],
            6_000..8_000 => e.rcpts = vec![format!("user{i}@big.example")],
            8_000..9_000 => e.users = vec![format!("login{i}")],
            9_000..9_500 => e.senders = vec![format!("@sender{i}.example")],
            _ => {
                let n = i - 9_500;
                let prefix = 16 + n % 17;
                e.networks = vec![if n % 2 == 0 {
                    format!("{}.{}.0.0/{prefix}", 10 + n / 256, n % 256)
                } else {
                    format!("2001:db8:{n:x}::/{}", 48 + n % 17)
                }];
            }
        }
        e.scores.insert("GTUBE".into(), 1.0);
        out.push(e);
    }
    out
}

fn settings(c: &mut Criterion) {
    let table = SettingsTable::new(&entries(), &VerdictConfig::default(), BTreeSet::new())
        .expect("entries compile");
    let ip: IpAddr = "192.0.2.7".parse().unwrap();
    let hit = Query {
        rcpt: Some("bob@customer4242.example"),
        user: None,
        sender: Some("news@partner.example"),
        client_ip: Some(ip),
    };
    let deep = Query {
        rcpt: Some("bob@a.b.c.d.e.f.mail.customer4243.example"),
        ..hit
    };
    let miss = Query {
        rcpt: Some("bob@nowhere.example"),
        user: Some("stranger"),
        sender: Some("news@partner.example"),
        client_ip: Some(ip),
    };
    let network = Query {
        rcpt: Some("bob@nowhere.example"),
        client_ip: Some("10.2.2.3".parse().unwrap()),
        ..miss
    };
    assert!(table.lookup(&hit).is_some() && table.lookup(&deep).is_some());
    assert!(table.lookup(&miss).is_none() && table.lookup(&network).is_some());
    let mut g = c.benchmark_group("settings");
    g.throughput(Throughput::Elements(1));
    for (name, q) in [
        ("rcpt_domain_hit", hit),
        ("deep_subdomain_hit", deep),
        ("network_hit", network),
        ("no_match", miss),
    ] {
        g.bench_function(name, |b| b.iter(|| black_box(table.lookup(black_box(&q)))));
    }
    g.finish();
}

fn greylist(c: &mut Criterion) {
    use shrike::greylist::{Greylist, GreylistConfig, Outcome};
    use shrike::message::Envelope;
    use shrike::store::{ManualClock, Store, StoreConfig};
    use std::sync::Arc;
    let clock = Arc::new(ManualClock::new(1_800_000_000));
    let store = Arc::new(Store::new(&StoreConfig::default(), clock.clone()).unwrap());
    let config = GreylistConfig {
        enabled: true,
        ..GreylistConfig::default()
    };
    let g = Greylist::new(&config, store, 0).unwrap();
    let envelope = |i: usize| Envelope {
        client_ip: Some("192.0.2.7".parse().unwrap()),
        mail_from: Some(format!("sender{i}@example.net")),
        rcpt_to: vec!["bob@example.com".into()],
        ..Envelope::default()
    };
    let passed = envelope(usize::MAX);
    g.check(&passed);
    clock.advance(400);
    assert_eq!(g.check(&passed), Outcome::Passed { triples: 1 });
    // 100,000 triples seen once: each check is a retry within the delay (the clock stands
    // still), deferred.
    let waiting: Vec<Envelope> = (0..100_000).map(envelope).collect();
    for e in &waiting {
        g.check(e);
    }
    assert!(matches!(g.check(&waiting[0]), Outcome::Deferred { .. }));
    let mut group = c.benchmark_group("greylist");
    group.throughput(Throughput::Elements(1));
    let mut i = 0;
    group.bench_function("deferred", |b| {
        b.iter(|| {
            i = (i + 1) % waiting.len();
            black_box(g.check(black_box(&waiting[i])))
        })
    });
    group.bench_function("passed", |b| {
        b.iter(|| black_box(g.check(black_box(&passed))))
    });
    group.finish();
}

criterion_group!(benches, settings, greylist);
criterion_main!(benches);
