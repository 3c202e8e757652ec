//! The classifier over the development corpus, one thread. Targets (issue 7): inference
//! ≤ 20 µs per message, an update ≤ 50 µs. Measured apart: feature extraction (tokenizing a
//! scanned message), prediction over extracted features, naive Bayes' probability over the
//! same features, and one training step (FTRL and Bayes' counts). Run:
//!
//!     cargo bench --bench classify

#[path = "../tests/common/mod.rs"]
#[allow(dead_code)]
mod common;

use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use shrike::classify::{Class, Classifier, Features};
use shrike::config::Config;
use shrike::engine::RuleLocation;
use shrike::message::{prepare, Envelope};
use shrike::scan::Scanner;
use shrike::store::{ManualClock, ReputationStore, Store};

fn classify(c: &mut Criterion) {
    let corpus = common::load_corpus();
    let config = Config::default();
    let store: Arc<dyn ReputationStore> =
        Arc::new(Store::new(&config.store, Arc::new(ManualClock::new(1_800_000_000))).unwrap());
    let model = Arc::new(Classifier::new(&config.classifier));
    let scanner = Scanner::with_classifier(
        &config.scan_settings(),
        RuleLocation::Embedded,
        store,
        model.clone(),
    )
    .expect("rules load");
    let limits = scanner.limits().clone();
    let envelope = Envelope::default();
    let inputs: Vec<_> = corpus.iter().map(|m| prepare(&m.raw, &limits)).collect();
    let mut worker = scanner.worker();
    let scanned: Vec<_> = inputs.iter().map(|i| worker.scan(i, &envelope)).collect();
    let features: Vec<Features> = scanned
        .iter()
        .map(|s| scanner.features(s).into_owned())
        .collect();
    let classes: Vec<Class> = corpus
        .iter()
        .map(|m| {
            if m.label == "spam" {
                Class::Spam
            } else {
                Class::Ham
            }
        })
        .collect();
    // A trained model: predictions read populated weights, as in production.
    for (f, class) in features.iter().zip(&classes) {
        model.train(f, *class, None);
    }
    let mean = features.iter().map(Features::len).sum::<usize>() / features.len();
    eprintln!(
        "{} messages, {mean} features each on average, table 2^{} weights ({} MiB)",
        features.len(),
        config.classifier.table_bits,
        (17usize << config.classifier.table_bits) >> 20
    );

    let mut group = c.benchmark_group("classify");
    group.throughput(Throughput::Elements(corpus.len() as u64));
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(10));
    group.bench_function("extract", |b| {
        b.iter(|| {
            for s in &scanned {
                // No rule weighed features in this scan (the cold start): `features` builds them.
                black_box(scanner.features(black_box(s)).len());
            }
        })
    });
    group.bench_function("predict", |b| {
        b.iter(|| {
            for f in &features {
                black_box(model.probability(black_box(f)));
            }
        })
    });
    group.bench_function("bayes", |b| {
        b.iter(|| {
            for f in &features {
                black_box(model.bayes(black_box(f)));
            }
        })
    });
    group.bench_function("train", |b| {
        b.iter(|| {
            for (f, class) in features.iter().zip(&classes) {
                black_box(model.train(black_box(f), *class, None));
            }
        })
    });
    group.finish();
}

criterion_group!(benches, classify);
criterion_main!(benches);
