//! `shrike serve`: the daemon, with the flags laid over the configuration.

use std::path::PathBuf;
use std::process::ExitCode;

use shrike::config::Config;

use super::RuleArgs;

#[derive(clap::Args)]
pub struct ServeArgs {
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

pub fn run(mut config: Config, args: ServeArgs) -> anyhow::Result<ExitCode> {
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
