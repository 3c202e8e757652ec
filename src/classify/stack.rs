//! One learned verdict from the two models: a small logistic regression over the FTRL model's
//! and naive Bayes' log-odds (stacking), trained on what each model said of a message *before*
//! it learned that message, so its weights are fitted on held-out predictions.
//!
//! Owns: the stacking weights, their training, the combining and its bounds, their snapshot
//! section. Never touches: the base models (the classifier hands it their predictions under its
//! training lock), Lua.
//!
//! Why: scored as two symbol families, the models vote twice on the same evidence: early in a
//! deployment both were sure of spam on a few words and their points added up over ham. The
//! stack learns how far to trust each (and FTRL when Bayes is torn, near 0.5, on a message with
//! strong evidence both ways), and its answer is bounded by the two models' own: the combined
//! log-odds lie between theirs, so agreement never adds up to more than the surer model says.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Inputs: FTRL's log-odds, Bayes' log-odds, FTRL's log-odds when Bayes is torn. No bias: the
/// FTRL model carries the classes' prior (a bias feature) and a learned prior here would move
/// every message by the mix of mail learned, not by its evidence.
const INPUTS: usize = 3;
/// Probabilities are clamped to this distance from 0 and 1 before their log-odds (±9.2), so
/// one model's certainty stays a finite input.
const EDGE: f64 = 1e-4;
/// Inputs are divided by this so they are of order one for the step size.
const SCALE: f64 = 9.2;
/// AdaGrad's step size: each weight moves at most about this much per example early on.
const STEP: f64 = 0.1;
/// Before any training: FTRL alone, the model the rules trusted first.
const INITIAL: [f64; INPUTS] = [1.0, 0.0, 0.0];

pub(crate) fn logit(p: f64) -> f64 {
    let p = p.clamp(EDGE, 1.0 - EDGE);
    (p / (1.0 - p)).ln()
}

fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x.clamp(-35.0, 35.0)).exp())
}

/// The stacking weights (as `f64` bits: read without a lock by every scan, written under the
/// classifier's training lock) and the held-out examples they were fitted on.
pub struct Stack {
    weights: [AtomicU64; INPUTS],
    /// AdaGrad's sum of squared gradients per weight.
    squares: [AtomicU64; INPUTS],
    spam: AtomicU64,
    ham: AtomicU64,
}

impl Default for Stack {
    fn default() -> Self {
        Stack {
            weights: INITIAL.map(|w| AtomicU64::new(w.to_bits())),
            squares: [0.0f64; INPUTS].map(|s| AtomicU64::new(s.to_bits())),
            spam: AtomicU64::new(0),
            ham: AtomicU64::new(0),
        }
    }
}

/// The stack's inputs from the two models' log-odds.
fn inputs(ftrl: f64, bayes: f64) -> [f64; INPUTS] {
    // Bayes' chi-square answers near 0.5 when strong evidence points both ways: 1 then, 0 when
    // it is sure either way.
    let torn = 1.0 - (2.0 * sigmoid(bayes) - 1.0).abs();
    [ftrl / SCALE, bayes / SCALE, ftrl * torn / SCALE]
}

impl Stack {
    /// Held-out examples it learned from, per class.
    pub fn learned(&self) -> (u64, u64) {
        (self.spam.load(Relaxed), self.ham.load(Relaxed))
    }

    pub fn weights(&self) -> [f64; INPUTS] {
        std::array::from_fn(|i| f64::from_bits(self.weights[i].load(Relaxed)))
    }

    /// Whether it has learned from `min` held-out messages of each class.
    pub fn ready(&self, min: u64) -> bool {
        let (spam, ham) = self.learned();
        spam >= min && ham >= min
    }

    /// The combined spam probability of a message the models put at `ftrl` and `bayes`; FTRL's
    /// own until the stack is `ready(min)`. The result's log-odds lie between the two models'
    /// (each clamped at ±9.2).
    pub fn combine(&self, ftrl: f64, bayes: f64, min: u64) -> f64 {
        if !self.ready(min) || !bayes.is_finite() {
            return ftrl;
        }
        let (lf, lb) = (logit(ftrl), logit(bayes));
        let w = self.weights();
        let z: f64 = inputs(lf, lb).iter().zip(w).map(|(x, w)| x * w).sum();
        sigmoid(z.clamp(lf.min(lb), lf.max(lb)))
    }

    /// One AdaGrad step of log loss on a message the models put at `ftrl` and `bayes` before
    /// learning it. The caller serializes learns.
    pub fn learn(&self, ftrl: f64, bayes: f64, spam: bool) {
        // One bad number would stay in the weights for good.
        if !ftrl.is_finite() || !bayes.is_finite() {
            return;
        }
        let x = inputs(logit(ftrl), logit(bayes));
        let w = self.weights();
        let z: f64 = x.iter().zip(w).map(|(x, w)| x * w).sum();
        let g = sigmoid(z) - if spam { 1.0 } else { 0.0 };
        for i in 0..INPUTS {
            let gi = g * x[i];
            let sq = f64::from_bits(self.squares[i].load(Relaxed)) + gi * gi;
            self.squares[i].store(sq.to_bits(), Relaxed);
            if sq > 0.0 {
                let wi = w[i] - STEP * gi / sq.sqrt();
                self.weights[i].store(wi.to_bits(), Relaxed);
            }
        }
        let counter = if spam { &self.spam } else { &self.ham };
        counter.fetch_add(1, Relaxed);
    }

    /// Bytes `write` appends.
    pub const ENCODED_LEN: usize = 16 + INPUTS * 16;

    pub fn write(&self, buf: &mut Vec<u8>) {
        buf.extend_from_slice(&self.spam.load(Relaxed).to_le_bytes());
        buf.extend_from_slice(&self.ham.load(Relaxed).to_le_bytes());
        for v in self.weights.iter().chain(&self.squares) {
            buf.extend_from_slice(&v.load(Relaxed).to_le_bytes());
        }
    }

    /// Reads what `write` wrote; `false` when `bytes` is not exactly that long, holds a weight
    /// that is not a finite number, or a sum of squares below zero.
    pub fn read(&self, bytes: &[u8]) -> bool {
        if bytes.len() != Self::ENCODED_LEN {
            return false;
        }
        let vals: Vec<u64> = bytes
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
            .collect();
        let (weights, squares) = vals[2..].split_at(INPUTS);
        let number = |v: &u64| f64::from_bits(*v);
        if !weights.iter().map(number).all(f64::is_finite)
            || !squares
                .iter()
                .map(number)
                .all(|s| s.is_finite() && s >= 0.0)
        {
            return false;
        }
        self.spam.store(vals[0], Relaxed);
        self.ham.store(vals[1], Relaxed);
        for (slot, &v) in self.weights.iter().chain(&self.squares).zip(&vals[2..]) {
            slot.store(v, Relaxed);
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ftrl_alone_until_enough_held_out_examples() {
        let s = Stack::default();
        assert_eq!(s.combine(0.97, 0.2, 5), 0.97);
        for _ in 0..4 {
            s.learn(0.9, 0.9, true);
            s.learn(0.1, 0.1, false);
        }
        assert_eq!(s.combine(0.97, 0.2, 5), 0.97, "4 of each: still FTRL alone");
        s.learn(0.9, 0.9, true);
        s.learn(0.1, 0.1, false);
        assert_ne!(
            s.combine(0.97, 0.2, 5),
            0.97,
            "5 of each: the stack answers"
        );
    }

    #[test]
    fn the_combined_log_odds_lie_between_the_models() {
        let s = Stack::default();
        for i in 0..2000 {
            // Bayes right, FTRL noisy: the stack should lean on Bayes.
            let spam = i % 2 == 0;
            let f = if (i / 2) % 3 == 0 {
                0.5
            } else if spam {
                0.8
            } else {
                0.2
            };
            let b = if spam { 0.99 } else { 0.01 };
            s.learn(f, b, spam);
        }
        for (f, b) in [
            (0.999, 0.9999),
            (0.6, 0.99),
            (0.01, 0.7),
            (0.5, 0.5),
            (0.9, 0.1),
        ] {
            let p = s.combine(f, b, 10);
            let (lo, hi) = (logit(f).min(logit(b)), logit(f).max(logit(b)));
            let l = logit(p);
            assert!(l >= lo - 1e-9 && l <= hi + 1e-9, "{f} {b} -> {p}");
        }
        let w = s.weights();
        assert!(w[1] > w[0], "learned to trust the better model: {w:?}");
        // Both sure of spam: never surer than the surer one.
        assert!(s.combine(0.999, 0.9999, 10) <= 0.9999 + 1e-12);
    }

    #[test]
    fn a_bad_number_is_neither_learned_nor_combined() {
        let s = Stack::default();
        for _ in 0..10 {
            s.learn(0.9, 0.8, true);
            s.learn(0.1, 0.2, false);
        }
        let before = (s.weights(), s.learned());
        s.learn(f64::NAN, 0.5, true);
        s.learn(0.5, f64::INFINITY, false);
        assert_eq!((s.weights(), s.learned()), before);
        assert_eq!(s.combine(0.7, f64::NAN, 5), 0.7);
        assert!(s.combine(0.7, 0.9, 5).is_finite());
    }

    #[test]
    fn round_trips_and_refuses_garbage() {
        let s = Stack::default();
        for i in 0..50 {
            s.learn(0.3 + (i % 5) as f64 / 10.0, 0.6, i % 2 == 0);
        }
        let mut buf = Vec::new();
        s.write(&mut buf);
        assert_eq!(buf.len(), Stack::ENCODED_LEN);
        let t = Stack::default();
        assert!(t.read(&buf));
        assert_eq!(t.weights(), s.weights());
        assert_eq!(t.learned(), s.learned());
        let mut bad = buf.clone();
        bad[16..24].copy_from_slice(&f64::NAN.to_bits().to_le_bytes());
        assert!(!Stack::default().read(&bad));
        assert!(!Stack::default().read(&buf[1..]));
    }
}
