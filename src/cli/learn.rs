//! `shrike learn`: labelled mail learned offline into a data directory or through a daemon.

use std::io::{self, IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use shrike::config::Config;

use super::RuleArgs;

#[derive(clap::Args)]
#[command(group(clap::ArgGroup::new("mail").required(true).multiple(true).args(["spam", "ham"])))]
pub struct LearnArgs {
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

pub fn run(mut config: Config, args: LearnArgs) -> anyhow::Result<ExitCode> {
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
