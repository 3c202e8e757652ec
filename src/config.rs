//! Typed configuration: serde + TOML, embedded defaults, validation.
//!
//! Owns: the shape of `shrike.toml`: which section holds which module's options, reading the
//! file, and running each module's checks. The option types, their defaults and their checks
//! live in the modules they configure (`scan`, `verdict`, `engine`, `classify`, `store`,
//! `server`, `proto::milter`); this module sits above them and composes what each command
//! takes (`ScanSettings`, `ServeSettings`, `LearnSettings`, `ReplaySettings`), and only
//! the binary (`main.rs`, `cli/`) knows it. Never touches: sockets, Lua.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::antivirus::{AntivirusConfig, AntivirusConfigError};
use crate::auth::AuthConfig;
use crate::classify::ClassifierConfig;
use crate::dns::{DnsConfig, DnsConfigError};
use crate::dnsbl::{DnsblConfigError, ZoneConfig};
use crate::engine::{EngineConfig, OverrideError, Overrides, RulesConfig};
use crate::greylist::GreylistConfig;
use crate::history::{HistoryConfig, HistoryConfigError};
use crate::learn::LearnSettings;
use crate::message::Limits;
use crate::quarantine::{QuarantineConfig, QuarantineConfigError};
use crate::replay::ReplaySettings;
use crate::scan::{ScanSettings, TrafficConfig};
use crate::secrets::{redact, redact_all, MASK};
use crate::server::access::AccessConfig;
use crate::server::http::HttpConfig;
use crate::server::milter::MilterConfig;
use crate::server::spamd::SpamdConfig;
use crate::server::{Reread, ServeSettings, ServerConfig};
use crate::settings::{SettingsEntry, SettingsError, SettingsTable};
use crate::store::{PersistConfig, StoreConfig, StoreConfigError};
use crate::verdict::{ActionsConfig, VerdictConfig};

/// Every option with its default, commented (docs/shrike.toml): what `shrike config defaults`
/// prints. Options without a default are in it commented out; a test keeps it equal to
/// `Config::default()` and holding every such option.
pub const REFERENCE: &str = include_str!("../docs/shrike.toml");

/// The whole configuration. Every field has a default, so an empty file is valid.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Limits on the work done per message.
    pub limits: Limits,
    /// The reputation store: resolutions, windows, size.
    pub store: StoreConfig,
    /// Durability of the store: fsync policy, flush and snapshot intervals.
    pub persist: PersistConfig,
    /// Lua limits: CPU budgets, memory, caches.
    pub engine: EngineConfig,
    /// Action thresholds and what the store counts as spam or ham.
    pub verdict: VerdictConfig,
    /// Store namespace and unique-count period of the scanned traffic.
    pub scan: TrafficConfig,
    /// The daemon: workers, queue, state directory, shutdown.
    pub server: ServerConfig,
    /// The HTTP listener and its limits.
    pub http: HttpConfig,
    /// The milter listener, its limits and what each action does to the MTA.
    pub milter: MilterConfig,
    /// The spamd-protocol listener (SpamAssassin's spamc), off by default.
    pub spamd: SpamdConfig,
    /// Who may do what: admin and read-only networks, trusted proxies, password hashes.
    pub access: AccessConfig,
    /// The online classifier: table size, FTRL parameters, cold start, autolearn.
    pub classifier: ClassifierConfig,
    /// DNS for the network checks: resolvers, timeouts, cache, the per-message budget.
    pub dns: DnsConfig,
    /// Mail authentication (SPF, DKIM, DMARC, ARC): the authserv-id.
    pub auth: AuthConfig,
    /// DNS block lists, none by default (`[[dnsbl]]`, one per zone).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub dnsbl: Vec<ZoneConfig>,
    /// The decision history: every verdict and learn of the daemon, on disk.
    pub history: HistoryConfig,
    /// The quarantine: the bodies of refused messages, kept for release and learning.
    pub quarantine: QuarantineConfig,
    /// Log lines: text or JSON, the level.
    pub log: crate::logging::LogConfig,
    /// DKIM signing of authenticated senders' mail: keys, selector, headers.
    pub dkim_signing: crate::sign::DkimSigningConfig,
    /// ARC sealing of accepted inbound mail.
    pub arc: crate::sign::ArcConfig,
    /// Local score changes to the rule set: `SYMBOL = score`, 0 turns the symbol off.
    pub scores: BTreeMap<String, f64>,
    /// Rules or symbols turned off.
    pub rules: RulesConfig,
    /// Action thresholds in rspamd's form; each one given replaces `[verdict]`'s.
    pub actions: ActionsConfig,
    /// Greylisting of unknown (network, sender, recipient) triples.
    pub greylist: GreylistConfig,
    /// Antivirus over clamd, off until `servers` names one.
    pub antivirus: AntivirusConfig,
    /// Outbound mail: which is our users' own, its thresholds, replies, per-user limits.
    pub outbound: crate::outbound::OutboundConfig,
    /// Per-recipient settings (`[[settings]]`), read again with `[scores]` on a reload.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub settings: Vec<SettingsEntry>,
    /// The file this configuration was read from (SIGHUP reads its `[scores]` again).
    #[serde(skip)]
    pub source: Option<PathBuf>,
}

/// Why a configuration could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The cause is in the message, not a `source`: an error printed with its chain would
    /// show it twice.
    #[error("cannot read config {path}: {error}")]
    Read {
        path: PathBuf,
        error: std::io::Error,
    },
    /// `message` names the line and column; it does not quote the file, which may hold
    /// passwords.
    #[error("invalid config {path}: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("invalid config: {0}")]
    Scan(crate::scan::SettingsError),
    #[error("invalid config: {0}")]
    Store(StoreConfigError),
    #[error("invalid config: {0}")]
    Server(crate::server::SettingsError),
    #[error("invalid config: {0}")]
    Dns(DnsConfigError),
    #[error("invalid config: {0}")]
    Dnsbl(DnsblConfigError),
    #[error("invalid config: {0}")]
    Auth(crate::auth::AuthConfigError),
    #[error("invalid config: {0}")]
    History(HistoryConfigError),
    #[error("invalid config: {0}")]
    Quarantine(QuarantineConfigError),
    #[error("invalid config: {0}")]
    Overrides(OverrideError),
    #[error("invalid config: {0}")]
    Log(crate::logging::LogConfigError),
    #[error("invalid config: {0}")]
    Sign(crate::sign::SignConfigError),
    #[error("invalid config: {0}")]
    Settings(SettingsError),
    #[error("invalid config: {0}")]
    Antivirus(AntivirusConfigError),
    /// More than one section is wrong: each on its own line.
    #[error("{}", list(.0))]
    Many(Vec<ConfigError>),
}

fn list(errors: &[ConfigError]) -> String {
    let lines: Vec<String> = errors.iter().map(ToString::to_string).collect();
    format!("{} errors:\n  {}", lines.len(), lines.join("\n  "))
}

impl Config {
    /// Reads and validates a TOML file.
    pub fn from_file(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|error| ConfigError::Read {
            path: path.to_path_buf(),
            error,
        })?;
        let mut config: Config = toml::from_str(&text).map_err(|e| ConfigError::Parse {
            path: path.to_path_buf(),
            message: parse_message(&text, &e),
        })?;
        config.actions.apply(&mut config.verdict);
        config.source = Some(path.to_path_buf());
        config.validate()?;
        Ok(config)
    }

    /// This configuration as `shrike config check` prints it: every password `***` and every
    /// URL's password masked, so that the output can go into a ticket or a log.
    pub fn redacted(&self) -> Config {
        let mut c = self.clone();
        for password in [
            &mut c.http.password,
            &mut c.store.redis.password,
            &mut c.access.password_hash,
            &mut c.access.read_password_hash,
        ]
        .into_iter()
        .flatten()
        {
            *password = MASK.to_string();
        }
        c.store.redis.urls = redact_all(&c.store.redis.urls);
        c
    }

    /// The `[scores]`, `[rules]` and `[[settings]]` changes to the rule set.
    pub fn overrides(&self) -> Result<Overrides, ConfigError> {
        let origin = self.source.as_ref().map(|p| p.display().to_string());
        let overrides =
            Overrides::new(&self.scores, &self.rules, origin).map_err(ConfigError::Overrides)?;
        if self.settings.is_empty() {
            return Ok(overrides);
        }
        // Symbols the DNS lists score themselves are known to the settings' symbol check.
        let listed = crate::dnsbl::resolve_all(&self.dnsbl)
            .map_err(ConfigError::Dnsbl)?
            .into_iter()
            .flat_map(|z| {
                let codes: Vec<String> = z.codes.into_iter().map(|(_, s)| s).collect();
                codes
                    .into_iter()
                    .chain(z.scores.into_keys())
                    .chain([z.unknown_symbol, z.blocked_symbol])
            })
            .collect();
        let table = SettingsTable::new(&self.settings, &self.verdict, listed)
            .map_err(ConfigError::Settings)?;
        Ok(overrides.with_settings(table))
    }

    /// What a scanner is configured by.
    pub fn scan_settings(&self) -> ScanSettings {
        ScanSettings {
            limits: self.limits.clone(),
            verdict: self.verdict.clone(),
            traffic: self.scan.clone(),
            engine: self.engine.clone(),
            classifier: self.classifier.clone(),
            // (`validate` refuses the overrides that cannot be built)
            overrides: self.overrides().unwrap_or_default(),
            greylist: self.greylist.clone(),
            antivirus: self.antivirus.clone(),
            outbound: self.outbound.clone(),
        }
    }

    /// What `shrike serve` is configured by.
    pub fn serve_settings(&self) -> ServeSettings {
        ServeSettings {
            server: self.server.clone(),
            http: self.http.clone(),
            milter: self.milter.clone(),
            spamd: self.spamd.clone(),
            access: self.access.clone(),
            store: self.store.clone(),
            persist: self.persist.clone(),
            history: self.history.clone(),
            quarantine: self.quarantine.clone(),
            dns: self.dns.clone(),
            dnsbl: self.dnsbl.clone(),
            auth: self.auth.clone(),
            scan: self.scan_settings(),
            dkim_signing: self.dkim_signing.clone(),
            arc: self.arc.clone(),
            reread: self.source.clone().map(|path| Reread {
                path,
                read: reread_overrides,
            }),
        }
    }

    /// What `shrike learn` is configured by.
    pub fn learn_settings(&self) -> LearnSettings {
        LearnSettings {
            data_dir: self.server.data_dir.clone(),
            workers: self.server.workers,
            store: self.store.clone(),
            persist: self.persist.clone(),
            scan: self.scan_settings(),
        }
    }

    /// What `shrike replay` is configured by.
    pub fn replay_settings(&self) -> ReplaySettings {
        ReplaySettings {
            scan: self.scan_settings(),
            store: self.store.clone(),
            sweep_cycle_secs: self.server.sweep_cycle_secs,
        }
    }

    /// Checks values that parse but make no sense: each module's own checks.
    pub fn validate(&self) -> Result<(), ConfigError> {
        // Every section is checked, so that `config check` lists each mistake at once instead
        // of one a run (a section still stops at its own first).
        let mut errors: Vec<ConfigError> = [
            self.scan_settings().validate().map_err(ConfigError::Scan),
            self.store.validate().map_err(ConfigError::Store),
            crate::server::validate(
                &self.server,
                &self.http,
                &self.milter,
                &self.spamd,
                self.limits.max_message_bytes,
            )
            .map_err(ConfigError::Server),
            self.access
                .validate()
                .map_err(|e| ConfigError::Server(e.into())),
            self.dns.validate().map_err(ConfigError::Dns),
            crate::dnsbl::resolve_all(&self.dnsbl)
                .map(drop)
                .map_err(ConfigError::Dnsbl),
            self.auth.validate().map_err(ConfigError::Auth),
            self.history.validate().map_err(ConfigError::History),
            self.quarantine.validate().map_err(ConfigError::Quarantine),
            self.antivirus
                .validate(self.server.scan_timeout_ms)
                .map_err(ConfigError::Antivirus),
            self.log.validate().map_err(ConfigError::Log),
            self.outbound
                .fits_windows(&self.store.windows_secs)
                .map_err(|e| ConfigError::Scan(e.into())),
            // The listed domains' keys are read here, so that `config check` finds an
            // unreadable one before the daemon does.
            crate::sign::Signer::new(&self.dkim_signing)
                .map(drop)
                .map_err(ConfigError::Sign),
            crate::sign::Sealer::new(&self.arc)
                .map(drop)
                .map_err(ConfigError::Sign),
            self.overrides().map(drop),
        ]
        .into_iter()
        .filter_map(Result::err)
        .collect();
        match errors.len() {
            0 => Ok(()),
            1 => Err(errors.remove(0)),
            _ => Err(ConfigError::Many(errors)),
        }
    }
}

/// A reload's `[scores]` and `[rules]`: the file at `path` read and checked whole, as at start
/// (`Reread::read`, so that `server` need not know this module).
fn reread_overrides(path: &Path) -> Result<Overrides, String> {
    Config::from_file(path)
        .and_then(|c| c.overrides())
        .map_err(|e| e.to_string())
}

/// A TOML error as `line L, column C (section.key): what`, without the excerpt of the file
/// `toml` quotes (the line may set a password), with any URL's password in the message masked
/// (serde quotes a value of the wrong type) and Rust's type names said in words.
fn parse_message(text: &str, e: &toml::de::Error) -> String {
    let what = readable_types(&redact(e.message().trim()));
    let Some(at) = e.span().map(|s| s.start.min(text.len())) else {
        return what;
    };
    let before = text.get(..at).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    match key_at(text, at) {
        Some(key) => format!("line {line}, column {column} ({key}): {what}"),
        None => format!("line {line}, column {column}: {what}"),
    }
}

/// serde names the type it expected as Rust spells it (`expected usize`); an operator reads
/// what kind of value to write instead.
fn readable_types(message: &str) -> String {
    const WORDS: [(&str, &str); 12] = [
        ("usize", "a whole number, 0 or more"),
        ("u64", "a whole number, 0 or more"),
        ("u32", "a whole number, 0 or more"),
        ("u16", "a whole number from 0 to 65535"),
        ("u8", "a whole number from 0 to 255"),
        ("isize", "a whole number"),
        ("i64", "a whole number"),
        ("i32", "a whole number"),
        ("i16", "a whole number"),
        ("i8", "a whole number"),
        ("f64", "a number"),
        ("f32", "a number"),
    ];
    let mut out = message.to_string();
    for (rust, words) in WORDS {
        for lead in ["expected ", "expected an ", "expected a "] {
            let from = format!("{lead}{rust}");
            if let Some(i) = out.find(&from) {
                let end = i + from.len();
                // Only the whole word: `u8` is not the start of `u16`.
                if out[end..].starts_with(|c: char| c.is_ascii_alphanumeric()) {
                    continue;
                }
                out.replace_range(i..end, &format!("expected {words}"));
            }
        }
    }
    out
}

/// The option the byte at `at` belongs to, as `section.key`: the key of its line (text before
/// `=`) under the last `[section]` header before it. Names only, never values.
fn key_at(text: &str, at: usize) -> Option<String> {
    let start = text[..at].rfind('\n').map_or(0, |i| i + 1);
    let line = text[start..].lines().next().unwrap_or_default();
    let key = line.split_once('=')?.0.trim();
    let is_name = |s: &str| {
        !s.is_empty()
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
    };
    if !is_name(key) {
        return None;
    }
    let section = text[..start].lines().rev().find_map(|l| {
        let l = l.trim();
        let name = l.strip_prefix('[')?.trim_start_matches('[');
        let name = name.split(']').next()?.trim();
        is_name(name).then_some(name)
    });
    Some(match section {
        Some(section) => format!("{section}.{key}"),
        None => key.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_file_gives_defaults() {
        let c: Config = toml::from_str("").unwrap();
        assert_eq!(c, Config::default());
        assert!(c.validate().is_ok());
    }

    #[test]
    fn values_override_and_unknown_keys_fail() {
        let c: Config = toml::from_str("[limits]\nmax_parts = 10\n").unwrap();
        assert_eq!(c.limits.max_parts, 10);
        assert_eq!(c.limits.max_depth, Limits::default().max_depth);
        assert!(toml::from_str::<Config>("[limits]\nmax_partz = 10\n").is_err());
        let zero: Config = toml::from_str("[limits]\nmax_depth = 0\n").unwrap();
        assert!(zero.validate().is_err());
    }

    /// docs/shrike.toml lists every option with its default: parsed, it is the defaults, and
    /// it holds every key the defaults serialize to (the optional ones are commented out).
    #[test]
    fn documented_example_is_every_default() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/shrike.toml");
        let text = std::fs::read_to_string(&path).unwrap();
        let parsed: Config = toml::from_str(&text).unwrap();
        assert_eq!(parsed, Config::default());
        let documented: toml::Value = toml::from_str(&text).unwrap();
        let defaults = toml::Value::try_from(Config::default()).unwrap();
        assert_eq!(
            documented, defaults,
            "docs/shrike.toml differs from the defaults"
        );
        for optional in ["soft_reject", "rewrite_subject", "password", "username"] {
            assert!(
                text.contains(&format!("# {optional} = ")),
                "{optional} not documented"
            );
        }
    }

    /// Every option without a default (`None`) is in docs/shrike.toml commented out in its
    /// section, so that `config defaults`, which prints that file, shows it.
    #[test]
    fn options_without_a_default_are_printed_commented() {
        let mut section = String::new();
        let mut commented = std::collections::BTreeSet::new();
        for line in REFERENCE.lines() {
            if let Some(name) = line.strip_prefix('[') {
                section = name
                    .trim_matches(['[', ']'])
                    .split(']')
                    .next()
                    .unwrap()
                    .into();
            }
            if let Some((key, _)) = line.strip_prefix("# ").and_then(|l| l.split_once(" = ")) {
                commented.insert(format!("{section}.{key}"));
            }
        }
        fn nulls(v: &serde_json::Value, path: &str, out: &mut Vec<String>) {
            if let serde_json::Value::Object(m) = v {
                for (k, v) in m {
                    let p = if path.is_empty() {
                        k.clone()
                    } else {
                        format!("{path}.{k}")
                    };
                    if v.is_null() {
                        out.push(p);
                    } else {
                        nulls(v, &p, out);
                    }
                }
            }
        }
        // (`dns.enabled` is left out of the serialized form when unset, so it is named here.)
        let mut unset = vec!["dns.enabled".to_string()];
        nulls(
            &serde_json::to_value(Config::default()).unwrap(),
            "",
            &mut unset,
        );
        assert!(unset.len() >= 10, "{unset:?}");
        let missing: Vec<&String> = unset.iter().filter(|o| !commented.contains(*o)).collect();
        assert!(missing.is_empty(), "not in docs/shrike.toml: {missing:?}");
    }

    #[test]
    fn store_and_persist_sections() {
        let c: Config = toml::from_str(
            "[store]\nmax_keys = 1000\nresolutions = [{ bucket_secs = 60, keep_secs = 3600 }]\n\
             [persist]\nfsync = \"always\"\n",
        )
        .unwrap();
        assert!(c.validate().is_ok());
        assert_eq!(c.persist.fsync, crate::store::FsyncPolicy::Always);
        let bad: Config =
            toml::from_str("[store]\nresolutions = [{ bucket_secs = 60, keep_secs = 90 }]\n")
                .unwrap();
        assert!(bad.validate().unwrap_err().to_string().contains("store"));
    }

    /// Every check still refuses what it refused before the checks moved into their modules,
    /// with the same message.
    #[test]
    fn each_section_is_checked_with_a_message_naming_the_option() {
        for (toml, message) in [
            ("[limits]\nmax_depth = 0", "limits.max_depth must be greater than 0"),
            ("[limits]\nmax_message_bytes = 0", "limits.max_message_bytes must be greater than 0"),
            ("[verdict]\ngreylist = nan", "verdict thresholds must be finite numbers"),
            (
                "[verdict]\nadd_header = 20.0",
                "verdict thresholds must satisfy greylist <= add_header <= reject",
            ),
            (
                "[verdict]\ncount_ham_below = 7.0",
                "verdict.count_ham_below must not exceed count_spam_at",
            ),
            ("[engine]\nrule_cpu_ms = 0", "engine budgets and memory limit must be greater than 0"),
            ("[scan]\nunique_period_secs = 0", "scan.unique_period_secs must be greater than 0"),
            ("[store]\nmax_keys = 0", "store.max_keys must be greater than 0"),
            ("[store]\nshards = 3", "store.shards must be 0 or a power of two"),
            ("[server]\nscan_timeout_ms = 0", "server.scan_timeout_ms must be greater than 0"),
            ("[http]\nmax_body_bytes = 0", "http.max_body_bytes must be greater than 0"),
            (
                "[server]\ninflight_bytes = 1000\n[http]\nmax_body_bytes = 600",
                "server.inflight_bytes (1000) must hold two messages of the largest size accepted \
                 (52428800 bytes: http.max_body_bytes, spamd.max_body_bytes, limits.max_message_bytes)",
            ),
            (
                "[http]\npassword = \"\"",
                "http.password is empty: it would let in whoever sends an empty Password header; remove the line for no password",
            ),
            (
                "[milter]\nreject_reply = \"450 no\"",
                "milter.reject_reply must be one line starting with a 5xx SMTP code, got \"450 no\"",
            ),
            ("[milter]\nmax_packet_bytes = 1000", "milter.max_packet_bytes must hold a 64 KiB body chunk"),
            ("[classifier]\ntable_bits = 30", "classifier.table_bits must be 16..=26, got 30"),
            ("[history]\nflush_ms = 2000", "history.flush_ms must be 1..=1000, got 2000"),
            (
                "[classifier]\nalpha = 0.0",
                "classifier alpha, beta, l1, l2, l1_per_thousand must be finite, >= 0 (alpha > 0)",
            ),
        ] {
            let c: Config = toml::from_str(toml).unwrap();
            let e = c.validate().expect_err(toml).to_string();
            assert_eq!(e, format!("invalid config: {message}"), "{toml}");
        }
    }

    #[test]
    fn parse_errors_name_the_place_without_quoting_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("shrike.toml");
        for (text, place, secret) in [
            (
                "[http]\nmax_headers = 5\npassword = \"s3cret\n",
                "line 3, column",
                "s3cret",
            ),
            (
                "[store.redis]\nurls = \"redis://u:pw9@h:1\"\n",
                "line 2, column 8",
                "pw9",
            ),
        ] {
            std::fs::write(&path, text).unwrap();
            let e = Config::from_file(&path).unwrap_err().to_string();
            assert!(e.contains(place), "{e}");
            assert!(!e.contains(secret), "{e}");
        }
    }

    #[test]
    fn the_printed_configuration_masks_every_password() {
        let c: Config = toml::from_str(
            "[http]\npassword = \"h-pw\"\n[store.redis]\npassword = \"r-pw\"\nusername = \"shrike\"\n\
             urls = [\"redis://shrike:u-pw@10.0.0.5:6379\", \"redis://10.0.0.6:6379\"]\n",
        )
        .unwrap();
        let text = toml::to_string(&c.redacted()).unwrap();
        for secret in ["h-pw", "r-pw", "u-pw"] {
            assert!(!text.contains(secret), "{secret} in:\n{text}");
        }
        for kept in [
            "redis://shrike:***@10.0.0.5:6379",
            "redis://10.0.0.6:6379",
            "shrike",
        ] {
            assert!(text.contains(kept), "{kept} not in:\n{text}");
        }
        // Unset passwords stay unset.
        let plain = Config::default().redacted();
        assert_eq!(plain, Config::default());
    }
}
