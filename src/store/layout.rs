//! Bucketing: the resolutions of the timelines, where a bucket belongs as it ages (`settle`),
//! and which windows a settled bucket counts in (`Settled::in_window`).

use serde::{Deserialize, Serialize};

use super::{Bucket, StoreError};

/// One resolution of the timelines.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Resolution {
    /// Width of a bucket.
    pub bucket_secs: u64,
    /// How long buckets of this width are kept before folding into the next resolution (or
    /// being dropped, for the last).
    pub keep_secs: u64,
}

/// Validated bucketing.
#[derive(Debug, Clone)]
pub struct Layout {
    resolutions: Vec<Resolution>,
}

impl Layout {
    pub fn new(resolutions: &[Resolution]) -> Result<Layout, StoreError> {
        if resolutions.is_empty() || resolutions.len() > 8 {
            return Err(StoreError::Resolutions(resolutions.len()));
        }
        for (i, r) in resolutions.iter().enumerate() {
            if r.bucket_secs == 0 || r.keep_secs == 0 || r.keep_secs % r.bucket_secs != 0 {
                return Err(StoreError::BadResolution(i));
            }
            if let Some(next) = resolutions.get(i + 1) {
                if next.bucket_secs % r.bucket_secs != 0 || next.bucket_secs == r.bucket_secs {
                    return Err(StoreError::NotNested(i));
                }
            }
        }
        Ok(Layout {
            resolutions: resolutions.to_vec(),
        })
    }

    pub fn resolutions(&self) -> &[Resolution] {
        &self.resolutions
    }

    /// The resolution-0 bucket of time `t`.
    pub fn bucket_id(&self, t: u64) -> u32 {
        u32::try_from(t / self.resolutions[0].bucket_secs).unwrap_or(u32::MAX)
    }

    /// Start time of a bucket.
    pub fn start(&self, resolution: usize, id: u32) -> u64 {
        u64::from(id) * self.resolutions[resolution].bucket_secs
    }

    /// Where bucket (resolution, id) belongs at time `now`: itself while its resolution keeps
    /// it, else the enclosing bucket of the next resolution that does, else nowhere.
    pub fn settle(&self, mut resolution: usize, mut id: u32, now: u64) -> Option<(usize, u32)> {
        loop {
            let r = self.resolutions.get(resolution)?;
            let end = u64::from(id)
                .saturating_add(1)
                .saturating_mul(r.bucket_secs);
            if end.saturating_add(r.keep_secs) > now {
                return Some((resolution, id));
            }
            let next = self.resolutions.get(resolution + 1)?;
            id = u32::try_from(u64::from(id) * r.bucket_secs / next.bucket_secs).ok()?;
            resolution += 1;
        }
    }

    /// Where bucket `b` belongs at `now`, or `None` if it has expired.
    pub(super) fn settled(&self, b: &Bucket, now: u64) -> Option<Settled> {
        let resolutions = &self.resolutions;
        let (r, id) = self.settle(b.resolution as usize, b.id, now)?;
        Some(Settled {
            end: self.start(r, id) + resolutions[r].bucket_secs,
            older_than: r.checked_sub(1).map_or(0, |f| resolutions[f].keep_secs),
        })
    }
}

/// A bucket where it belongs at some time: its end, and the age its counts are older than
/// (increments land in the finest resolution and move to a coarser one only once they are
/// older than the finer one keeps).
#[derive(Debug, Clone, Copy)]
pub(super) struct Settled {
    end: u64,
    older_than: u64,
}

impl Settled {
    /// Whether the bucket's counts belong to the window of the last `window` seconds: it
    /// overlaps the window, and a coarse bucket only a window longer than its counts' age (else
    /// the 24 h window would read a whole day bucket that ended an hour ago: up to 48 h).
    pub(super) fn in_window(self, window: u64, now: u64) -> bool {
        window > self.older_than && self.end > now.saturating_sub(window)
    }
}
