//! `shrike store export|import`: reputation counters between a memory data directory and Redis.

use std::io::{self, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Subcommand;

use shrike::config::Config;

#[derive(Subcommand)]
pub enum StoreCommand {
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

/// `shrike store export|import`.
pub fn run(mut config: Config, cmd: StoreCommand) -> anyhow::Result<ExitCode> {
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
