//! A release: the kept bytes re-injected over SMTP (lettre's client, plain SMTP on a trusted
//! local port) to `[quarantine] release_relay` with the original envelope, or the part of it a
//! per-recipient link may release. Blocking; callers on an async runtime run it on a blocking
//! thread.

use std::str::FromStr;
use std::time::Duration;

use lettre::address::{Address, Envelope};
use lettre::transport::smtp::extension::ClientId;
use lettre::{SmtpTransport, Transport};

/// The relay's whole exchange must end within this.
const TIMEOUT: Duration = Duration::from_secs(60);

/// Why a release did not go out. Nothing was recorded as released.
#[derive(Debug, thiserror::Error)]
pub enum ReleaseError {
    #[error("no [quarantine] release_relay is set")]
    NoRelay,
    #[error("the message has no recipient to release to")]
    NoRecipient,
    #[error("not an address lettre can send to: {0:?}")]
    Address(String),
    #[error("the relay {relay} refused or failed: {error}")]
    Relay { relay: String, error: String },
}

fn address(a: &str) -> Result<Address, ReleaseError> {
    let bare = a.trim().trim_matches(['<', '>']);
    Address::from_str(bare).map_err(|_| ReleaseError::Address(a.to_string()))
}

/// Sends `raw` from `sender` (`None`, empty or `<>`: the null sender) to `rcpt` through
/// `relay` (`host:port`), saying `helo`; the relay's final reply on success.
pub fn send(
    relay: Option<&str>,
    helo: &str,
    sender: Option<&str>,
    rcpt: &[String],
    raw: &[u8],
) -> Result<String, ReleaseError> {
    let relay = relay.ok_or(ReleaseError::NoRelay)?;
    if rcpt.is_empty() {
        return Err(ReleaseError::NoRecipient);
    }
    let from = match sender.map(|s| s.trim().trim_matches(['<', '>'])) {
        None | Some("") => None,
        Some(s) => Some(address(s)?),
    };
    let to = rcpt
        .iter()
        .map(|r| address(r))
        .collect::<Result<Vec<_>, _>>()?;
    let envelope = Envelope::new(from, to).map_err(|_| ReleaseError::NoRecipient)?;
    let (host, port) = relay
        .rsplit_once(':')
        .and_then(|(h, p)| Some((h.trim_matches(['[', ']']), p.parse::<u16>().ok()?)))
        .ok_or_else(|| ReleaseError::Relay {
            relay: relay.to_string(),
            error: "not host:port".into(),
        })?;
    // Plain SMTP: the relay is the MTA's own re-injection port on a trusted network.
    let transport = SmtpTransport::builder_dangerous(host)
        .port(port)
        .hello_name(ClientId::Domain(helo.to_string()))
        .timeout(Some(TIMEOUT))
        .build();
    // lettre ends the data with CRLF.CRLF, its own CRLF included: a message that ends with a
    // line end would gain an empty line.
    let data = raw
        .strip_suffix(b"\r\n")
        .or_else(|| raw.strip_suffix(b"\n"))
        .unwrap_or(raw);
    match transport.send_raw(&envelope, data) {
        Ok(r) => Ok(format!(
            "{} {}",
            r.code(),
            r.message().collect::<Vec<_>>().join(" ")
        )),
        Err(e) => Err(ReleaseError::Relay {
            relay: relay.to_string(),
            error: e.to_string(),
        }),
    }
}
