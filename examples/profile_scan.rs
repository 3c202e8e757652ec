//! Runs the scan core over the corpus N times, for profilers: `cargo run --release --example
//! profile_scan -- 5`.
#[path = "../tests/common/mod.rs"]
mod common;

fn main() {
    let rounds: usize = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(3);
    let corpus = common::load_corpus();
    let limits = shrike::message::Limits::default();
    let env = shrike::message::Envelope::default();
    let start = std::time::Instant::now();
    let mut n = 0usize;
    for _ in 0..rounds {
        for m in &corpus {
            let input = shrike::message::prepare(&m.raw, &limits);
            n += shrike::scan::analyze(&input, &env, &limits).shingles.len();
        }
    }
    let secs = start.elapsed().as_secs_f64();
    println!("{} messages in {secs:.2}s: {:.0}/s ({n} shingles)", rounds * corpus.len(), (rounds * corpus.len()) as f64 / secs);
}
