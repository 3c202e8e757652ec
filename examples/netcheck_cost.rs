//! The CPU the network checks cost a message on the tokio side, warm and cold, over every
//! sixth message of the dev corpus (scripts/bench_dns.sh's cycle), against the tests' DNS
//! server in this process (sender.example's records, NXDOMAIN for the rest), with the ZEN, DBL
//! and URIBL presets on, `IP: 192.0.2.10`, `Helo: mail.sender.example`. On one thread (a
//! current-thread runtime), so wall time is CPU time once every answer is cached; also the
//! target for profilers:
//! `perf record -g target/release/examples/netcheck_cost 20`.
//!
//!   cargo run --release --example netcheck_cost -- [WARM_PASSES]
#[path = "../tests/common/mod.rs"]
#[allow(dead_code)]
mod common;
#[allow(dead_code)]
#[path = "../tests/common/dns_server.rs"]
mod dns_server;

use std::time::{Duration, Instant};

use shrike::dns::{DnsConfig, Resolver};
use shrike::dnsbl::{resolve_all, ZoneConfig};
use shrike::message::Envelope;
use shrike::netcheck::Checker;

fn main() {
    let passes: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(5);
    let corpus = common::load_corpus();
    let mut names: Vec<_> = corpus.iter().collect();
    names.sort_by(|a, b| (&a.label, &a.name).cmp(&(&b.label, &b.name)));
    let cycle: Vec<&[u8]> = names
        .iter()
        .enumerate()
        .filter(|(i, _)| i % 6 == 0)
        .map(|(_, m)| m.raw.as_slice())
        .collect();
    let dns = dns_server::DnsServer::start();
    dns.txt("sender.example", "v=spf1 ip4:192.0.2.0/24 -all");
    dns.txt("mail.sender.example", "v=spf1 a mx ip4:192.0.2.0/24 -all");
    dns.txt("_dmarc.sender.example", "v=DMARC1; p=reject");
    dns.a("mail.sender.example", "192.0.2.10");
    let zones: Vec<ZoneConfig> = ["zen.spamhaus.org", "dbl.spamhaus.org", "multi.uribl.com"]
        .iter()
        .map(|z| ZoneConfig {
            zone: z.to_string(),
            kind: None,
            checks: None,
            returncodes: None,
            scores: None,
        })
        .collect();
    let config = DnsConfig {
        enabled: Some(true),
        servers: vec![dns.addr.to_string()],
        ..Default::default()
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let checker = rt.block_on(async {
        Checker::new(
            Resolver::new(&config).unwrap(),
            resolve_all(&zones).unwrap(),
            Duration::from_millis(300),
            "mx.shrike.test",
        )
    });
    let env = Envelope {
        client_ip: Some("192.0.2.10".parse().unwrap()),
        helo: Some("mail.sender.example".into()),
        ..Default::default()
    };
    // This thread's CPU time (the first field of /proc/thread-self/schedstat, ns): the machine
    // is shared, so wall time is not the measure.
    let cpu = || {
        let text = std::fs::read_to_string("/proc/thread-self/schedstat").unwrap_or_default();
        let ns = text
            .split_whitespace()
            .next()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        Duration::from_nanos(ns)
    };
    let pass = |label: &str| {
        let start = Instant::now();
        let cpu0 = cpu();
        let mut incomplete = 0;
        for raw in &cycle {
            let n = rt.block_on(checker.check(raw, &env));
            incomplete += usize::from(!n.complete);
        }
        let per = start.elapsed() / cycle.len() as u32;
        let per_cpu = (cpu() - cpu0) / cycle.len() as u32;
        println!(
            "{label}: {} messages, {:.1} µs CPU ({:.1} µs wall) a message, {incomplete} over budget, {} queries so far",
            cycle.len(),
            per_cpu.as_secs_f64() * 1e6,
            per.as_secs_f64() * 1e6,
            dns.queries()
        );
    };
    pass("cold");
    for i in 0..passes {
        pass(&format!("warm {}", i + 1));
    }
    // The parts of a warm check, alone.
    let limits = shrike::message::Limits::default();
    // Each part over the cycle, five times: the least CPU a message (the machine is shared).
    let each = |label: &str, f: &dyn Fn(&[u8])| {
        let mut least = Duration::MAX;
        for _ in 0..5 {
            let cpu0 = cpu();
            for raw in &cycle {
                f(raw);
            }
            least = least.min((cpu() - cpu0) / cycle.len() as u32);
        }
        println!("{label}: {:.1} µs CPU a message", least.as_secs_f64() * 1e6);
    };
    each("dnsbl::targets alone", &|raw| {
        std::hint::black_box(shrike::dnsbl::targets(raw, &env, Some(&limits)));
    });
    each("dnsbl::targets without URL domains", &|raw| {
        std::hint::black_box(shrike::dnsbl::targets(raw, &env, None));
    });
    // The URL domains: the scan's parse, then entities' URL walk alone (what the lists use)
    // or the whole extraction, and the parse alone.
    each(
        "dnsbl::url_domains (parse_links + entities::url_domains)",
        &|raw| {
            std::hint::black_box(shrike::dnsbl::url_domains(raw, &limits));
        },
    );
    each("parse + entities::extract", &|raw| {
        let input = shrike::message::prepare(raw, &limits);
        let parsed = shrike::message::parse(&input, &limits);
        std::hint::black_box(shrike::entities::extract(&parsed, &env).domains.len());
    });
    each("parse + entities::url_domains", &|raw| {
        let input = shrike::message::prepare(raw, &limits);
        let parsed = shrike::message::parse(&input, &limits);
        std::hint::black_box(shrike::entities::url_domains(&parsed).len());
    });
    each("prepare + parse alone", &|raw| {
        let input = shrike::message::prepare(raw, &limits);
        std::hint::black_box(shrike::message::parse(&input, &limits).html_links.len());
    });
    each("prepare + parse_links alone", &|raw| {
        let input = shrike::message::prepare(raw, &limits);
        std::hint::black_box(
            shrike::message::parse_links(&input, &limits)
                .html_links
                .len(),
        );
    });
    each("mail-auth's parse alone", &|raw| {
        std::hint::black_box(mail_auth::AuthenticatedMessage::parse(raw));
    });
}
