//! `shrike passwd`: the Argon2 hash of a password for `[access]`.

use std::io::{self, IsTerminal};
use std::process::ExitCode;

use anyhow::Context;

pub fn run() -> anyhow::Result<ExitCode> {
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
