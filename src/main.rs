//! The `shrike` command line: argument parsing, config load, the log subscriber (`[log]`),
//! dispatch to the subcommands' handlers (`cli/`).

mod cli;

use std::io;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand};

use shrike::config::Config;

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
    Serve(cli::serve::ServeArgs),
    /// Scan messages offline and print one JSON object per message.
    Scan(cli::scan::ScanArgs),
    /// Replay a labelled corpus on a simulated clock with simulated user feedback: detection,
    /// false positives, per-rule hits; or compare two rule sets.
    Replay(cli::replay::ReplayArgs),
    /// Learn spam and ham from existing mail (files, directories, maildirs, mbox files):
    /// offline into a data directory, or through a running daemon with --server.
    Learn(cli::learn::LearnArgs),
    /// Rule-set tools.
    #[command(subcommand)]
    Rules(cli::rules::RulesCommand),
    /// Configuration tools.
    #[command(subcommand)]
    Config(cli::config::ConfigCommand),
    /// Search the decision history in a data directory (works with the daemon stopped),
    /// newest first.
    History(cli::history::HistoryArgs),
    /// The quarantine of a data directory: list, show, release, learn, delete, digest
    /// (works with the daemon stopped).
    #[command(subcommand)]
    Quarantine(cli::quarantine::QuarantineCommand),
    /// Move reputation counters between a memory data directory and Redis.
    #[command(subcommand)]
    Store(cli::store::StoreCommand),
    /// Print the Argon2 hash of a password for [access] password_hash or read_password_hash.
    /// The password is asked on the terminal (twice), or read as the first line of standard
    /// input: `printf '%s\n' "$PW" | shrike passwd`.
    Passwd,
    /// DKIM signing keys.
    #[command(subcommand)]
    Dkim(cli::dkim::DkimCommand),
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
        Command::Serve(args) => cli::serve::run(config, args),
        Command::Scan(args) => cli::scan::run(&config, args),
        Command::Replay(args) => cli::replay::run(&config, args),
        Command::Learn(args) => cli::learn::run(config, args),
        Command::Rules(cmd) => cli::rules::run(&config, cmd),
        Command::History(args) => cli::history::run(&config, args),
        Command::Store(cmd) => cli::store::run(config, cmd),
        Command::Quarantine(cmd) => cli::quarantine::run(config, cmd),
        Command::Passwd => cli::passwd::run(),
        Command::Dkim(cmd) => cli::dkim::run(cmd),
        Command::Config(cmd) => cli::config::run(&config, cmd),
    }
}
