//! Fills a data directory's quarantine with synthetic entries, for timing its lists
//! (BENCHMARKS.md, "Quarantine"; scripts/bench_quarantine.sh).
//!
//! `quarantine_fill DATA_DIR N`: N entries of 1–4 KB messages through the real writer, with
//! varied senders, 1–3 recipients of 500, subjects and 3–6 symbols of 40.

use std::sync::atomic::Ordering::Relaxed;
use std::time::Instant;

use shrike::quarantine::{self, Meta, QuarantineConfig, Symbol};

fn xorshift(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (Some(dir), Some(n)) = (args.get(1), args.get(2).and_then(|n| n.parse::<u64>().ok()))
    else {
        eprintln!("usage: quarantine_fill DATA_DIR N");
        std::process::exit(2);
    };
    let config = QuarantineConfig {
        enabled: true,
        max_bytes: 64 << 30,
        ..QuarantineConfig::default()
    };
    let (q, writer) = quarantine::open(std::path::Path::new(dir), &config).expect("open");
    let start = Instant::now();
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let now = shrike::history::now_us() - (n as i64) * 1000;
    for i in 0..n {
        let r = xorshift(&mut x);
        let time_us = now + (i as i64) * 1000;
        let rcpt: Vec<String> = (0..1 + r % 3)
            .map(|k| format!("user{}@example{}.org", (r >> (8 * k)) % 500, k))
            .collect();
        let symbols = (0..3 + r % 4)
            .map(|k| Symbol {
                name: format!("SYMBOL_{}", (r >> (4 * k)) % 40),
                score: ((r >> (3 * k)) % 50) as f64 / 10.0,
            })
            .collect();
        let body = format!("word{} ", r % 9973).repeat(100 + (r % 400) as usize);
        let raw = format!(
            "From: s{}@sender{}.example\r\nTo: {}\r\nSubject: offer {i}\r\n\r\n{body}\r\n",
            r % 1000,
            r % 97,
            rcpt[0]
        );
        let meta = Meta {
            id: quarantine::new_id(time_us),
            time_us,
            action: "reject".into(),
            score: 15.0 + (r % 100) as f64 / 10.0,
            listener: "milter".into(),
            queue_id: Some(format!("{:010X}", r & 0xff_ffff_ffff)),
            message_id: Some(format!("{i}.{r:x}@sender.example")),
            ip: Some(format!("192.0.2.{}", r % 250)),
            sender: Some(format!("s{}@sender{}.example", r % 1000, r % 97)),
            rcpt,
            subject: Some(format!("offer {i}")),
            symbols,
            ..Meta::default()
        };
        q.submit(meta, raw.into_bytes());
        if i % 1000 == 999 {
            q.flush();
        }
    }
    q.flush();
    let stats = q.stats().expect("stats");
    let (stored, dropped) = (stats.stored.load(Relaxed), stats.dropped.load(Relaxed));
    drop(writer);
    println!(
        "{stored} entries ({dropped} dropped) in {:.1} s",
        start.elapsed().as_secs_f64()
    );
}
