//! luacheck over the rules: the shipped rules and library are clean under the repository's
//! `.luacheckrc`, and `shrike rules check` runs luacheck on a rule directory and fails on its
//! warnings. luacheck is Debian's `lua-check`, which scripts/test.sh installs: without it these
//! tests fail rather than pass unchecked.

use std::path::Path;
use std::process::Command;

fn luacheck_installed() {
    let found = Command::new("luacheck").arg("--version").output();
    assert!(
        found.is_ok_and(|o| o.status.success()),
        "luacheck is not installed (Debian: apt-get install lua-check; scripts/test.sh does)"
    );
}

#[test]
fn shipped_rules_and_library_are_luacheck_clean() {
    luacheck_installed();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = Command::new("luacheck")
        .current_dir(root)
        .args(["--no-color", "--codes", "rules", "lua"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

#[test]
fn rules_check_fails_on_luacheck_warnings() {
    luacheck_installed();
    let dir = tempfile::tempdir().unwrap();
    let check = |dir: &Path| {
        let out = Command::new(env!("CARGO_BIN_EXE_shrike"))
            .args(["rules", "check"])
            .arg(dir)
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    };
    // Clean: shrike's globals (rule, re, log…) are known to luacheck.
    std::fs::write(
        dir.path().join("a.lua"),
        "local find = string.find\n\
         rule { name = 'LINT_OK', score = 1, check = function(msg)\n\
           log.debug('x') return find(msg:subject(), 'x', 1, true) ~= nil end }\n",
    )
    .unwrap();
    let (ok, text) = check(dir.path());
    assert!(ok, "{text}");
    assert!(text.contains("luacheck: ok"), "{text}");
    // An unused variable and a misspelt global: the set loads, but the check fails.
    std::fs::write(
        dir.path().join("b.lua"),
        "rule { name = 'LINT_BAD', score = 1, check = function(msg)\n\
           local unused = 1 return mgs == nil end }\n",
    )
    .unwrap();
    let (ok, text) = check(dir.path());
    assert!(!ok, "{text}");
    assert!(text.contains(": ok"), "the set itself loads: {text}");
    assert!(text.contains("(W211) unused variable 'unused'"), "{text}");
    assert!(
        text.contains("(W113) accessing undefined variable 'mgs'"),
        "{text}"
    );
}

#[test]
fn rules_check_warns_when_no_negative_test_is_a_near_miss() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("mailer.lua"),
        "local find = string.find\n\
         rule { name = 'MASS_MAILER', score = 1, check = function(msg)\n\
           local m = msg:mailer()\n\
           if not m then return end\n\
           local l = string.lower(m)\n\
           if find(l, 'massmailer', 1, true) then\n\
             return true\n\
           end\n\
         end }\n",
    )
    .unwrap();
    let tests = dir.path().join("tests");
    std::fs::create_dir(&tests).unwrap();
    let msg = |mailer: &str| {
        format!(
            "From: a@example.org\nTo: b@example.org\nSubject: s\nMessage-ID: <1@example.org>\n\
             Date: Fri, 27 Nov 2026 09:30:00 +0000\n{mailer}\nhello\n"
        )
    };
    std::fs::write(
        tests.join("hit.test"),
        format!(
            "expect MASS_MAILER\n\n{}",
            msg("X-Mailer: MassMailer 2.1\n")
        ),
    )
    .unwrap();
    // A negative that cannot fail: no X-Mailer at all, so the check stops at its first test.
    std::fs::write(
        tests.join("plain.test"),
        format!("expect-not MASS_MAILER\n\n{}", msg("")),
    )
    .unwrap();
    let check = || {
        let out = Command::new(env!("CARGO_BIN_EXE_shrike"))
            .args(["rules", "check", "--no-default-rules"])
            .arg(dir.path())
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    };
    let (ok, text) = check();
    assert!(ok, "a warning, not a failure: {text}");
    let warn = text
        .lines()
        .find(|l| l.starts_with("warn MASS_MAILER"))
        .unwrap_or_else(|| panic!("no warning in:\n{text}"));
    assert!(
        warn.contains("1 expect-not test(s) stop where plain mail stops"),
        "{warn}"
    );
    assert!(
        warn.contains("lines 5-6"),
        "the lines past the first test: {warn}"
    );
    // A near miss: a mailer, not that one.
    std::fs::write(
        tests.join("near.test"),
        format!(
            "expect-not MASS_MAILER\n\n{}",
            msg("X-Mailer: Thunderbird 115.3\n")
        ),
    )
    .unwrap();
    let (ok, text) = check();
    assert!(ok, "{text}");
    assert!(!text.contains("warn MASS_MAILER"), "{text}");
}
