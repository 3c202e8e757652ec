//! The MX farm (scripts/mx_farm.sh): three daemons and a Redis Cluster of three masters and
//! three replicas in network namespaces joined by a bridge, a delay between them, mail through
//! HTTP and a real Postfix. Its functional checks must hold: a burst through one daemon is
//! counted on another, 2,000 racing scans of 1,000 (sender, recipient) pairs count 1,000, a
//! master killed under load fails no scan and counting resumes, a partitioned daemon degrades
//! and recovers without a restart. Its timing targets are printed, not asserted (BENCHMARKS.md
//! has the figures). Needs root (namespaces, Postfix) and the packages scripts/test.sh installs.

use std::process::Command;

#[test]
fn an_mx_farm_shares_counts_survives_a_failover_and_a_partition() {
    let root = env!("CARGO_MANIFEST_DIR");
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new("bash")
        .arg(format!("{root}/scripts/mx_farm.sh"))
        .env("SHRIKE_BIN", env!("CARGO_BIN_EXE_shrike"))
        .env("SECS", "3")
        .env("FARM_DIR", dir.path())
        .output()
        .expect("run scripts/mx_farm.sh");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "the farm failed:\n{text}");
    for check in [
        "PASS: Postfix delivered through daemon 1's milter",
        "PASS: daemon 2 counted daemon 1's burst of 100",
        "PASS: 2,000 racing scans of 1,000 (sender, recipient) pairs on three daemons counted 1,000",
        "PASS: every scan answered during the failover",
        "PASS: counting resumed after the failover",
        "PASS: partitioned: scans say STORE_UNAVAILABLE",
        "PASS: healed: daemon 3 back on the store without a restart",
    ] {
        assert!(text.contains(check), "missing {check:?} in:\n{text}");
    }
    assert!(!text.contains("FAIL:"), "{text}");
    // The namespaces and the bridge are gone afterwards.
    let netns = Command::new("ip").args(["netns", "list"]).output().unwrap();
    assert!(!String::from_utf8_lossy(&netns.stdout).contains("shfarm-"));
}
