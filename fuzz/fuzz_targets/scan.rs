//! Fuzzes the whole scan of a message: `message::prepare`, MIME parsing, normalization, HTML
//! to text, entities, shingles, store lookups, the embedded default rules (Lua, through the
//! `msg` view) and the verdict, as a scan worker of the daemon runs them.
//!
//! Input: one envelope byte, then the raw message. Envelope bits choose whether a client IP
//! (bit 0), HELO (1), MAIL FROM (2), the client's host name and authenticated user (3), the
//! queue id and Deliver-To (4) and 0-7 recipients (bits 5-7) are present, all taken from the
//! message's first bytes. The
//! target checks that nothing panics, that the verdict's score is a finite number, that no
//! rule ran out of its CPU budget, and that the store updates the scan asks for name only this
//! message's shingles.
#![no_main]

use std::cell::RefCell;
use std::sync::Arc;

use libfuzzer_sys::fuzz_target;
use shrike::config::Config;
use shrike::engine::RuleLocation;
use shrike::message::{prepare, Envelope};
use shrike::scan::{ScanWorker, Scanner};
use shrike::store::{ManualClock, ReputationStore, Store};

thread_local! {
    static WORKER: RefCell<(ScanWorker, Config)> = RefCell::new({
        let config = Config::default();
        let mut store_config = config.store.clone();
        // Small enough to stay under libFuzzer's RSS limit, large enough never to evict here.
        store_config.max_keys = 1 << 20;
        let store: Arc<dyn ReputationStore> = Arc::new(
            Store::new(&store_config, Arc::new(ManualClock::new(1_800_000_000))).unwrap(),
        );
        let scanner = Scanner::new(&config.scan_settings(), RuleLocation::Embedded, store).expect("rules load");
        (scanner.worker(), config)
    });
}

fuzz_target!(|data: &[u8]| {
    let Some((&bits, raw)) = data.split_first() else {
        return;
    };
    let word = |i: usize| -> String {
        String::from_utf8_lossy(raw.get(i * 8..(i + 1) * 8).unwrap_or(b"x")).into_owned()
    };
    let envelope = Envelope {
        client_ip: (bits & 1 != 0).then(|| [10, 0, bits, 7].into()),
        helo: (bits & 2 != 0).then(|| word(0)),
        mail_from: (bits & 4 != 0).then(|| format!("{}@{}", word(1), word(2))),
        rcpt_to: (0..(bits >> 5))
            .map(|i| format!("{}@x.test", word(3 + i as usize)))
            .collect(),
        hostname: (bits & 8 != 0).then(|| format!("{}.example", word(10))),
        user: (bits & 8 != 0).then(|| word(11)),
        queue_id: (bits & 16 != 0).then(|| word(12)),
        deliver_to: (bits & 16 != 0).then(|| format!("{}@x.test", word(13))),
    };
    WORKER.with(|w| {
        let (worker, config) = &mut *w.borrow_mut();
        let input = prepare(raw, &config.limits);
        let scanned = worker.scan(&input, &envelope);
        assert!(
            scanned.verdict.score.is_finite(),
            "score {}",
            scanned.verdict.score
        );
        // The rules run with their CPU budgets on (20 ms a rule, 100 ms a message; 20 times
        // that in this build with debug assertions): a message that makes a default rule run
        // out is a cost any sender can drive, and a way to skip the rules after it.
        for stopped in ["RULE_TIMEOUT", "RULES_SKIPPED"] {
            assert!(
                !scanned.verdict.symbols.contains_key(stopped),
                "{stopped}: {:?}",
                scanned.verdict.symbols.get(stopped)
            );
        }
        let keys: std::collections::HashSet<u64> =
            scanned.analysis.shingles.iter().map(|s| s.hash).collect();
        for inc in &scanned.updates.increments {
            assert!(
                keys.contains(&inc.key.hash),
                "update for a key the message does not have"
            );
        }
        worker.scanner().apply(&scanned.updates);
    });
});
