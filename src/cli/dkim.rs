//! `shrike dkim keygen`: a new signing key and the DNS record that publishes it.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;

/// DKIM signing keys.
#[derive(clap::Subcommand)]
pub enum DkimCommand {
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

pub fn run(cmd: DkimCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        DkimCommand::Keygen {
            domain,
            selector,
            algorithm,
            bits,
            out,
        } => write_key(&domain, &selector, &algorithm, bits, out),
    }
}

fn write_key(
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
