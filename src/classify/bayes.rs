//! A second opinion beside the FTRL model: naive Bayes over the same hashed features, combined
//! by Robinson's chi-square (Fisher) method, the combining SpamAssassin's and rspamd's Bayes use.
//!
//! Owns: per-class message counts of every coordinate, the combining, their snapshot section.
//! Never touches: training order or locking (the classifier calls `learn` under its training
//! lock), Lua.
//!
//! Why two models: a discriminative model (FTRL) and a generative one fail differently. Naive
//! Bayes reaches its best from far fewer examples (Ng & Jordan, 2002), and on mail whose
//! features point both ways (a newsletter: bulk-mail words, but also the sender's own links and
//! list headers learned from ham) the chi-square combining answers close to 0.5 instead of
//! summing the stronger side, where the FTRL model, trained only on spam and plain ham, can be
//! sure of spam. Rule 90_classifier.lua reads both (`msg:classify()`, `msg:bayes()`).

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed};

use super::Class;

/// Robinson's strength of the prior: how many messages a feature's own ratio is worth against
/// the neutral 0.5.
const STRENGTH: f64 = 1.0;
/// Features whose smoothed probability is closer to 0.5 than this say nothing and are left out.
const MIN_DEVIATION: f64 = 0.1;
/// At most this many of the most telling features are combined (a long message would otherwise
/// outvote with sheer length).
const MAX_FEATURES: usize = 150;
/// A feature's probability never reaches 0 or 1: one such feature would decide alone.
const CLAMP: f64 = 1e-6;

/// Messages of each class each coordinate was learned in.
pub struct Bayes {
    mask: u64,
    /// Spam count of coordinate `i` at `2i`, ham count at `2i + 1` (saturating).
    counts: Box<[AtomicU32]>,
    spam: AtomicU64,
    ham: AtomicU64,
}

impl Bayes {
    /// A table of `2^bits` coordinates (the FTRL table's size: the same hashes index both).
    pub fn new(bits: u32) -> Bayes {
        let size = 1usize << bits;
        Bayes {
            mask: size as u64 - 1,
            counts: (0..size * 2).map(|_| AtomicU32::new(0)).collect(),
            spam: AtomicU64::new(0),
            ham: AtomicU64::new(0),
        }
    }

    /// Messages learned per class (counted here, so a model loaded from an older snapshot
    /// without this section starts from nothing instead of pretending to know).
    pub fn learned(&self) -> (u64, u64) {
        (self.spam.load(Relaxed), self.ham.load(Relaxed))
    }

    fn slot(&self, feature: u64) -> usize {
        (feature & self.mask) as usize
    }

    /// Counts one message of `class` with these (deduplicated) feature hashes. The caller
    /// serializes learns.
    pub fn learn(&self, hashes: &[u64], class: Class) {
        let off = usize::from(class == Class::Ham);
        for &f in hashes {
            let c = &self.counts[2 * self.slot(f) + off];
            c.store(c.load(Relaxed).saturating_add(1), Relaxed);
        }
        match class {
            Class::Spam => self.spam.fetch_add(1, Relaxed),
            Class::Ham => self.ham.fetch_add(1, Relaxed),
        };
    }

    /// The spam probability of a feature set: 0.5 when nothing known says anything either way.
    pub fn probability(&self, hashes: &[u64]) -> f64 {
        let (ns, nh) = self.learned();
        if ns == 0 || nh == 0 {
            return 0.5;
        }
        let (ns, nh) = (ns as f64, nh as f64);
        let mut probs: Vec<f64> = Vec::with_capacity(hashes.len().min(512));
        for &f in hashes {
            let slot = self.slot(f);
            let cs = f64::from(self.counts[2 * slot].load(Relaxed));
            let ch = f64::from(self.counts[2 * slot + 1].load(Relaxed));
            let n = cs + ch;
            if n == 0.0 {
                continue;
            }
            // The feature's spam share, (cs / ns) / (cs / ns + ch / nh), pulled towards 0.5 by
            // the prior, (s · 0.5 + n · share) / (s + n), as one fraction num / den: the test
            // against MIN_DEVIATION needs no division, and a feature left out costs none.
            let d = cs * nh + ch * ns;
            let num = STRENGTH * 0.5 * d + n * cs * nh;
            let den = (STRENGTH + n) * d;
            if (num - 0.5 * den).abs() >= MIN_DEVIATION * den {
                probs.push((num / den).clamp(CLAMP, 1.0 - CLAMP));
            }
        }
        if probs.is_empty() {
            return 0.5;
        }
        if probs.len() > MAX_FEATURES {
            probs.select_nth_unstable_by(MAX_FEATURES - 1, |a, b| {
                (b - 0.5).abs().total_cmp(&(a - 0.5).abs())
            });
            probs.truncate(MAX_FEATURES);
        }
        let (ham_sum, spam_sum) = ln_products(&probs);
        let dof = 2 * probs.len();
        let h = chi2_survival(-2.0 * ham_sum, dof);
        let s = chi2_survival(-2.0 * spam_sum, dof);
        ((1.0 + h - s) / 2.0).clamp(0.0, 1.0)
    }

    /// Bytes `write` appends: the two message counts and every coordinate's two counts.
    pub fn encoded_len(&self) -> usize {
        16 + self.counts.len() * 4
    }

    pub fn write(&self, buf: &mut Vec<u8>) {
        buf.extend_from_slice(&self.spam.load(Relaxed).to_le_bytes());
        buf.extend_from_slice(&self.ham.load(Relaxed).to_le_bytes());
        for c in self.counts.iter() {
            buf.extend_from_slice(&c.load(Relaxed).to_le_bytes());
        }
    }

    /// Reads what `write` wrote; `false` when `bytes` is not exactly that long.
    pub fn read(&self, bytes: &[u8]) -> bool {
        if bytes.len() != self.encoded_len() {
            return false;
        }
        let (head, counts) = bytes.split_at(16);
        let u64_at = |i: usize| u64::from_le_bytes(head[i..i + 8].try_into().expect("8 bytes"));
        self.spam.store(u64_at(0), Relaxed);
        self.ham.store(u64_at(8), Relaxed);
        super::store_u32s(&self.counts, counts);
        true
    }
}

/// Σ ln p and Σ ln (1 − p): logarithms of running products, taken only when a product nears
/// the bottom of `f64` (each factor is at least `CLAMP`), so a message costs a few `ln` calls
/// instead of two per feature.
fn ln_products(probs: &[f64]) -> (f64, f64) {
    const LOW: f64 = 1e-200;
    let (mut ln_p, mut ln_q) = (0.0, 0.0);
    let (mut p_prod, mut q_prod) = (1.0f64, 1.0f64);
    for &p in probs {
        p_prod *= p;
        q_prod *= 1.0 - p;
        if p_prod < LOW {
            ln_p += p_prod.ln();
            p_prod = 1.0;
        }
        if q_prod < LOW {
            ln_q += q_prod.ln();
            q_prod = 1.0;
        }
    }
    (ln_p + p_prod.ln(), ln_q + q_prod.ln())
}

/// The probability that a chi-square variable with `dof` (even) degrees of freedom exceeds `x2`:
/// e^-m · Σ_{i < dof/2} m^i / i!, m = x2 / 2. Far in the tail `e^-m` underflows to 0, which is
/// the answer to the precision that matters here.
fn chi2_survival(x2: f64, dof: usize) -> f64 {
    let m = x2 / 2.0;
    let mut term = (-m).exp();
    let mut sum = term;
    for i in 1..dof / 2 {
        term *= m / i as f64;
        sum += term;
    }
    sum.min(1.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chi2_survival_matches_known_values() {
        // dof 2: e^(-x/2)
        assert!((chi2_survival(2.0, 2) - (-1.0f64).exp()).abs() < 1e-12);
        // dof 4, x2 = 9.4877: the 5% critical value
        assert!((chi2_survival(9.4877, 4) - 0.05).abs() < 1e-4);
        assert_eq!(chi2_survival(0.0, 10), 1.0);
        assert_eq!(chi2_survival(1e6, 300), 0.0);
    }

    #[test]
    fn log_products_match_sums_of_logs_without_underflow() {
        let probs: Vec<f64> = (0..150)
            .map(|i| {
                if i % 3 == 0 {
                    CLAMP
                } else {
                    0.3 + (i % 7) as f64 * 0.1
                }
            })
            .collect();
        let (p, q) = ln_products(&probs);
        let want_p: f64 = probs.iter().map(|x| x.ln()).sum();
        let want_q: f64 = probs.iter().map(|x| (1.0 - x).ln()).sum();
        assert!((p - want_p).abs() < 1e-9 * want_p.abs(), "{p} {want_p}");
        assert!(
            (q - want_q).abs() < 1e-9 * want_q.abs().max(1.0),
            "{q} {want_q}"
        );
    }

    fn learn_n(b: &Bayes, hashes: &[u64], class: Class, n: usize) {
        for _ in 0..n {
            b.learn(hashes, class);
        }
    }

    #[test]
    fn features_of_one_class_decide_and_mixed_evidence_stays_near_half() {
        let b = Bayes::new(16);
        assert_eq!(
            b.probability(&[1, 2, 3]),
            0.5,
            "nothing learned: no opinion"
        );
        learn_n(&b, &[1, 2, 3, 100], Class::Spam, 30);
        learn_n(&b, &[4, 5, 6, 100], Class::Ham, 30);
        assert!(b.probability(&[1, 2, 3]) > 0.99);
        assert!(b.probability(&[4, 5, 6]) < 0.01);
        // as much evidence each way: neither
        let mixed = b.probability(&[1, 2, 3, 4, 5, 6]);
        assert!((mixed - 0.5).abs() < 0.05, "{mixed}");
        // a feature both classes have says nothing; an unknown one neither
        assert_eq!(b.probability(&[100, 7777]), 0.5);
    }

    #[test]
    fn a_long_message_is_judged_on_its_most_telling_features() {
        let b = Bayes::new(16);
        let spam: Vec<u64> = (0..400).collect();
        learn_n(&b, &spam, Class::Spam, 10);
        learn_n(&b, &[10_000], Class::Ham, 10);
        assert!(b.probability(&spam) > 0.99);
    }

    #[test]
    fn counts_survive_write_and_read() {
        let a = Bayes::new(16);
        learn_n(&a, &[1, 2], Class::Spam, 3);
        learn_n(&a, &[3], Class::Ham, 2);
        let mut buf = Vec::new();
        a.write(&mut buf);
        assert_eq!(buf.len(), a.encoded_len());
        let b = Bayes::new(16);
        assert!(b.read(&buf));
        assert_eq!(b.learned(), (3, 2));
        assert_eq!(b.probability(&[1, 3]), a.probability(&[1, 3]));
        assert!(
            !Bayes::new(16).read(&buf[1..]),
            "a short section is refused"
        );
    }
}
