//! The command line's own messages, through the binary: configuration errors said once and in
//! words (the option named, no Rust type names), `[http]` limits below their minimum refused,
//! a closed output pipe ends the command quietly, and `config defaults` prints every option,
//! those without a default commented out, and `config check` loads the rule set. (`shrike history`'s flag names in its errors are
//! tests/history.rs's.)

#[allow(dead_code)]
#[path = "common/daemon.rs"]
mod daemon;

use std::path::Path;
use std::process::{Command, Output, Stdio};

fn shrike(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_shrike"))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run shrike")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// `config check` of a file with `text`: (success, stderr).
fn check(dir: &Path, text: &str) -> (bool, String) {
    let path = dir.join("shrike.toml");
    std::fs::write(&path, text).unwrap();
    let o = shrike(&["--config", path.to_str().unwrap(), "config", "check"]);
    (o.status.success(), stderr(&o))
}

#[test]
fn configuration_errors_are_said_once_in_words() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.toml");
    let o = shrike(&["--config", missing.to_str().unwrap(), "config", "check"]);
    assert!(!o.status.success());
    let said = stderr(&o);
    assert_eq!(
        said.matches("No such file or directory").count(),
        1,
        "{said}"
    );
    assert_eq!(said.lines().count(), 1, "{said}");

    for (text, option, expected) in [
        (
            "[http]\nmax_headers = \"x\"\n",
            "http.max_headers",
            "a whole number",
        ),
        (
            "[http]\nmax_body_bytes = -1\n",
            "http.max_body_bytes",
            "a whole number, 0 or more",
        ),
        (
            "[verdict]\nreject = \"high\"\n",
            "verdict.reject",
            "expected a number",
        ),
        (
            "[store.redis]\ntimeout_ms = true\n",
            "store.redis.timeout_ms",
            "a whole number",
        ),
    ] {
        let (ok, said) = check(dir.path(), text);
        assert!(!ok, "{text}");
        assert!(said.contains(option), "{text}: {said}");
        assert!(said.contains(expected), "{text}: {said}");
        for rust in ["usize", "u64", "u32", "f64", "i64"] {
            assert!(!said.contains(rust), "{text}: {said}");
        }
        assert_eq!(said.lines().count(), 1, "{said}");
    }
}

/// Values the HTTP parser would raise silently are refused, naming the minimum.
#[test]
fn http_limits_below_their_minimum_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (ok, said) = check(dir.path(), "[http]\nmax_headers = 5\n");
    assert!(!ok);
    assert!(
        said.contains("http.max_headers must be at least 16, got 5"),
        "{said}"
    );
    let (ok, said) = check(dir.path(), "[http]\nmax_header_bytes = 4096\n");
    assert!(!ok);
    assert!(
        said.contains("http.max_header_bytes must be at least 8192, got 4096"),
        "{said}"
    );
    let (ok, said) = check(
        dir.path(),
        "[http]\nmax_headers = 16\nmax_header_bytes = 8192\n",
    );
    assert!(ok, "{said}");
}

/// `shrike rules list | head`: the reader leaves early; shrike ends without a word and with
/// success, as a C tool stopped by SIGPIPE does not complain either.
#[test]
fn a_closed_output_pipe_ends_the_command_quietly() {
    for args in [
        &["rules", "list"][..],
        &["rules", "list", "--json"],
        &["config", "defaults"],
    ] {
        // A pipe whose reader is gone before shrike writes: every write fails with EPIPE.
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let o = Command::new(env!("CARGO_BIN_EXE_shrike"))
            .args(args)
            .stdin(Stdio::null())
            .stdout(writer)
            .stderr(Stdio::piped())
            .output()
            .unwrap();
        let said = stderr(&o);
        assert!(said.is_empty(), "{args:?}: {said}");
        assert!(o.status.success(), "{args:?}: {:?}", o.status);
    }
}

/// `config defaults` prints every option: those with a default as they are (the text parses
/// to the defaults), those without one commented out in their section.
#[test]
fn config_defaults_prints_the_options_without_a_default_commented() {
    let o = shrike(&["config", "defaults"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = String::from_utf8(o.stdout).unwrap();
    let parsed: shrike::config::Config = toml::from_str(&text).unwrap();
    assert_eq!(parsed, shrike::config::Config::default());
    let mut section = "";
    let mut commented = Vec::new();
    for line in text.lines() {
        if let Some(name) = line.strip_prefix('[') {
            section = name.trim_matches(['[', ']']).split(']').next().unwrap();
        }
        if let Some((key, _)) = line.strip_prefix("# ").and_then(|l| l.split_once(" = ")) {
            commented.push(format!("{section}.{key}"));
        }
    }
    for option in [
        "verdict.soft_reject",
        "verdict.rewrite_subject",
        "http.password",
        "dns.enabled",
        "classifier.autolearn_spam_at",
        "classifier.autolearn_ham_at",
        "access.password_hash",
        "access.read_password_hash",
        "store.redis.password",
    ] {
        assert!(
            commented.contains(&option.to_string()),
            "{option} not printed: {commented:?}"
        );
    }
}

/// `config check` loads the rule set `serve` would (systemd's ExecStartPre): a broken local
/// rule file fails it, naming the file and line, before anything would start.
#[test]
fn config_check_fails_on_a_rule_set_that_does_not_load() {
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("rules.d");
    std::fs::create_dir_all(&rules).unwrap();
    let o = shrike(&["config", "check", "--rules", rules.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("rule set ok"), "{}", stderr(&o));
    std::fs::write(
        rules.join("50_local.lua"),
        "rule { name = \"LOCAL_BROKEN\", score = 1.0, check = function(msg) return end\n",
    )
    .unwrap();
    let o = shrike(&["config", "check", "--rules", rules.to_str().unwrap()]);
    assert!(!o.status.success());
    let said = stderr(&o);
    assert!(said.contains("50_local.lua:2"), "{said}");
    assert!(o.stdout.is_empty(), "nothing printed as if it were fine");
}

/// The daemon and `config check` (systemd's ExecStartPre) refuse the same files with the same
/// words, and a file with mistakes in several sections gets all of them listed at once.
#[test]
fn config_check_and_serve_refuse_alike_and_list_every_mistake() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("shrike.toml");
    let data = dir.path().join("data");
    for text in [
        "[http]\nmax_headers = 5\n",
        "[history]\nflush_ms = 0\n",
        "[access]\nadmin_networks = [\"nonsense\"]\n",
        "[dns]\ntimeout_ms = 0\n",
        "[log]\nlevel = \"x=[\"\n",
        "[milter]\nmax_message_bytes = 0\n",
        "[verdict]\nreject = 1.0\nadd_header = 5.0\n",
        "[scores]\nNO_SUCH_SYMBOL = \"high\"\n",
    ] {
        std::fs::write(&path, text).unwrap();
        let (check, serve) = daemon::refused_by_check_and_serve(&path, &data);
        assert!(check.contains("invalid config"), "{text}");
        assert_eq!(check, serve, "{text}");
        assert!(!data.exists(), "serve started on {text}");
    }

    let (ok, said) = check(
        dir.path(),
        "[http]\nmax_headers = 5\n[history]\nflush_ms = 0\n[log]\nlevel = \"x=[\"\n",
    );
    assert!(!ok);
    assert!(said.contains("3 errors:"), "{said}");
    for each in [
        "http.max_headers must be at least 16",
        "history.flush_ms must be 1..=1000",
        "[log] level \"x=[\"",
    ] {
        assert_eq!(said.matches(each).count(), 1, "{each}: {said}");
    }
}
