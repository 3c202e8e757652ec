//! `shrike replay`: a labelled corpus on a simulated clock, a rule-set comparison, or
//! cross-validation, with its reports.

use std::io::{self, BufWriter, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;

use shrike::config::Config;
use shrike::engine::RuleLocation;

use super::RuleArgs;

#[derive(clap::Args)]
pub struct ReplayArgs {
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

pub fn run(config: &Config, args: ReplayArgs) -> anyhow::Result<ExitCode> {
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
