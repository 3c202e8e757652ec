//! The `shrike` command line: argument parsing, logging setup, config load, dispatch.

use std::io::{self, BufWriter, Read, Write};
use std::net::IpAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand};

use shrike::config::Config;
use shrike::message::{prepare, Envelope};
use shrike::scan::{analyze, Verdict};

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
    /// Scan messages offline and print one JSON object per message.
    Scan(ScanArgs),
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
    /// Envelope recipient (RCPT TO); repeatable.
    #[arg(long = "rcpt", value_name = "ADDR")]
    rcpt_to: Vec<String>,
    /// Message files; `-` reads one message from standard input.
    #[arg(required = true, value_name = "FILE")]
    files: Vec<String>,
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(io::stderr)
        .init();
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("shrike: {e:#}");
            ExitCode::from(1)
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    let config = match &cli.config {
        Some(path) => Config::from_file(path).context("loading configuration")?,
        None => Config::default(),
    };
    match cli.command {
        Command::Scan(args) => scan(&config, args),
    }
}

fn scan(config: &Config, args: ScanArgs) -> anyhow::Result<ExitCode> {
    let envelope = Envelope {
        client_ip: args.ip,
        helo: args.helo,
        mail_from: args.mail_from,
        rcpt_to: args.rcpt_to,
    };
    let stdout = io::stdout();
    let mut out = BufWriter::new(stdout.lock());
    let mut failed = false;
    let verdict = Verdict::default();
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
        let analysis = analyze(&input, &envelope, &config.limits);
        serde_json::to_writer(&mut out, &analysis.report(file, &verdict))
            .context("writing output")?;
        out.write_all(b"\n").context("writing output")?;
    }
    out.flush().context("writing output")?;
    Ok(if failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
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
