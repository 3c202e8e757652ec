//! Logging: `[log]` (format and level) and the one subscriber every command installs.
//!
//! The level is `RUST_LOG` if set, else `[log] level`, else the command's default (the daemon
//! logs its lifecycle at `info`, the offline tools only warnings). Under systemd, whose journal
//! stamps every line itself, a line carries no timestamp of its own and starts with its syslog
//! priority (`<3>` for an error … `<7>` for debug, sd-daemon(3)), so `journalctl -p warning`
//! filters it: the journal is recognised as systemd documents it, by `JOURNAL_STREAM` naming the
//! device and inode of our stderr (a child that inherits the variable but not the stream is not
//! fooled).

use std::fmt;
use std::io::{self, IsTerminal};

use serde::{Deserialize, Serialize};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::EnvFilter;

/// How a log line is written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// For people: `LEVEL span{fields}: target: message key=value`.
    #[default]
    Text,
    /// For shippers: one JSON object a line with `level`, `target`, `fields` (the message and
    /// its values), `span` (the innermost) and `spans` (every open span's fields, outermost
    /// first).
    Json,
}

/// `[log]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LogConfig {
    /// `text` or `json`.
    pub format: LogFormat,
    /// A level (`error`, `warn`, `info`, `debug`, `trace`) or `RUST_LOG`-style directives
    /// (`info,shrike::server=debug`). Empty: `info` for `serve`, `warn` for the other commands.
    /// `RUST_LOG`, when set, wins.
    pub level: String,
}

/// A `[log]` that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum LogConfigError {
    #[error("[log] level {level:?} is not a level or filter: {reason}")]
    Level { level: String, reason: String },
}

impl LogConfig {
    pub fn validate(&self) -> Result<(), LogConfigError> {
        if self.level.is_empty() {
            return Ok(());
        }
        EnvFilter::try_new(&self.level)
            .map(drop)
            .map_err(|e| LogConfigError::Level {
                level: self.level.clone(),
                reason: e.to_string(),
            })
    }
}

/// Installs the process's subscriber on stderr. `default_level` applies when neither `RUST_LOG`
/// nor `[log] level` says otherwise. A second call changes nothing.
pub fn init(config: &LogConfig, default_level: &str) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| {
        let level = if config.level.is_empty() {
            default_level
        } else {
            &config.level
        };
        EnvFilter::try_new(level).unwrap_or_else(|_| EnvFilter::new(default_level))
    });
    let journal = stderr_is_journal();
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(io::stderr);
    // A second subscriber is refused; the first one stays, which is what a caller wants.
    let _ = match (config.format, journal) {
        (LogFormat::Text, false) => builder.with_ansi(io::stderr().is_terminal()).try_init(),
        (LogFormat::Text, true) => {
            let inner = tracing_subscriber::fmt::format()
                .without_time()
                .with_ansi(false);
            builder
                .with_ansi(false)
                .event_format(Priority(inner))
                .try_init()
        }
        (LogFormat::Json, false) => builder
            .json()
            .with_current_span(true)
            .with_span_list(true)
            .try_init(),
        (LogFormat::Json, true) => builder
            .json()
            .with_current_span(true)
            .with_span_list(true)
            .without_time()
            .try_init(),
    };
}

/// Whether stderr is the journal's stream: `JOURNAL_STREAM` is `DEVICE:INODE` of it.
fn stderr_is_journal() -> bool {
    std::env::var("JOURNAL_STREAM")
        .ok()
        .is_some_and(|value| names_stderr(&value))
}

fn names_stderr(value: &str) -> bool {
    use std::os::fd::AsFd;
    use std::os::unix::fs::MetadataExt;
    let Some((dev, ino)) = value.split_once(':') else {
        return false;
    };
    let (Ok(dev), Ok(ino)) = (dev.parse::<u64>(), ino.parse::<u64>()) else {
        return false;
    };
    let Ok(fd) = io::stderr().as_fd().try_clone_to_owned() else {
        return false;
    };
    match std::fs::File::from(fd).metadata() {
        Ok(meta) => meta.dev() == dev && meta.ino() == ino,
        Err(_) => false,
    }
}

/// The syslog priority of a level, as the journal reads it from a line's `<N>` prefix.
fn priority(level: &Level) -> u8 {
    match *level {
        Level::ERROR => 3,
        Level::WARN => 4,
        Level::INFO => 6,
        _ => 7,
    }
}

/// A text line with its syslog priority in front.
struct Priority<F>(F);

impl<S, N, F> FormatEvent<S, N> for Priority<F>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
    F: FormatEvent<S, N>,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        write!(writer, "<{}>", priority(event.metadata().level()))?;
        self.0.format_event(ctx, writer, event)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_and_filters_are_checked() {
        for ok in ["", "warn", "info,shrike::server=debug", "debug"] {
            let c = LogConfig {
                level: ok.into(),
                ..LogConfig::default()
            };
            assert!(c.validate().is_ok(), "{ok}");
        }
        let c = LogConfig {
            level: "loud=[".into(),
            ..LogConfig::default()
        };
        let e = c.validate().unwrap_err().to_string();
        assert!(e.starts_with("[log] level \"loud=[\""), "{e}");
    }

    #[test]
    fn a_stream_that_is_not_stderr_is_not_the_journal() {
        assert!(!names_stderr("nonsense"));
        assert!(!names_stderr("1:2"));
        assert!(!names_stderr(""));
    }

    #[test]
    fn priorities_follow_syslog() {
        assert_eq!(priority(&Level::ERROR), 3);
        assert_eq!(priority(&Level::WARN), 4);
        assert_eq!(priority(&Level::INFO), 6);
        assert_eq!(priority(&Level::TRACE), 7);
    }
}
