//! Runs the scan core over the corpus N times and prints the time per stage. Also the target
//! for profilers: `valgrind --tool=callgrind target/release/examples/stage_times 1`.
//! `cargo run --release --example stage_times -- 5`
#[path = "../tests/common/mod.rs"]
#[allow(dead_code)]
mod common;

use std::time::{Duration, Instant};

use shrike::message::{parse, prepare, Envelope, Limits};

fn main() {
    let rounds: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(3);
    let corpus = common::load_corpus();
    let limits = Limits::default();
    let env = Envelope::default();
    let mut t = [Duration::ZERO; 4];
    let mut n = 0usize;
    for _ in 0..rounds {
        for m in &corpus {
            let s0 = Instant::now();
            let input = prepare(&m.raw, &limits);
            let s1 = Instant::now();
            let parsed = parse(&input, &limits);
            let s2 = Instant::now();
            let entities = shrike::entities::extract(&parsed, &env);
            let s3 = Instant::now();
            n += shrike::shingle::compute(&parsed, &entities, &env).len();
            let s4 = Instant::now();
            for (i, (a, b)) in [(s0, s1), (s1, s2), (s2, s3), (s3, s4)].iter().enumerate() {
                t[i] += *b - *a;
            }
        }
    }
    let msgs = (rounds * corpus.len()) as f64;
    for (name, d) in ["prepare", "parse", "entities", "shingles"].iter().zip(t) {
        println!("{name:10} {:7.1} µs/msg", d.as_secs_f64() * 1e6 / msgs);
    }
    let total: Duration = t.iter().sum();
    println!(
        "total {:.1} µs/msg, {:.0} msgs/s ({n})",
        total.as_secs_f64() * 1e6 / msgs,
        msgs / total.as_secs_f64()
    );
}
