//! The decision history's size and query benchmarks (BENCHMARKS.md, "Decision history").
//!
//! `history_bench corpus [BATCH...]`: scans the dev corpus (`$SHRIKE_CORPUS`) as the daemon
//! does, makes each verdict a record with the envelope an MTA would send (client IP and HELO
//! from the first Received hop, envelope sender from Return-Path or From, recipient from To, a
//! Postfix-like queue id), writes them through the history's writer in batches of BATCH
//! records (default 100 1000 4096) and prints the bytes on disk per record.
//!
//! `history_bench generate DATA_DIR N [BATCH]`: writes N synthetic records (varied senders,
//! recipients, IPs, subjects, 3–9 symbols each from a set of 80) into `DATA_DIR/history`, for
//! timing `shrike history --data DATA_DIR` over them (scripts/bench_history.sh).
#[path = "../tests/common/mod.rs"]
#[allow(dead_code)]
mod common;

use std::net::IpAddr;
use std::path::Path;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Instant;

use shrike::config::Config;
use shrike::engine::RuleLocation;
use shrike::entities::EmailRole;
use shrike::history::{self, HistoryConfig, Kind, Record, SymbolRecord};
use shrike::message::{prepare, Envelope};
use shrike::scan::Scanner;
use shrike::store::{ManualClock, ReputationStore, Store};
use shrike::verdict::Action;

fn xorshift(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

/// Writes the records through the real writer into `dir` in batches of `batch`; the bytes of
/// the history afterwards.
fn write_all(dir: &Path, records: impl Iterator<Item = Record>, batch: usize) -> (u64, u64) {
    let config = HistoryConfig {
        batch_records: batch,
        queue: 1 << 20,
        max_bytes: 1 << 40,
        segment_bytes: 64 << 20,
        ..HistoryConfig::default()
    };
    let (recorder, writer) = history::open(dir, &config).expect("open the history");
    let mut n = 0u64;
    for r in records {
        recorder.record(r);
        n += 1;
        // Keep the queue from filling: every record goes to disk.
        if n.is_multiple_of(100_000) {
            recorder.flush();
        }
    }
    recorder.flush();
    let stats = recorder.stats().expect("enabled");
    assert_eq!(stats.dropped.load(Relaxed), 0, "records dropped");
    let written = stats.written.load(Relaxed);
    drop(writer);
    let bytes: u64 = std::fs::read_dir(dir.join(history::DIR))
        .expect("history dir")
        .filter_map(|e| e.ok())
        .filter(|e| e.path().extension().is_some_and(|x| x == "hseg"))
        .map(|e| e.metadata().map_or(0, |m| m.len()))
        .sum();
    (written, bytes)
}

fn corpus(batches: &[usize]) {
    let corpus = common::load_corpus();
    let config = Config::default();
    let store: Arc<dyn ReputationStore> =
        Arc::new(Store::new(&config.store, Arc::new(ManualClock::new(1_800_000_000))).unwrap());
    let scanner = Scanner::new(&config.scan_settings(), RuleLocation::Embedded, store).unwrap();
    let mut worker = scanner.worker();
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut records = Vec::with_capacity(corpus.len());
    let mut t = 1_795_000_000_000_000i64;
    for m in &corpus {
        let input = prepare(&m.raw, &config.limits);
        let probe = worker.scan(&input, &Envelope::default());
        let e = &probe.analysis.entities;
        let hop = e.ips.iter().find(|ip| !ip.private);
        let addr = |role| e.emails_with(role).next().map(|x| x.address.clone());
        let envelope = Envelope {
            client_ip: hop.map(|h| h.ip),
            helo: hop.and_then(|h| h.host.clone()),
            hostname: hop.and_then(|h| h.host.clone()),
            mail_from: addr(EmailRole::ReturnPath).or_else(|| addr(EmailRole::From)),
            rcpt_to: addr(EmailRole::To).into_iter().collect(),
            queue_id: Some(format!("{:010X}", xorshift(&mut seed) >> 24)),
            ..Envelope::default()
        };
        let scanned = worker.scan(&input, &envelope);
        let a = &scanned.analysis;
        t += 1_000 + (xorshift(&mut seed) % 20_000) as i64;
        let mut r = Record::from_verdict(&scanned.verdict).with_envelope(&envelope);
        r.time_us = t;
        r.listener = "milter".into();
        r.message_id = a.entities.message_id.clone();
        r.from = a.entities.from().map(|x| x.address.clone());
        r.subject = Some(a.message.subject.display.clone()).filter(|s| !s.is_empty());
        r.size = m.raw.len() as u64;
        r.scan_us = 500 + xorshift(&mut seed) % 5000;
        records.push(r);
    }
    let symbols: usize = records.iter().map(|r| r.symbols.len()).sum();
    println!(
        "dev corpus: {} records, {:.1} symbols each",
        records.len(),
        symbols as f64 / records.len() as f64
    );
    // The writer thread's work a record (sort aside): encoding and compressing its batch.
    for &batch in batches {
        for level in [3, 9] {
            let started = Instant::now();
            let mut bytes = 0;
            for _ in 0..5 {
                for chunk in records.chunks(batch) {
                    bytes += history::segment::encode_batch_at(chunk, level).len();
                }
            }
            println!(
                "batch {batch:>5}, zstd level {level}: {:.2} µs a record to encode, {:.1} bytes/record",
                started.elapsed().as_secs_f64() * 1e6 / (5 * records.len()) as f64,
                bytes as f64 / (5 * records.len()) as f64
            );
        }
    }
    for &batch in batches {
        let dir = tempfile::tempdir().unwrap();
        let (n, bytes) = write_all(dir.path(), records.iter().cloned(), batch);
        println!(
            "batch {batch:>5}: {n} records, {bytes} bytes, {:.1} bytes/record",
            bytes as f64 / n as f64
        );
    }
}

fn generate(data: &Path, n: u64, batch: usize) {
    const SYMBOLS: usize = 80;
    let names: Vec<String> = (0..SYMBOLS).map(|i| format!("SYMBOL_NUMBER_{i}")).collect();
    let mut seed = 42u64;
    let start = history::now_us() - n as i64 * 10_000;
    let started = Instant::now();
    let records = (0..n).map(|i| {
        let mut x = || xorshift(&mut seed);
        let nsym = 3 + (x() % 7) as usize;
        let action = match x() % 10 {
            0 => Action::Reject,
            1 | 2 => Action::AddHeader,
            3 => Action::Greylist,
            _ => Action::NoAction,
        };
        let ip = IpAddr::from([(x() % 223 + 1) as u8, x() as u8, x() as u8, x() as u8]);
        Record {
            time_us: start + i as i64 * 10_000,
            kind: Kind::Scan(action),
            listener: "milter".into(),
            queue_id: Some(format!("{:010X}", x() >> 24)),
            message_id: Some(format!("<{:016x}@mail{}.example>", x(), x() % 1000)),
            ip: Some(ip),
            helo: Some(format!("mx{}.host{}.example", x() % 4, x() % 20_000)),
            rdns: Some(format!("mail.host{}.example", x() % 20_000)),
            user: None,
            sender: Some(format!("user{}@domain{}.example", x() % 5000, x() % 10_000)),
            rcpt: vec![format!("rcpt{}@ourcompany.example", x() % 5000)],
            from: Some(format!("news{}@domain{}.example", x() % 100, x() % 10_000)),
            subject: Some(format!(
                "Subject {} about {} {:x}",
                x() % 1000,
                ["offer", "meeting", "invoice", "news"][(x() % 4) as usize],
                x() % 0xffff
            )),
            size: 2000 + x() % 50_000,
            score: (x() % 30_000) as f64 / 1000.0 - 5.0,
            required_score: Some(15.0),
            symbols: (0..nsym)
                .map(|_| {
                    let k = (x() % SYMBOLS as u64) as usize;
                    SymbolRecord {
                        name: names[k].clone(),
                        score: (x() % 4000) as f64 / 1000.0 - 1.0,
                        options: if k.is_multiple_of(3) {
                            vec![format!("opt{}", x() % 50)]
                        } else {
                            vec![]
                        },
                        shadow: false,
                    }
                })
                .collect(),
            generation: 7,
            scan_us: 500 + x() % 5000,
            duplicate: false,
        }
    });
    let (written, bytes) = write_all(data, records, batch);
    println!(
        "generated {written} records in {:.1} s: {bytes} bytes, {:.1} bytes/record",
        started.elapsed().as_secs_f64(),
        bytes as f64 / written as f64
    );
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("corpus") => {
            let batches: Vec<usize> = args[1..].iter().filter_map(|a| a.parse().ok()).collect();
            corpus(if batches.is_empty() {
                &[100, 1000, 4096]
            } else {
                &batches
            });
        }
        Some("generate") if args.len() >= 3 => generate(
            Path::new(&args[1]),
            args[2].parse().expect("N"),
            args.get(3).and_then(|b| b.parse().ok()).unwrap_or(1000),
        ),
        _ => {
            eprintln!("usage: history_bench corpus [BATCH...] | generate DATA_DIR N [BATCH]");
            std::process::exit(2);
        }
    }
}
