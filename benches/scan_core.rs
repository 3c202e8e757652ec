//! Scan core over the development corpus, one thread: prepare + parse + normalize + entities +
//! shingles. Target (DESIGN.md §4): ≥ 20,000 messages/s. Run:
//!
//!     cargo bench --bench scan_core
//!
//! Throughput is reported per message ("elem/s").

#[path = "../tests/common/mod.rs"]
#[allow(dead_code)]
mod common;

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use shrike::message::{parse, prepare, Envelope, Limits};
use shrike::scan::analyze;

fn scan_core(c: &mut Criterion) {
    let corpus = common::load_corpus();
    let limits = Limits::default();
    let envelope = Envelope::default();
    let bytes: usize = corpus.iter().map(|m| m.raw.len()).sum();
    eprintln!(
        "corpus: {} messages, {} bytes, mean {} bytes",
        corpus.len(),
        bytes,
        bytes / corpus.len()
    );

    let mut group = c.benchmark_group("scan_core");
    group.throughput(Throughput::Elements(corpus.len() as u64));
    group.sample_size(20);
    group.measurement_time(Duration::from_secs(15));

    group.bench_function("parse", |b| {
        b.iter(|| {
            for m in &corpus {
                let input = prepare(&m.raw, &limits);
                black_box(parse(&input, &limits).body.normalized.len());
            }
        })
    });
    group.bench_function("full", |b| {
        b.iter(|| {
            for m in &corpus {
                let input = prepare(&m.raw, &limits);
                black_box(analyze(&input, &envelope, &limits).shingles.len());
            }
        })
    });
    group.finish();
}

criterion_group!(benches, scan_core);
criterion_main!(benches);
