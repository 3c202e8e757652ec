//! `ScanSettings`, what a scanner is configured by (`[limits]`, `[verdict]`, `[scan]`,
//! `[engine]`, `[classifier]`, `[greylist]`, `[antivirus]`, `[outbound]`), and their checks.

use serde::{Deserialize, Serialize};

use crate::classify::{ClassifierConfig, ClassifierConfigError};
use crate::engine::{self, EngineConfig, EngineConfigError};
use crate::message::Limits;
use crate::verdict::{VerdictConfig, VerdictConfigError};

/// Everything a scanner is configured by: the configuration's `[limits]`, `[verdict]`,
/// `[scan]`, `[engine]` and `[classifier]` sections (`Config::scan_settings` composes them).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ScanSettings {
    /// Limits on the work done per message.
    pub limits: Limits,
    /// Action thresholds and what the store counts as spam or ham.
    pub verdict: VerdictConfig,
    /// Store namespace and unique-count period of the scanned traffic.
    pub traffic: TrafficConfig,
    /// Lua limits: CPU budgets, memory, caches.
    pub engine: EngineConfig,
    /// The online classifier.
    pub classifier: ClassifierConfig,
    /// The configuration's `[scores]` and `[rules]` changes to the rule set.
    pub overrides: engine::Overrides,
    /// `[greylist]`.
    pub greylist: crate::greylist::GreylistConfig,
    /// `[antivirus]`.
    pub antivirus: crate::antivirus::AntivirusConfig,
    /// `[outbound]`: which mail is our users' own, its thresholds, replies, limits.
    pub outbound: crate::outbound::OutboundConfig,
}

/// Why scan settings cannot be used. Each message names the option.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SettingsError {
    #[error("{0} must be greater than 0")]
    Zero(&'static str),
    #[error(transparent)]
    Verdict(#[from] VerdictConfigError),
    #[error(transparent)]
    Engine(#[from] EngineConfigError),
    #[error(transparent)]
    Classifier(#[from] ClassifierConfigError),
    #[error(transparent)]
    Greylist(#[from] crate::greylist::GreylistConfigError),
    #[error(transparent)]
    Outbound(#[from] crate::outbound::OutboundConfigError),
}

impl ScanSettings {
    /// Checks values that parse but make no sense, in the order of the sections.
    pub fn validate(&self) -> Result<(), SettingsError> {
        let l = &self.limits;
        for (name, value) in [
            ("limits.max_message_bytes", l.max_message_bytes),
            ("limits.max_parts", l.max_parts),
            ("limits.max_depth", l.max_depth),
            ("limits.max_text_bytes", l.max_text_bytes),
            ("limits.max_header_bytes", l.max_header_bytes),
            ("limits.max_headers", l.max_headers),
        ] {
            if value == 0 {
                return Err(SettingsError::Zero(name));
            }
        }
        self.verdict.validate()?;
        self.engine.validate()?;
        if self.traffic.unique_period_secs == 0 {
            return Err(SettingsError::Zero("scan.unique_period_secs"));
        }
        self.classifier.validate()?;
        self.greylist.validate()?;
        self.outbound.validate()?;
        self.outbound.verdict(&self.verdict)?;
        Ok(())
    }
}

/// `[scan]`: where a scan's statistics go.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TrafficConfig {
    /// Store namespace of this traffic (e.g. 0 inbound, 1 outbound).
    pub namespace: u8,
    /// Period of the distinct-recipient counts (paired shingles), seconds.
    pub unique_period_secs: u64,
}

impl Default for TrafficConfig {
    fn default() -> Self {
        TrafficConfig {
            namespace: 0,
            unique_period_secs: 86_400,
        }
    }
}
