//! `shrike history`: the decision history of a data directory, searched by flags.

use std::io::{self, BufWriter, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;

use shrike::config::Config;

#[derive(clap::Args)]
pub struct HistoryArgs {
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

pub fn run(config: &Config, args: HistoryArgs) -> anyhow::Result<ExitCode> {
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
