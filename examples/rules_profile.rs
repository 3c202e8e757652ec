//! Runs only the Lua rules over pre-analyzed corpus messages: the target for instruction counts
//! of the rules engine without the scan core around it.
//! `valgrind --tool=callgrind --toggle-collect=rules_profile::measured target/release/examples/rules_profile 1 5`
//! (ROUNDS, STRIDE: every STRIDE-th message; RULES_DIR optional third argument; PROFILE_ONLY
//! and PROFILE_BAND below choose messages). Prints the
//! rules' wall time per message too (noisy on a shared machine; compare instruction counts).
#[path = "../tests/common/mod.rs"]
#[allow(dead_code)]
mod common;

use std::sync::Arc;
use std::time::Instant;

use shrike::config::Config;
use shrike::engine::{MessageData, RuleLocation};
use shrike::message::{parse, prepare, Envelope};
use shrike::scan::Scanner;
use shrike::store::{ManualClock, ReputationStore, Store, StoreKey};

/// The calls callgrind counts (`--toggle-collect=rules_profile::measured`).
#[inline(never)]
fn measured(
    rules: &mut shrike::engine::RuleRunner,
    data: &MessageData<'_>,
    sample: u64,
) -> shrike::engine::RuleOutcome {
    rules.run(data, sample)
}

fn main() {
    let mut args = std::env::args().skip(1);
    let rounds: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(1);
    let stride: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(1).max(1);
    let location = args
        .next()
        .map_or(RuleLocation::Embedded, |d| RuleLocation::Dir(d.into()));
    // PROFILE_ONLY=TEXT: only the messages whose "label/name" contains TEXT (one message's rules
    // under callgrind: `PROFILE_ONLY=ham/00670 ... rules_profile 1 1`).
    let only = std::env::var("PROFILE_ONLY").unwrap_or_default();
    let corpus: Vec<_> = common::load_corpus()
        .into_iter()
        .filter(|m| format!("{}/{}", m.label, m.name).contains(&only))
        .step_by(stride)
        .collect();
    let config = Config::default();
    let store: Arc<dyn ReputationStore> =
        Arc::new(Store::new(&config.store, Arc::new(ManualClock::new(1_800_000_000))).unwrap());
    let scanner =
        Scanner::new(&config.scan_settings(), location, Arc::clone(&store)).expect("rules load");
    let mut worker = scanner.worker();
    let env = Envelope::default();
    let inputs: Vec<_> = corpus
        .iter()
        .map(|m| prepare(&m.raw, &config.limits))
        .collect();
    let parsed: Vec<_> = inputs.iter().map(|i| parse(i, &config.limits)).collect();
    let entities: Vec<_> = parsed
        .iter()
        .map(|p| shrike::entities::extract(p, &env))
        .collect();
    let shingles: Vec<_> = parsed
        .iter()
        .zip(&entities)
        .map(|(p, e)| shrike::shingle::compute(p, e, &env))
        .collect();
    let stats: Vec<_> = shingles
        .iter()
        .map(|s| {
            let keys: Vec<StoreKey> = s.iter().map(|s| scanner.key(s)).collect();
            store.lookup_many(&keys)
        })
        .collect();
    let data = |i: usize| MessageData {
        message: &parsed[i],
        entities: &entities[i],
        shingles: &shingles[i],
        stats: &stats[i],
        late: None,
        anomalies: &parsed[i].anomalies,
        envelope: &env,
        now: store.now(),
        max_html_bytes: config.engine.max_html_bytes,
        classifier: None,
        reputation_window: 3,
        observe: false,
        net: None,
        traffic: Default::default(),
    };
    // Build the worker's Lua state outside the measured calls.
    worker.rules().run(&data(0), 0);
    // PROFILE_BAND=LO:HI (percent): only the messages whose rules' time (the fastest of three
    // unmeasured runs) ranks between LO% and HI%, e.g. 40:60 for the messages around the median.
    let mut chosen: Vec<usize> = (0..parsed.len()).collect();
    if let Some((lo, hi)) = std::env::var("PROFILE_BAND").ok().and_then(|b| {
        let (lo, hi) = b.split_once(':')?;
        Some((lo.parse::<usize>().ok()?, hi.parse::<usize>().ok()?))
    }) {
        let mut ranked: Vec<(std::time::Duration, usize)> = (0..parsed.len())
            .map(|i| {
                let fastest = (0..3)
                    .map(|_| {
                        let t0 = Instant::now();
                        worker.rules().run(&data(i), i as u64);
                        t0.elapsed()
                    })
                    .min()
                    .unwrap_or_default();
                (fastest, i)
            })
            .collect();
        ranked.sort();
        let n = ranked.len();
        chosen = ranked[n * lo.min(100) / 100..n * hi.min(100) / 100]
            .iter()
            .map(|&(_, i)| i)
            .collect();
        chosen.sort();
    }
    // SHRIKE_PROFILE_RULE=NAME: that rule's calls go through `profiled_call` (for callgrind's
    // `--toggle-collect=*profiled_call`: the rule's own instructions, in the set as it runs).
    if let Ok(name) = std::env::var("SHRIKE_PROFILE_RULE") {
        let generation = scanner.engine().generation();
        let index = generation.rules.iter().position(|r| r.name == name);
        let index = index.unwrap_or_else(|| panic!("no rule {name}"));
        worker.rules().profile_rule(index);
    }
    let mut hits = 0usize;
    let mut times = Vec::with_capacity(rounds * chosen.len());
    for _ in 0..rounds {
        for &i in &chosen {
            let t0 = Instant::now();
            let outcome = measured(worker.rules(), &data(i), i as u64);
            times.push(t0.elapsed());
            hits += outcome.hits.len();
        }
    }
    times.sort();
    let mean = times.iter().sum::<std::time::Duration>() / times.len().max(1) as u32;
    println!(
        "{} messages x {rounds}: {hits} hits; rules per message: median {:.1} µs, mean {:.1} µs",
        chosen.len(),
        times[times.len() / 2].as_secs_f64() * 1e6,
        mean.as_secs_f64() * 1e6
    );
}
