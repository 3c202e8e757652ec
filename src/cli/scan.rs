//! `shrike scan`: messages scanned offline, one JSON report a line.

use std::io::{self, BufWriter, Read, Write};
use std::net::IpAddr;
use std::process::ExitCode;

use anyhow::Context;

use shrike::config::Config;
use shrike::message::{prepare, Envelope};
use shrike::scan::Scanner;

use super::RuleArgs;

#[derive(clap::Args)]
pub struct ScanArgs {
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

pub fn run(config: &Config, args: ScanArgs) -> anyhow::Result<ExitCode> {
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
    let checker = shrike::netcheck::from_config(
        &config.dns,
        &config.dnsbl,
        &config.auth,
        &config.limits,
        false,
    )
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

fn read_input(file: &str) -> io::Result<Vec<u8>> {
    if file == "-" {
        let mut raw = Vec::new();
        io::stdin().lock().read_to_end(&mut raw)?;
        Ok(raw)
    } else {
        std::fs::read(file)
    }
}
