//! Runs the scan core over the corpus N times, for profilers (perf, valgrind --tool=callgrind):
//! `cargo run --release --example profile_scan -- 5`.
#[path = "../tests/common/mod.rs"]
mod common;

use std::time::Instant;

use shrike::message::{prepare, Envelope, Limits};

fn main() {
    let rounds: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(3);
    let corpus = common::load_corpus();
    let limits = Limits::default();
    let env = Envelope::default();
    let start = Instant::now();
    let mut n = 0usize;
    for _ in 0..rounds {
        for m in &corpus {
            let input = prepare(&m.raw, &limits);
            n += shrike::scan::analyze(&input, &env, &limits).shingles.len();
        }
    }
    let msgs = (rounds * corpus.len()) as f64;
    println!(
        "{msgs} messages: {:.0}/s ({n} shingles)",
        msgs / start.elapsed().as_secs_f64()
    );
}
