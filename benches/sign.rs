//! DKIM signing cost per message, one thread: RSA-2048 and Ed25519 keys from `sign::keygen`,
//! each signing every message of the development corpus with its From rewritten to the key's
//! domain (what `[dkim_signing]` adds to an authenticated sender's scan). Run:
//!
//!     cargo bench --bench sign
//!
//! Throughput is reported per message ("elem/s").

#[path = "../tests/common/mod.rs"]
#[allow(dead_code)]
mod common;

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use shrike::sign::{keygen, DkimSigningConfig, KeyKind, Outcome, Signer};

fn sign(c: &mut Criterion) {
    let corpus = common::load_corpus();
    let dir = tempfile::tempdir().unwrap();
    let mut group = c.benchmark_group("sign");
    group.throughput(Throughput::Elements(corpus.len() as u64));
    group.measurement_time(Duration::from_secs(20));
    group.sample_size(10);
    for (name, kind) in [
        ("rsa2048", KeyKind::Rsa(2048)),
        ("ed25519", KeyKind::Ed25519),
    ] {
        let key = keygen(kind, "example.org", "s").unwrap();
        std::fs::write(dir.path().join(format!("example.org.{name}.key")), &key.pem).unwrap();
        let signer = Signer::new(&DkimSigningConfig {
            enabled: true,
            selector: name.into(),
            keys: format!("{}/$domain.$selector.key", dir.path().display()),
            ..DkimSigningConfig::default()
        })
        .unwrap()
        .unwrap();
        let user = Some("alice@example.org");
        let from = Some("alice@example.org");
        group.bench_function(name, |b| {
            b.iter(|| {
                for m in &corpus {
                    let out = signer.sign(black_box(&m.raw), user, from);
                    assert!(matches!(out, Outcome::Signed { .. }));
                }
            })
        });
    }
    group.finish();
}

criterion_group!(benches, sign);
criterion_main!(benches);
