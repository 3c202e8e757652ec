//! `shrike quarantine`: the quarantine of a data directory with the daemon stopped (or beside
//! it, for reads): list, show, release, learn, delete, and the per-recipient digest.

use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context};

use shrike::config::Config;
use shrike::quarantine::store::{Query, Store};

use super::RuleArgs;

#[derive(clap::Subcommand)]
pub enum QuarantineCommand {
    /// Kept messages, newest first.
    List {
        #[command(flatten)]
        data: DataArg,
        /// A recipient, or @domain.
        #[arg(long, value_name = "ADDR")]
        rcpt: Option<String>,
        /// The envelope sender or From address, or @domain.
        #[arg(long, value_name = "ADDR")]
        sender: Option<String>,
        /// A symbol that hit.
        #[arg(long, value_name = "NAME")]
        symbol: Option<String>,
        /// Kept at or after this time: RFC 3339, a date, Unix seconds, or a duration ago (2h).
        #[arg(long, value_name = "TIME")]
        since: Option<String>,
        #[arg(long, value_name = "TIME")]
        until: Option<String>,
        #[arg(long, value_name = "N", default_value_t = 50)]
        limit: usize,
        /// One JSON object per line instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// One message: its entry, header fields and text; or its original bytes with --raw.
    Show {
        id: String,
        #[command(flatten)]
        data: DataArg,
        /// Print the original bytes.
        #[arg(long)]
        raw: bool,
    },
    /// Send a message on to its recipients through [quarantine] release_relay.
    Release {
        id: String,
        #[command(flatten)]
        data: DataArg,
        /// The relay (host:port) instead of [quarantine] release_relay.
        #[arg(long, value_name = "HOST:PORT")]
        relay: Option<String>,
        /// Release again a message that was released before.
        #[arg(long)]
        force: bool,
    },
    /// Learn a message as spam or ham into the data directory (offline: the daemon stopped).
    Learn {
        id: String,
        #[command(flatten)]
        data: DataArg,
        /// spam or ham.
        #[arg(long, value_name = "CLASS")]
        class: String,
        #[command(flatten)]
        rules: RuleArgs,
    },
    /// Delete a message: its body overwritten, gone from every list.
    Delete {
        id: String,
        #[command(flatten)]
        data: DataArg,
    },
    /// Per recipient, the messages kept since a time and a signed link to their page (for a
    /// cron job to mail out).
    Digest {
        #[command(flatten)]
        data: DataArg,
        /// Kept at or after this time (default: 24h ago).
        #[arg(long, value_name = "TIME", default_value = "24h")]
        since: String,
        /// One JSON object per recipient instead of text.
        #[arg(long)]
        json: bool,
        /// How long the links stay valid (`7d`, `12h`; default: [quarantine] link_days).
        #[arg(long, value_name = "DURATION")]
        valid: Option<String>,
    },
}

#[derive(clap::Args)]
pub struct DataArg {
    /// Data directory (default: server.data_dir of the config, ./shrike-data).
    #[arg(long, value_name = "DIR")]
    data: Option<PathBuf>,
}

impl DataArg {
    fn dir(&self, config: &Config) -> anyhow::Result<PathBuf> {
        let data = self
            .data
            .clone()
            .unwrap_or_else(|| config.server.data_dir.clone());
        anyhow::ensure!(data.is_dir(), "{} is not a data directory", data.display());
        Ok(data)
    }
}

fn open(config: &Config, data: &Path) -> anyhow::Result<Store> {
    let store = Store::open(data, &config.quarantine, false)?;
    anyhow::ensure!(
        store.dir().is_dir(),
        "{} has no quarantine ([quarantine] enabled)",
        data.display()
    );
    Ok(store)
}

type Found = (
    shrike::quarantine::Meta,
    shrike::quarantine::store::Segment,
    shrike::quarantine::store::EntryState,
);

fn find(store: &Store, id: &str) -> anyhow::Result<Found> {
    let state = store.state(id)?;
    match store.find(id)? {
        Some((m, seg)) if !state.deleted => Ok((m, seg, state)),
        _ => bail!("no quarantined message {id}"),
    }
}

pub fn run(mut config: Config, cmd: QuarantineCommand) -> anyhow::Result<ExitCode> {
    let mut out = io::stdout().lock();
    match cmd {
        QuarantineCommand::List {
            data,
            rcpt,
            sender,
            symbol,
            since,
            until,
            limit,
            json,
        } => {
            let dir = data.dir(&config)?;
            let store = open(&config, &dir)?;
            let limit = limit.to_string();
            let pairs: Vec<(&str, &str)> = [
                ("rcpt", rcpt.as_deref()),
                ("sender", sender.as_deref()),
                ("symbol", symbol.as_deref()),
                ("since", since.as_deref()),
                ("until", until.as_deref()),
                ("limit", Some(limit.as_str())),
            ]
            .into_iter()
            .filter_map(|(k, v)| v.map(|v| (k, v)))
            .collect();
            let q = Query::parse(pairs.into_iter(), shrike::history::now_us())
                .map_err(anyhow::Error::msg)?;
            let page = store.list(&q)?;
            for (m, state) in &page.entries {
                if json {
                    serde_json::to_writer(&mut out, &m.to_json(state))?;
                    writeln!(out)?;
                } else {
                    writeln!(
                        out,
                        "{}  {}  {:>7.2}  {:<10} {:<30} {:<30} {}{}",
                        m.id,
                        &shrike::history::format_time(m.time_us)[..19],
                        m.score,
                        m.action,
                        m.sender.as_deref().unwrap_or("<>"),
                        match m.rcpt.len() {
                            0 => String::new(),
                            1 => m.rcpt[0].clone(),
                            n => format!("{} (+{})", m.rcpt[0], n - 1),
                        },
                        m.subject.as_deref().unwrap_or(""),
                        if state.released.is_empty() {
                            ""
                        } else {
                            "  [released]"
                        }
                    )?;
                }
            }
        }
        QuarantineCommand::Show { id, data, raw } => {
            let dir = data.dir(&config)?;
            let store = open(&config, &dir)?;
            let (m, seg, state) = find(&store, &id)?;
            let bytes = store.body(&m, &seg)?;
            if raw {
                out.write_all(&bytes)?;
            } else {
                let mut v = shrike::quarantine::render::view(&bytes);
                v["entry"] = m.to_json(&state);
                serde_json::to_writer_pretty(&mut out, &v)?;
                writeln!(out)?;
            }
        }
        QuarantineCommand::Release {
            id,
            data,
            relay,
            force,
        } => {
            let dir = data.dir(&config)?;
            let store = open(&config, &dir)?;
            let (m, seg, state) = find(&store, &id)?;
            if state.released_to(None) && !force {
                bail!("{id} was released before; --force releases it again");
            }
            let bytes = store.body(&m, &seg)?;
            let q = &config.quarantine;
            let relay = relay.or_else(|| q.release_relay.clone());
            let reply = shrike::quarantine::release::send(
                relay.as_deref(),
                &q.release_helo,
                m.sender.as_deref(),
                &m.rcpt,
                &bytes,
            )?;
            store.mark_released(&id, "cli", &m.rcpt)?;
            record_release(&config, &dir, &m, bytes.len())?;
            writeln!(
                out,
                "released {id} to {} recipient(s): {reply}",
                m.rcpt.len()
            )?;
        }
        QuarantineCommand::Learn {
            id,
            data,
            class,
            rules,
        } => {
            let dir = data.dir(&config)?;
            let store = open(&config, &dir)?;
            let (m, seg, _) = find(&store, &id)?;
            let bytes = store.body(&m, &seg)?;
            let tmp = tempdir(&dir)?;
            let file = tmp.join(format!("{id}.eml"));
            std::fs::write(&file, &bytes)?;
            let (spam, ham) = match class.as_str() {
                "spam" => (vec![file.clone()], Vec::new()),
                "ham" => (Vec::new(), vec![file.clone()]),
                _ => bail!("--class must be spam or ham"),
            };
            config.server.data_dir = dir.clone();
            let options = shrike::learn::Options {
                spam,
                ham,
                target: shrike::learn::Target::Offline {
                    rules: rules.location(&config)?,
                },
                progress: false,
            };
            let summary = shrike::learn::run(&config.learn_settings(), &options);
            let _ = std::fs::remove_dir_all(&tmp);
            let summary = summary?;
            if summary.processed() == 0 {
                bail!("{id} could not be learned");
            }
            writeln!(
                out,
                "learned {id} as {class}{}",
                if summary.duplicate_spam + summary.duplicate_ham > 0 {
                    " (already learned: not trained again)"
                } else {
                    ""
                }
            )?;
        }
        QuarantineCommand::Delete { id, data } => {
            let dir = data.dir(&config)?;
            let store = open(&config, &dir)?;
            let (m, seg, _) = find(&store, &id)?;
            store.delete(&m, &seg, "cli")?;
            writeln!(out, "deleted {id}")?;
        }
        QuarantineCommand::Digest {
            data,
            since,
            json,
            valid,
        } => {
            let dir = data.dir(&config)?;
            let store = open(&config, &dir)?;
            let valid = match valid {
                Some(v) => humantime::parse_duration(&v)
                    .with_context(|| format!("--valid {v}"))?
                    .as_secs()
                    .max(1),
                None => config.quarantine.link_days * 86_400,
            };
            digest(&config, &store, &since, json, valid, &mut out)?;
        }
    }
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

/// A private scratch directory inside the data directory (the bytes are someone's mail).
fn tempdir(data: &Path) -> anyhow::Result<PathBuf> {
    let mut r = [0u8; 8];
    shrike::quarantine::crypto::random(&mut r);
    let dir = data.join(format!(
        ".quarantine-learn-{}",
        r.iter().map(|b| format!("{b:02x}")).collect::<String>()
    ));
    shrike::secrets::private_dir(&dir).context("making a scratch directory")?;
    Ok(dir)
}

/// The release's record in the decision history (when it is on).
fn record_release(
    config: &Config,
    data: &Path,
    m: &shrike::quarantine::Meta,
    size: usize,
) -> anyhow::Result<()> {
    let (recorder, writer) = shrike::history::open(data, &config.history)?;
    let mut r = shrike::history::Record {
        time_us: shrike::history::now_us(),
        kind: shrike::history::Kind::Release,
        listener: "cli".into(),
        queue_id: m.queue_id.clone(),
        message_id: m.message_id.clone(),
        sender: m.sender.clone(),
        rcpt: m.rcpt.clone(),
        from: m.from.clone(),
        subject: m.subject.clone(),
        size: size as u64,
        score: m.score,
        ..Default::default()
    };
    r.ip = m.ip.as_deref().and_then(|i| i.parse().ok());
    recorder.record(r);
    recorder.flush();
    drop(writer);
    Ok(())
}

fn digest(
    config: &Config,
    store: &Store,
    since: &str,
    json: bool,
    valid_secs: u64,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    use std::collections::BTreeMap;
    let q = Query::parse(
        [("since", since), ("limit", "1000")].into_iter(),
        shrike::history::now_us(),
    )
    .map_err(anyhow::Error::msg)?;
    let key = shrike::quarantine::links::LinkKey::open(store.dir())
        .context("the per-recipient link key")?;
    let mut by_rcpt: BTreeMap<String, Vec<shrike::quarantine::Meta>> = BTreeMap::new();
    let mut q = q;
    loop {
        let page = store.list(&q)?;
        for (m, state) in page.entries {
            for r in &m.rcpt {
                let r = shrike::quarantine::normal_address(r);
                if !state.released_to(Some(&r)) {
                    by_rcpt.entry(r).or_default().push(m.clone());
                }
            }
        }
        match page.cursor {
            Some(c) => q.cursor = Some(c),
            None => break,
        }
    }
    let qc = &config.quarantine;
    let expires = shrike::quarantine::links::now_secs() + valid_secs;
    for (rcpt, entries) in by_rcpt {
        let link = format!(
            "{}/quarantine/r/{}",
            qc.link_base.trim_end_matches('/'),
            key.sign(&rcpt, expires)
        );
        if json {
            let v = serde_json::json!({
                "rcpt": rcpt,
                "link": link,
                "expires": expires,
                "messages": entries.iter().map(|m| serde_json::json!({
                    "id": m.id,
                    "time": shrike::history::format_time(m.time_us),
                    "from": m.from.as_ref().or(m.sender.as_ref()),
                    "subject": m.subject,
                    "score": m.score,
                })).collect::<Vec<_>>(),
            });
            serde_json::to_writer(&mut *out, &v)?;
            writeln!(out)?;
        } else {
            writeln!(out, "To: {rcpt}")?;
            writeln!(
                out,
                "{} message(s) held for you; to see or release them: {link}",
                entries.len()
            )?;
            for m in entries.iter().take(50) {
                writeln!(
                    out,
                    "  {}  {:<40}  {}",
                    &shrike::history::format_time(m.time_us)[..16],
                    m.from.as_deref().or(m.sender.as_deref()).unwrap_or("<>"),
                    m.subject.as_deref().unwrap_or("(no subject)")
                )?;
            }
            writeln!(out)?;
        }
    }
    Ok(())
}
