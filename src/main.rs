//! The `shrike` command line: argument parsing, logging setup, config load, dispatch.

use std::io::{self, BufWriter, IsTerminal, Read, Write};
use std::net::IpAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::{Parser, Subcommand};

use shrike::config::Config;
use shrike::engine::RuleLocation;
use shrike::message::{prepare, Envelope};
use shrike::scan::{ruletest, Scanner};

#[derive(Parser)]
#[command(name = "shrike", version, about = "Anti-spam rules engine")]
struct Cli {
    /// Configuration file (TOML); embedded defaults when absent.
    #[arg(long, global = true, value_name = "FILE")]
    config: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the daemon: HTTP (rspamd's protocol) and milter, on embedded defaults unless told.
    Serve(ServeArgs),
    /// Scan messages offline and print one JSON object per message.
    Scan(ScanArgs),
    /// Replay a labelled corpus on a simulated clock with simulated user feedback: detection,
    /// false positives, per-rule hits; or compare two rule sets.
    Replay(ReplayArgs),
    /// Learn spam and ham from existing mail (files, directories, maildirs, mbox files):
    /// offline into a data directory, or through a running daemon with --server.
    Learn(LearnArgs),
    /// Rule-set tools.
    #[command(subcommand)]
    Rules(RulesCommand),
    /// Configuration tools.
    #[command(subcommand)]
    Config(ConfigCommand),
    /// Search the decision history in a data directory (works with the daemon stopped),
    /// newest first.
    History(HistoryArgs),
    /// Move reputation counters between a memory data directory and Redis.
    #[command(subcommand)]
    Store(StoreCommand),
    /// Print the Argon2 hash of a password for [access] password_hash or read_password_hash.
    /// The password is asked on the terminal (twice), or read as the first line of standard
    /// input: `printf '%s\n' "$PW" | shrike passwd`.
    Passwd,
    /// DKIM signing keys.
    #[command(subcommand)]
    Dkim(DkimCommand),
}

#[derive(Subcommand)]
enum DkimCommand {
    /// Write a new signing key (PEM, mode 0600; never over an existing file) and print the
    /// DNS TXT record that publishes it.
    Keygen {
        #[arg(long)]
        domain: String,
        #[arg(long)]
        selector: String,
        /// rsa or ed25519 (ed25519 signatures are not yet checked by every receiver: sign
        /// with both where that matters).
        #[arg(long, default_value = "rsa")]
        algorithm: String,
        #[arg(long, default_value_t = 2048)]
        bits: usize,
        /// The key file (default DOMAIN.SELECTOR.key here, as `keys` templates name it).
        #[arg(long)]
        out: Option<PathBuf>,
    },
}

#[derive(Subcommand)]
enum StoreCommand {
    /// Write every key of a memory data directory (daemon stopped) as JSON lines.
    Export {
        /// Data directory (default: server.data_dir of the config).
        #[arg(long, value_name = "DIR")]
        data: Option<PathBuf>,
        /// Output file (default: standard output).
        #[arg(long, value_name = "FILE")]
        out: Option<PathBuf>,
    },
    /// Add a dump's counters to the Redis of the config's [store.redis].
    Import {
        /// Input file (default: standard input).
        #[arg(long = "in", value_name = "FILE")]
        input: Option<PathBuf>,
    },
}

#[derive(clap::Args)]
struct HistoryArgs {
    /// Data directory (default: server.data_dir of the config, ./shrike-data).
    #[arg(long, value_name = "DIR")]
    data: Option<PathBuf>,
    /// Records at or after this time: RFC 3339, a date, Unix seconds, or a duration ago (2h).
    #[arg(long, value_name = "TIME")]
    since: Option<String>,
    /// Records at or before this time (same forms as --since).
    #[arg(long, value_name = "TIME")]
    until: Option<String>,
    #[arg(long, value_name = "ID")]
    queue_id: Option<String>,
    #[arg(long, value_name = "ID")]
    message_id: Option<String>,
    /// A symbol that fired.
    #[arg(long, value_name = "NAME")]
    symbol: Option<String>,
    /// An action (reject, no_action, …), learn, learn_spam or learn_ham; comma-separated.
    #[arg(long, value_name = "ACTION")]
    action: Option<String>,
    /// Envelope sender, or @domain.
    #[arg(long, value_name = "ADDR")]
    sender: Option<String>,
    /// A recipient, or @domain.
    #[arg(long, value_name = "ADDR")]
    rcpt: Option<String>,
    /// Client IP or CIDR range.
    #[arg(long, value_name = "IP")]
    ip: Option<String>,
    #[arg(long, value_name = "SCORE", allow_hyphen_values = true)]
    min_score: Option<String>,
    #[arg(long, value_name = "SCORE", allow_hyphen_values = true)]
    max_score: Option<String>,
    /// Most records to print.
    #[arg(long, value_name = "N", default_value_t = 50)]
    limit: usize,
    /// Continue after the page that printed this cursor.
    #[arg(long, value_name = "CURSOR")]
    cursor: Option<String>,
    /// One JSON record per line instead of a table.
    #[arg(long)]
    json: bool,
}

#[derive(Subcommand)]
enum ConfigCommand {
    /// Print every option with its default as commented TOML (docs/shrike.toml); options
    /// without a default are printed commented out, with an example value.
    Defaults,
    /// Validate the file given with --config (or the defaults) and the rule set it names
    /// (with --rules as `serve` takes them), and print the configuration as used, with every
    /// password shown as ***. Exits 1 on the first problem, before anything would start
    /// (systemd's ExecStartPre).
    Check {
        #[command(flatten)]
        rules: RuleArgs,
    },
}

#[derive(Subcommand)]
enum RulesCommand {
    /// Load a rule directory over the shipped set, validate its declarations, lint it with
    /// luacheck when installed and run its tests.
    Check {
        /// The rule directory.
        #[arg(value_name = "DIR")]
        dir: PathBuf,
        /// Directory of `*.test` files (default: DIR/tests when it exists).
        #[arg(long, value_name = "DIR")]
        tests: Option<PathBuf>,
        /// Check DIR alone, not laid over the shipped rules.
        #[arg(long)]
        no_default_rules: bool,
    },
    /// Print the effective rule set: every symbol, its score, the file it comes from (shipped
    /// or local) and what overrode it (a replaced file, `[scores]`, `[rules] disabled`).
    List {
        #[command(flatten)]
        rules: RuleArgs,
        /// One JSON object per symbol instead of a table.
        #[arg(long)]
        json: bool,
        /// The set as recipients under this `[[settings]]` entry get it: its scores and
        /// switched-off symbols over the global ones, and its thresholds.
        #[arg(long, value_name = "NAME")]
        settings: Option<String>,
    },
}

/// Which rules to load: the shipped set with local directories over it.
#[derive(clap::Args, Clone, Default)]
struct RuleArgs {
    /// Local rule directory laid over the shipped rules (a file of the same name replaces the
    /// shipped one, others add to the set), after `[engine] rules_dirs`; repeatable.
    #[arg(long, value_name = "DIR")]
    rules: Vec<PathBuf>,
    /// Leave out the shipped rules: only the --rules directories.
    #[arg(long)]
    no_default_rules: bool,
}

impl RuleArgs {
    /// The location the configuration and these flags name.
    fn location(&self, config: &Config) -> anyhow::Result<RuleLocation> {
        let mut dirs = config.engine.rules_dirs.clone();
        dirs.extend(self.rules.iter().cloned());
        let shipped = config.engine.default_rules && !self.no_default_rules;
        RuleLocation::layered(shipped, dirs).context(
            "--no-default-rules (or [engine] default_rules = false) needs a rule directory",
        )
    }
}

#[derive(clap::Args)]
struct ServeArgs {
    /// HTTP listener: ADDR:PORT, unix:PATH or off (default 127.0.0.1:11333).
    #[arg(long, value_name = "ADDR")]
    http: Option<String>,
    /// Milter listener: ADDR:PORT, inet:ADDR:PORT, unix:PATH or off (default 127.0.0.1:11332).
    #[arg(long, value_name = "ADDR")]
    milter: Option<String>,
    #[command(flatten)]
    rules: RuleArgs,
    /// State directory: WAL and snapshots (default ./shrike-data).
    #[arg(long, value_name = "DIR")]
    data: Option<PathBuf>,
    /// Scan worker threads (default: one per core).
    #[arg(long, value_name = "N")]
    workers: Option<usize>,
}

#[derive(clap::Args)]
#[command(group(clap::ArgGroup::new("mail").required(true).multiple(true).args(["spam", "ham"])))]
struct LearnArgs {
    /// Spam: message files, directories (walked recursively), maildirs, mbox files.
    #[arg(long, num_args = 1.., value_name = "PATH")]
    spam: Vec<PathBuf>,
    /// Ham: the same kinds of path.
    #[arg(long, num_args = 1.., value_name = "PATH")]
    ham: Vec<PathBuf>,
    /// Data directory to learn into, offline (default: server.data_dir, ./shrike-data). A
    /// daemon running on it must be stopped first, or used with --server.
    #[arg(long, value_name = "DIR", conflicts_with = "server")]
    data: Option<PathBuf>,
    /// Rule directory over the shipped set (offline). Use the daemon's: the rules decide what
    /// the classifier sees.
    #[arg(long, value_name = "DIR", conflicts_with = "server")]
    rules: Vec<PathBuf>,
    /// Leave out the shipped rules (offline): only the --rules directories.
    #[arg(long, conflicts_with = "server")]
    no_default_rules: bool,
    /// Learn through a running daemon's /learnspam and /learnham instead, e.g.
    /// http://127.0.0.1:11333.
    #[arg(long, value_name = "URL")]
    server: Option<String>,
    /// The daemon's controller password (http.password), sent as the Password header. Every
    /// user of the host sees it in `ps`: prefer --password-file or SHRIKE_PASSWORD.
    #[arg(
        long,
        value_name = "P",
        requires = "server",
        conflicts_with = "password_file"
    )]
    password: Option<String>,
    /// Read the password from the first line of FILE (keep it 0600). Without this or
    /// --password, the SHRIKE_PASSWORD environment variable gives it.
    #[arg(long, value_name = "FILE", requires = "server")]
    password_file: Option<PathBuf>,
}

#[derive(clap::Args)]
struct ScanArgs {
    /// Print JSON (the default and, for now, only format; kept for rspamc-like scripts).
    #[arg(long)]
    json: bool,
    /// Client IP the message came from, as an MTA would report it.
    #[arg(long, value_name = "IP")]
    ip: Option<IpAddr>,
    /// HELO name of the client.
    #[arg(long, value_name = "NAME")]
    helo: Option<String>,
    /// Envelope sender (MAIL FROM).
    #[arg(long = "from", value_name = "ADDR")]
    mail_from: Option<String>,
    #[command(flatten)]
    rules: RuleArgs,
    /// Envelope recipient (RCPT TO); repeatable.
    #[arg(long = "rcpt", value_name = "ADDR")]
    rcpt_to: Vec<String>,
    /// Message files; `-` reads one message from standard input.
    #[arg(required = true, value_name = "FILE")]
    files: Vec<String>,
}

#[derive(clap::Args)]
struct ReplayArgs {
    #[command(flatten)]
    rules: RuleArgs,
    /// A second rule directory (`embedded` for the compiled-in set), over the shipped set
    /// unless --no-default-rules: the same stream through both, each with its own store; lists
    /// every message whose action differs.
    #[arg(long, value_name = "DIR")]
    compare_rules: Option<PathBuf>,
    /// CSV of `file,label` rows (spam, ham, hard_ham); files relative to the CSV. Without it,
    /// labels come from folder names (spam/, ham/, easy_ham/, hard_ham/).
    #[arg(long, value_name = "CSV")]
    labels: Option<PathBuf>,
    /// Spread arrivals evenly over this period (e.g. 14d) in a seeded order, instead of the
    /// times in the messages' headers.
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    period: Option<std::time::Duration>,
    /// Start of the --period spread (RFC 3339; default 2026-01-01T00:00:00Z).
    #[arg(long, value_name = "TIME", value_parser = humantime::parse_rfc3339_weak)]
    start: Option<std::time::SystemTime>,
    /// Seed of the arrival order (--period) and of the simulated users' choices.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Chance that spam delivered to the inbox draws a complaint (0..1).
    #[arg(long, default_value_t = 0.5, value_name = "P")]
    complain: f64,
    /// Chance that ham filed as spam is rescued (0..1).
    #[arg(long, default_value_t = 0.5, value_name = "P")]
    rescue: f64,
    /// Mean delay from delivery to feedback.
    #[arg(long, default_value = "1h", value_name = "DURATION", value_parser = humantime::parse_duration)]
    feedback_delay: std::time::Duration,
    /// What trains the classifier: `feedback` (complaints and rescues) or `all` (every
    /// labelled message after the feedback delay: progressive validation).
    #[arg(long, value_enum, default_value = "feedback")]
    train: shrike::replay::Train,
    /// Cross-validate instead of replaying the stream: split the spam and the ham into K folds
    /// (by a hash of the file names and --seed); each fold learns the others as `shrike learn`
    /// does, into a fresh store and classifier at the first arrival time, then scores its own
    /// messages and every hard ham at their arrival times, without feedback. Reports each fold
    /// and all together.
    #[arg(long, value_name = "K", value_parser = clap::value_parser!(u16).range(2..=20),
          conflicts_with_all = ["compare_rules", "train"])]
    cross_validate: Option<u16>,
    /// With --cross-validate: also write which fold learned and which scored each message to
    /// PATH (`fold,role,file,label`).
    #[arg(long, value_name = "PATH", requires = "cross_validate")]
    folds: Option<PathBuf>,
    /// The temporal protocol instead of replaying the stream: learn the earliest FRACTION
    /// (0 < FRACTION < 1) of the labelled mail by the messages' Date headers (their place in the
    /// corpus where a date is missing) as `shrike learn` does, at the time of the last; then
    /// score the rest at their times, without feedback. Reports and CSV as --cross-validate.
    #[arg(long, value_name = "FRACTION",
          conflicts_with_all = ["compare_rules", "train", "cross_validate", "period"])]
    split_by_date: Option<f64>,
    /// Stretches of the stream in the detection-over-time table.
    #[arg(long, default_value_t = 10, value_name = "N")]
    slices: usize,
    /// Print JSON instead of tables.
    #[arg(long)]
    json: bool,
    /// Also write one CSV row per message to PATH (file, label, arrival, action, score,
    /// symbols, feedback).
    #[arg(long, value_name = "PATH")]
    csv: Option<PathBuf>,
    /// Directories of messages, maildirs, mbox files or message files.
    #[arg(required = true, value_name = "CORPUS")]
    corpus: Vec<PathBuf>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => code,
        // The reader of the output went away (`shrike rules list | head`): nothing is wrong
        // that it would want to hear about. (Rust ignores SIGPIPE, so the write fails instead
        // of the process being stopped by the signal as a C tool's would be.)
        Err(e) if broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("shrike: {e:#}");
            ExitCode::from(1)
        }
    }
}

/// Whether an error is a write to a closed pipe (directly, or through serde_json's writer).
fn broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|cause| {
        let kind = match cause.downcast_ref::<io::Error>() {
            Some(io) => Some(io.kind()),
            None => cause
                .downcast_ref::<serde_json::Error>()
                .and_then(serde_json::Error::io_error_kind),
        };
        kind == Some(io::ErrorKind::BrokenPipe)
    })
}

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    let config = match &cli.config {
        Some(path) => Config::from_file(path).context("loading configuration")?,
        None => Config::default(),
    };
    // The daemon logs its lifecycle; the offline tools only warnings.
    let default_level = match cli.command {
        Command::Serve(_) => "info",
        _ => "warn",
    };
    shrike::logging::init(&config.log, default_level);
    match cli.command {
        Command::Serve(args) => serve(config, args),
        Command::Scan(args) => scan(&config, args),
        Command::Replay(args) => replay(&config, args),
        Command::Learn(args) => learn(config, args),
        Command::Rules(RulesCommand::Check {
            dir,
            tests,
            no_default_rules,
        }) => rules_check(&config, dir, tests, no_default_rules),
        Command::Rules(RulesCommand::List {
            rules,
            json,
            settings,
        }) => rules_list(&config, &rules, json, settings.as_deref()),
        Command::History(args) => history(&config, args),
        Command::Store(cmd) => store_transfer(config, cmd),
        Command::Passwd => passwd(),
        Command::Dkim(DkimCommand::Keygen {
            domain,
            selector,
            algorithm,
            bits,
            out,
        }) => dkim_keygen(&domain, &selector, &algorithm, bits, out),
        Command::Config(ConfigCommand::Defaults) => {
            let mut out = io::stdout().lock();
            out.write_all(shrike::config::REFERENCE.as_bytes())?;
            out.flush()?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Config(ConfigCommand::Check { rules }) => {
            let location = rules.location(&config)?;
            let scanner = Scanner::in_memory(&config.scan_settings(), &config.store, location)
                .context("loading the rule set")?;
            let generation = scanner.engine().generation();
            eprintln!(
                "shrike: configuration and rule set ok: {} rules",
                generation.rules.len()
            );
            let text = toml::to_string(&config.redacted()).context("encoding the configuration")?;
            let mut out = io::stdout().lock();
            out.write_all(text.as_bytes())?;
            out.flush()?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn dkim_keygen(
    domain: &str,
    selector: &str,
    algorithm: &str,
    bits: usize,
    out: Option<PathBuf>,
) -> anyhow::Result<ExitCode> {
    use shrike::sign::{keygen, KeyKind};
    let kind = match algorithm {
        "rsa" => KeyKind::Rsa(bits),
        "ed25519" => KeyKind::Ed25519,
        other => anyhow::bail!("--algorithm {other:?}: rsa or ed25519"),
    };
    let key = keygen(kind, domain, selector).map_err(anyhow::Error::msg)?;
    let path = out.unwrap_or_else(|| PathBuf::from(format!("{domain}.{selector}.key")));
    anyhow::ensure!(
        !path.exists(),
        "{} exists: a key is never overwritten",
        path.display()
    );
    shrike::secrets::write_private(&path, key.pem.as_bytes())
        .with_context(|| format!("writing {}", path.display()))?;
    eprintln!("shrike: key written to {} (0600)", path.display());
    println!("{}", key.zone_line());
    Ok(ExitCode::SUCCESS)
}

fn passwd() -> anyhow::Result<ExitCode> {
    let password = if io::stdin().is_terminal() {
        let first = rpassword::prompt_password("Password: ").context("reading the password")?;
        let again = rpassword::prompt_password("Again: ").context("reading the password")?;
        anyhow::ensure!(first == again, "the two passwords differ");
        first
    } else {
        let mut line = String::new();
        io::stdin()
            .read_line(&mut line)
            .context("reading the password from standard input")?;
        line.trim_end_matches(['\r', '\n']).to_string()
    };
    anyhow::ensure!(!password.is_empty(), "the password is empty");
    let hash = shrike::server::access::hash_password(&password)
        .map_err(|e| anyhow::anyhow!("hashing the password: {e}"))?;
    println!("{hash}");
    Ok(ExitCode::SUCCESS)
}

fn serve(mut config: Config, args: ServeArgs) -> anyhow::Result<ExitCode> {
    if let Some(http) = args.http {
        config.http.listen = http;
    }
    if let Some(milter) = args.milter {
        config.milter.listen = milter;
    }
    if let Some(data) = args.data {
        config.server.data_dir = data;
    }
    if let Some(workers) = args.workers {
        config.server.workers = workers;
    }
    let location = args.rules.location(&config)?;
    shrike::server::serve(config.serve_settings(), location)?;
    Ok(ExitCode::SUCCESS)
}

fn scan(config: &Config, args: ScanArgs) -> anyhow::Result<ExitCode> {
    let envelope = Envelope {
        client_ip: args.ip,
        helo: args.helo,
        mail_from: args.mail_from,
        rcpt_to: args.rcpt_to,
        ..Envelope::default()
    };
    let location = args.rules.location(config)?;
    let scanner = Scanner::in_memory(&config.scan_settings(), &config.store, location)?;
    let mut worker = scanner.worker();
    // Offline unless `[dns] enabled = true`: then each message gets the network checks first.
    let checker = shrike::netcheck::from_config(&config.dns, &config.dnsbl, &config.auth, false)
        .context("starting the DNS checks")?;
    let runtime = match &checker {
        Some(_) => Some(
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .context("starting the DNS runtime")?,
        ),
        None => None,
    };
    let stdout = io::stdout();
    let mut out = BufWriter::new(stdout.lock());
    let mut failed = false;
    for file in &args.files {
        let raw = match read_input(file) {
            Ok(raw) => raw,
            Err(e) => {
                eprintln!("shrike: cannot read {file}: {e}");
                failed = true;
                continue;
            }
        };
        let input = prepare(&raw, &config.limits);
        let net = match (&checker, &runtime) {
            (Some(c), Some(rt)) => Some(rt.block_on(c.check(&raw, &envelope))),
            _ => None,
        };
        let scanned = worker.scan_with(&input, &envelope, net.as_ref());
        serde_json::to_writer(&mut out, &scanned.analysis.report(file, &scanned.verdict))
            .context("writing output")?;
        out.write_all(b"\n").context("writing output")?;
        scanner.apply(&scanned.updates);
    }
    out.flush().context("writing output")?;
    Ok(if failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

fn learn(mut config: Config, args: LearnArgs) -> anyhow::Result<ExitCode> {
    use shrike::learn::{self, Options, Target};
    if let Some(data) = args.data {
        config.server.data_dir = data;
    }
    let target = match args.server {
        Some(url) => Target::Server {
            url,
            // SHRIKE_PASSWORD is read here, not by clap: clap counts a value from the
            // environment as given, so `requires = "server"` would refuse an offline learn in
            // a shell that exports it.
            password: learn::password(
                args.password,
                args.password_file.as_deref(),
                std::env::var(learn::PASSWORD_ENV).ok(),
            )?,
        },
        None => Target::Offline {
            rules: RuleArgs {
                rules: args.rules,
                no_default_rules: args.no_default_rules,
            }
            .location(&config)?,
        },
    };
    let options = Options {
        spam: args.spam,
        ham: args.ham,
        target,
        progress: io::stderr().is_terminal(),
    };
    let summary = learn::run(&config.learn_settings(), &options)?;
    let mut out = io::stdout().lock();
    writeln!(out, "learned spam: {}", summary.spam)?;
    writeln!(out, "learned ham: {}", summary.ham)?;
    writeln!(
        out,
        "duplicates: {} ({} spam, {} ham; already learned, not trained again)",
        summary.duplicate_spam + summary.duplicate_ham,
        summary.duplicate_spam,
        summary.duplicate_ham
    )?;
    writeln!(out, "unreadable: {}", summary.unreadable)?;
    writeln!(out, "refused: {}", summary.refused)?;
    writeln!(
        out,
        "{} messages in {:.2} s: {:.0} messages/s",
        summary.processed(),
        summary.elapsed.as_secs_f64(),
        summary.per_sec()
    )?;
    out.flush()?;
    Ok(if summary.processed() == 0 {
        eprintln!("shrike: nothing could be learned");
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

/// `--compare-rules DIR`: `embedded` is the shipped set alone; a directory is laid over the
/// shipped set like --rules.
fn compare_location(
    config: &Config,
    dir: PathBuf,
    no_default: bool,
) -> anyhow::Result<RuleLocation> {
    if dir.as_os_str() == "embedded" && !dir.exists() {
        return Ok(RuleLocation::Embedded);
    }
    let shipped = config.engine.default_rules && !no_default;
    RuleLocation::layered(shipped, vec![dir]).context("no rule directory")
}

fn replay(config: &Config, args: ReplayArgs) -> anyhow::Result<ExitCode> {
    use shrike::replay::{self, report, Arrival, Feedback};
    for (name, p) in [("--complain", args.complain), ("--rescue", args.rescue)] {
        anyhow::ensure!(
            (0.0..=1.0).contains(&p),
            "{name} must be between 0 and 1, got {p}"
        );
    }
    let arrival = match args.period {
        Some(period) => Arrival::Spread {
            start: args
                .start
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map_or(1_767_225_600, |d| d.as_secs()),
            period_secs: period.as_secs(),
            seed: args.seed,
        },
        None => Arrival::Headers,
    };
    let corpus = replay::corpus::load(&args.corpus, args.labels.as_deref(), &arrival)
        .context("loading the corpus")?;
    for (file, why) in &corpus.skipped {
        eprintln!("shrike: skipped {file}: {why}");
    }
    let feedback = Feedback {
        complain: args.complain,
        rescue: args.rescue,
        delay_secs: args.feedback_delay.as_secs(),
        seed: args.seed,
        train: args.train,
    };
    let rules_a = args.rules.location(config)?;
    if let Some(k) = args.cross_validate {
        return cross_validate(config, &args, rules_a, &corpus, usize::from(k));
    }
    if let Some(fraction) = args.split_by_date {
        anyhow::ensure!(
            fraction > 0.0 && fraction < 1.0,
            "--split-by-date takes a fraction between 0 and 1 (0.5: learn the earlier half)"
        );
        return cross_validate(config, &args, rules_a, &corpus, 0);
    }
    let (a, b) = match args.compare_rules.clone() {
        None => (
            replay::run(&config.replay_settings(), rules_a, &corpus, &feedback)?,
            None,
        ),
        Some(dir) => {
            let rules_b = compare_location(config, dir, args.rules.no_default_rules)?;
            let (a, b) = replay::run_pair(
                &config.replay_settings(),
                rules_a,
                rules_b,
                &corpus,
                &feedback,
            )?;
            (a, Some(b))
        }
    };
    if let Some(path) = &args.csv {
        let file =
            std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
        report::write_csv(BufWriter::new(file), &corpus, &a, b.as_ref())
            .with_context(|| format!("writing {}", path.display()))?;
    }
    let stdout = io::stdout();
    let mut out = BufWriter::new(stdout.lock());
    match b {
        None => {
            let summary = report::Summary::new(&corpus, &a, &config.verdict, args.slices);
            if args.json {
                serde_json::to_writer_pretty(&mut out, &summary).context("writing output")?;
                writeln!(out)?;
            } else {
                summary.write_text(&mut out, &feedback)?;
            }
        }
        Some(b) => {
            let comparison = report::Comparison::new(&corpus, &a, &b, &config.verdict, args.slices);
            if args.json {
                serde_json::to_writer_pretty(&mut out, &comparison).context("writing output")?;
                writeln!(out)?;
            } else {
                let name = |p: Option<&PathBuf>| {
                    p.map_or_else(|| "embedded".to_string(), |p| p.display().to_string())
                };
                let (name_a, name_b) = (
                    name(args.rules.rules.last()),
                    name(args.compare_rules.as_ref()),
                );
                comparison.write_text(&mut out, &name_a, &name_b)?;
            }
        }
    }
    out.flush().context("writing output")?;
    Ok(ExitCode::SUCCESS)
}

fn cross_validate(
    config: &Config,
    args: &ReplayArgs,
    rules: RuleLocation,
    corpus: &shrike::replay::Corpus,
    k: usize,
) -> anyhow::Result<ExitCode> {
    use shrike::replay::{crossval, report};
    let cv = match args.split_by_date {
        Some(fraction) => crossval::run_split(&config.replay_settings(), rules, corpus, fraction)?,
        None => crossval::run(&config.replay_settings(), rules, corpus, k, args.seed)?,
    };
    if let Some(path) = &args.csv {
        let file =
            std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
        report::write_csv_folds(BufWriter::new(file), corpus, &cv)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    if let Some(path) = &args.folds {
        let file =
            std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
        crossval::write_roles(BufWriter::new(file), corpus, &cv)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    let summary = report::CrossSummary::new(corpus, &cv, args.seed, &config.verdict, args.slices);
    let stdout = io::stdout();
    let mut out = BufWriter::new(stdout.lock());
    if args.json {
        serde_json::to_writer_pretty(&mut out, &summary).context("writing output")?;
        writeln!(out)?;
    } else {
        summary.write_text(&mut out)?;
    }
    out.flush().context("writing output")?;
    Ok(ExitCode::SUCCESS)
}

fn rules_check(
    config: &Config,
    dir: PathBuf,
    tests: Option<PathBuf>,
    no_default_rules: bool,
) -> anyhow::Result<ExitCode> {
    let location =
        RuleLocation::layered(!no_default_rules, vec![dir.clone()]).context("no rule directory")?;
    let settings = config.scan_settings();
    let scanner = match Scanner::in_memory(&settings, &config.store, location.clone()) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("shrike: {}: {e}", dir.display());
            return Ok(ExitCode::from(1));
        }
    };
    let generation = scanner.engine().generation();
    let symbols: usize = generation.rules.iter().map(|r| r.symbols.len()).sum();
    println!(
        "{}: {} rules, {} symbols, {} library modules, {} lists: ok",
        dir.display(),
        generation.rules.len(),
        symbols,
        generation.sources.modules.len(),
        generation.sources.lists.by_name.len()
    );
    let linted = luacheck(&dir);
    let tests = tests.or_else(|| Some(dir.join("tests")).filter(|t| t.is_dir()));
    let Some(tests) = tests else {
        return Ok(if linted {
            ExitCode::SUCCESS
        } else {
            ExitCode::from(1)
        });
    };
    let (results, patterns) = shrike::engine::patterns::recording(|| {
        ruletest::run_dir_traced(&settings, &config.store, &location, &tests)
    });
    let results = match results {
        Ok(r) => r,
        Err(e) => {
            eprintln!("shrike: {e}");
            return Ok(ExitCode::from(1));
        }
    };
    let mut failed = 0;
    for r in &results {
        if r.failures.is_empty() {
            println!("ok   {}", r.file.display());
        } else {
            failed += 1;
            for f in &r.failures {
                println!("FAIL {}: {f}", r.file.display());
            }
        }
    }
    println!(
        "{} tests, {} passed, {} failed",
        results.len(),
        results.len() - failed,
        failed
    );
    // Negative tests that could not fail: a warning, not a failure.
    match shrike::scan::nearmiss::weak_negatives(&settings, &config.store, &location, &results) {
        Ok(weak) => {
            for w in &weak {
                println!(
                    "warn {}: its {} expect-not test(s) stop where plain mail stops in rule {} \
                     ({}); add a near miss, a message with the trigger in a harmless form that \
                     runs one of lines {}",
                    w.symbol,
                    w.negatives,
                    w.rule,
                    w.file,
                    shrike::scan::nearmiss::ranges(&w.interesting)
                );
            }
            if !weak.is_empty() {
                println!("{} symbols without a near-miss negative test", weak.len());
            }
        }
        Err(e) => eprintln!("shrike: cannot check the negative tests: {e}"),
    }
    if results.is_empty() {
        eprintln!("shrike: no *.test files in {}", tests.display());
        return Ok(ExitCode::from(1));
    }
    // What the tests ran, and every pattern-like literal of the set's files (paths the tests
    // do not reach).
    let mut patterns = patterns;
    for file in generation
        .sources
        .rules
        .iter()
        .chain(generation.sources.modules.values())
    {
        for p in shrike::engine::patterns::literals(&file.text) {
            if !patterns.contains(&p) {
                patterns.push(p);
            }
        }
    }
    let costly = costly_patterns(&patterns);
    Ok(if failed == 0 && linted && costly == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// Measures the Lua patterns the tests ran (`engine::patterns`) and prints those whose work
/// grows faster than their input: a sender can make each cost seconds, and the budget that
/// stops it skips the rule. How many there are.
fn costly_patterns(patterns: &[Vec<u8>]) -> usize {
    let costs = match shrike::engine::patterns::measure(patterns) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("shrike: cannot measure the rules' patterns: {e}");
            return 0;
        }
    };
    let costly: Vec<_> = costs.iter().filter(|c| c.super_linear()).collect();
    for c in &costly {
        println!(
            "FAIL pattern {:?} backtracks: {} steps on {} ({} on a quarter of it{}); rewrite it \
             so each character is tried a bounded number of times",
            c.pattern,
            c.steps_long,
            c.input,
            c.steps_short,
            if c.capped { ", stopped at the cap" } else { "" }
        );
    }
    println!(
        "{} patterns measured, {} super-linear",
        costs.len(),
        costly.len()
    );
    costly.len()
}

/// The globals shrike's sandbox adds to Lua 5.4 (.luacheckrc lists the same).
const LUA_GLOBALS: &[&str] = &[
    "rule",
    "feature",
    "re",
    "log",
    "list",
    "ratelimit",
    "char_counts",
    "is_private_ip",
];

/// Lints the rule directory with luacheck when it is installed (Debian's `lua-check`): its
/// warnings are printed and fail the check. Run in DIR, so a `.luacheckrc` there applies;
/// shrike's globals and Lua 5.4 are given on the command line. True when clean or not run.
fn luacheck(dir: &std::path::Path) -> bool {
    let mut cmd = std::process::Command::new("luacheck");
    cmd.current_dir(dir)
        .args([
            "--no-color",
            "--codes",
            "--std",
            "lua54",
            "--no-unused-args",
        ])
        .args([
            "--no-max-line-length",
            "--exclude-files",
            "tests/**",
            "--read-globals",
        ])
        .args(LUA_GLOBALS)
        .arg("--")
        .arg(".");
    match cmd.output() {
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            println!("luacheck: not installed (Debian: lua-check); lint skipped");
            true
        }
        Err(e) => {
            eprintln!("shrike: cannot run luacheck: {e}");
            false
        }
        Ok(out) => {
            let text = String::from_utf8_lossy(&out.stdout);
            if out.status.success() {
                println!("luacheck: ok");
                return true;
            }
            for line in text.lines().filter(|l| l.starts_with("    ")) {
                println!("luacheck {}", line.trim());
            }
            if let Some(total) = text.lines().find(|l| l.starts_with("Total:")) {
                println!("luacheck: {total}");
            }
            false
        }
    }
}

fn rules_list(
    config: &Config,
    args: &RuleArgs,
    json: bool,
    settings: Option<&str>,
) -> anyhow::Result<ExitCode> {
    let location = args.location(config)?;
    let scanner = Scanner::in_memory(&config.scan_settings(), &config.store, location.clone())
        .with_context(|| format!("loading {}", location.describe()))?;
    let generation = scanner.engine().generation();
    let table = &generation.overrides.settings;
    let profile = match settings {
        None => None,
        Some(name) => {
            let names: Vec<&str> = table.profiles().iter().map(|p| p.name.as_str()).collect();
            let index = table.by_name(name).with_context(|| {
                if names.is_empty() {
                    format!("no settings entry named {name:?}: the configuration has none")
                } else {
                    format!(
                        "no settings entry named {name:?} (the configuration has {})",
                        names.join(", ")
                    )
                }
            })?;
            table.profile(index)
        }
    };
    let listed = shrike::engine::overlay::list_for(&generation, profile);
    let stdout = io::stdout();
    let mut out = BufWriter::new(stdout.lock());
    if json {
        for l in &listed {
            serde_json::to_writer(&mut out, l).context("writing output")?;
            out.write_all(b"\n").context("writing output")?;
        }
    } else {
        let width = listed
            .iter()
            .map(|l| l.symbol.len())
            .max()
            .unwrap_or(6)
            .max(6);
        writeln!(
            out,
            "{:width$}  {:>7}  {:<8}  SOURCE  (OVERRIDDEN BY)",
            "SYMBOL", "SCORE", "STATE"
        )?;
        for l in &listed {
            let state = if l.enabled { "on" } else { "off" };
            write!(
                out,
                "{:width$}  {:>7}  {:<8}  {}",
                l.symbol, l.score, state, l.source
            )?;
            if !l.overridden.is_empty() {
                write!(out, "  ({})", l.overridden.join("; "))?;
            }
            writeln!(out)?;
        }
        for f in &generation.features {
            writeln!(
                out,
                "feature {}: {} over {} ({})",
                f.name,
                format!("{:?}", f.kind).to_lowercase(),
                f.window,
                f.file
            )?;
        }
        let on = listed.iter().filter(|l| l.enabled).count();
        writeln!(
            out,
            "{} symbols ({} on, {} off) from {}",
            listed.len(),
            on,
            listed.len() - on,
            location.describe()
        )?;
        if let Some(p) = profile {
            let thresholds: Vec<String> = p
                .verdict
                .thresholds()
                .into_iter()
                .map(|(action, at)| format!("{action} at {at}"))
                .collect();
            writeln!(out, "settings \"{}\": {}", p.name, thresholds.join(", "))?;
            for (what, list) in [("allow_senders", &p.allow), ("deny_senders", &p.deny)] {
                if !list.is_empty() {
                    writeln!(out, "settings \"{}\": {what} {}", p.name, list.describe())?;
                }
            }
        }
    }
    out.flush().context("writing output")?;
    for name in generation.overrides.unknown(&generation.declared) {
        eprintln!("shrike: warning: {name} is in [scores] or [rules] but no rule declares it");
    }
    Ok(ExitCode::SUCCESS)
}

fn history(config: &Config, args: HistoryArgs) -> anyhow::Result<ExitCode> {
    use shrike::history::query::{self, Query};
    let data = args.data.unwrap_or_else(|| config.server.data_dir.clone());
    anyhow::ensure!(data.is_dir(), "{} is not a data directory", data.display());
    let limit = args.limit.to_string();
    let pairs: Vec<(&str, &str)> = [
        ("from", args.since.as_deref()),
        ("to", args.until.as_deref()),
        ("queue_id", args.queue_id.as_deref()),
        ("message_id", args.message_id.as_deref()),
        ("symbol", args.symbol.as_deref()),
        ("action", args.action.as_deref()),
        ("sender", args.sender.as_deref()),
        ("rcpt", args.rcpt.as_deref()),
        ("ip", args.ip.as_deref()),
        ("min_score", args.min_score.as_deref()),
        ("max_score", args.max_score.as_deref()),
        ("cursor", args.cursor.as_deref()),
        ("limit", Some(limit.as_str())),
    ]
    .into_iter()
    .filter_map(|(k, v)| v.map(|v| (k, v)))
    .collect();
    let q = Query::parse(pairs, shrike::history::now_us()).map_err(|e| match e {
        // The query's names are /history's; here the user typed flags.
        query::QueryError::Bad {
            name,
            value,
            reason,
        } => anyhow::anyhow!("{}: {reason} (got {value:?})", history_flag(name)),
        e => e.into(),
    })?;
    let page = query::run(&data.join(shrike::history::DIR), &q)?;
    let stdout = io::stdout();
    let mut out = BufWriter::new(stdout.lock());
    if args.json {
        for r in &page.records {
            serde_json::to_writer(&mut out, &r.to_json()).context("writing output")?;
            out.write_all(b"\n").context("writing output")?;
        }
    } else {
        query::write_table(&mut out, &page.records).context("writing output")?;
    }
    out.flush().context("writing output")?;
    if page.skipped_bytes > 0 {
        eprintln!(
            "shrike: {} bytes of damaged or torn history skipped",
            page.skipped_bytes
        );
    }
    if let Some(c) = page.cursor {
        eprintln!("shrike: more records: --cursor {}", c.encode());
    }
    Ok(ExitCode::SUCCESS)
}

/// The `shrike history` flag that gives `/history`'s parameter `name`.
fn history_flag(name: &str) -> String {
    match name {
        "from" => "--since".into(),
        "to" => "--until".into(),
        other => format!("--{}", other.replace('_', "-")),
    }
}

fn read_input(file: &str) -> io::Result<Vec<u8>> {
    if file == "-" {
        let mut raw = Vec::new();
        io::stdin().lock().read_to_end(&mut raw)?;
        Ok(raw)
    } else {
        std::fs::read(file)
    }
}

/// `shrike store export|import`.
fn store_transfer(mut config: Config, cmd: StoreCommand) -> anyhow::Result<ExitCode> {
    use shrike::store::redis::{transfer, RedisStore};
    match cmd {
        StoreCommand::Export { data, out } => {
            if let Some(d) = data {
                config.server.data_dir = d;
            }
            let dir = shrike::datadir::open(
                &config.server.data_dir,
                &config.store,
                &config.persist,
                &config.classifier,
                false,
            )
            .context("opening the data directory")?;
            let mut sink: Box<dyn Write> = match out {
                Some(path) => Box::new(io::BufWriter::new(
                    std::fs::File::create(&path)
                        .with_context(|| format!("creating {}", path.display()))?,
                )),
                None => Box::new(io::BufWriter::new(io::stdout().lock())),
            };
            let n = transfer::export(dir.durable.store(), &mut sink)?;
            eprintln!("exported {n} keys");
        }
        StoreCommand::Import { input } => {
            let store = RedisStore::new(&config.store, Arc::new(shrike::store::SystemClock))?;
            if !store.wait_connected(Duration::from_secs(10)) {
                anyhow::bail!(
                    "cannot reach redis at {:?}",
                    shrike::secrets::redact_all(&config.store.redis.urls)
                );
            }
            let mut source: Box<dyn io::BufRead> = match input {
                Some(path) => Box::new(io::BufReader::new(
                    std::fs::File::open(&path)
                        .with_context(|| format!("opening {}", path.display()))?,
                )),
                None => Box::new(io::BufReader::new(io::stdin().lock())),
            };
            let n = transfer::import(&store, &mut source)?;
            eprintln!("imported {n} keys");
        }
    }
    Ok(ExitCode::SUCCESS)
}
