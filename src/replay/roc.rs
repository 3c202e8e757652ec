//! How well scores separate spam from ham, as the TREC spam tracks report it: 1 − AUC (the
//! share of (spam, ham) pairs the score orders wrongly, ties counting half) and the spam caught
//! at a fixed budget of false positives, independent of where the action thresholds sit.

use serde::Serialize;

/// The area above the ROC curve of `spam` against `ham` scores, in percent (TREC's 1-ROCA%).
/// `None` when either side is empty.
pub fn one_minus_auc_pct(spam: &[f64], ham: &[f64]) -> Option<f64> {
    if spam.is_empty() || ham.is_empty() {
        return None;
    }
    let mut ham = ham.to_vec();
    ham.sort_by(f64::total_cmp);
    // For each spam score: ham scoring above it is a wrong order, equal half of one.
    let mut wrong = 0.0f64;
    for &s in spam {
        let below = ham.partition_point(|&h| h < s);
        let not_above = ham.partition_point(|&h| h <= s);
        wrong += (ham.len() - not_above) as f64 + (not_above - below) as f64 / 2.0;
    }
    Some(wrong * 100.0 / (spam.len() as f64 * ham.len() as f64))
}

/// The spam caught by the lowest threshold that keeps the ham at or above it within
/// `budget_pct` percent of the ham: `(threshold, spam caught %)`. A message counts as caught
/// when its score is at least the threshold. `None` when either side is empty.
pub fn caught_at_budget(spam: &[f64], ham: &[f64], budget_pct: f64) -> Option<(f64, f64)> {
    if spam.is_empty() || ham.is_empty() {
        return None;
    }
    let mut ham = ham.to_vec();
    ham.sort_by(|a, b| b.total_cmp(a));
    let allowed = ((budget_pct / 100.0) * ham.len() as f64).floor() as usize;
    // The threshold sits just above the first ham score that would exceed the budget; every
    // ham score at or above it is one of the `allowed` highest.
    let threshold = match ham.get(allowed) {
        None => f64::NEG_INFINITY,
        Some(&h) => next_up(h),
    };
    let caught = spam.iter().filter(|&&s| s >= threshold).count();
    Some((threshold, caught as f64 * 100.0 / spam.len() as f64))
}

/// The smallest score above `x` that a report can print apart from it.
fn next_up(x: f64) -> f64 {
    x + 1e-9_f64.max(x.abs() * 1e-12)
}

/// One line of the separation table.
#[derive(Debug, Clone, Serialize)]
pub struct Separation {
    /// `ham` or `hard ham`.
    pub against: &'static str,
    pub one_minus_auc_pct: f64,
    /// The false-positive budget, in percent of `against`.
    pub budget_pct: f64,
    pub spam_caught_pct: f64,
    /// The score from which a message is counted caught at that budget.
    pub threshold: f64,
}

/// The TREC figures of spam against ham (budget 0.1%) and hard ham (budget 10%).
pub fn separation(spam: &[f64], ham: &[f64], hard_ham: &[f64]) -> Vec<Separation> {
    [("ham", ham, 0.1), ("hard ham", hard_ham, 10.0)]
        .into_iter()
        .filter_map(|(against, other, budget_pct)| {
            let auc = one_minus_auc_pct(spam, other)?;
            let (threshold, spam_caught_pct) = caught_at_budget(spam, other, budget_pct)?;
            Some(Separation {
                against,
                one_minus_auc_pct: auc,
                budget_pct,
                spam_caught_pct,
                threshold,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_perfect_order_has_no_area_above_and_a_reversed_one_all() {
        assert_eq!(one_minus_auc_pct(&[5.0, 6.0], &[1.0, 2.0]), Some(0.0));
        assert_eq!(one_minus_auc_pct(&[1.0, 2.0], &[5.0, 6.0]), Some(100.0));
        // Ties count half: one spam equal to one of two ham, above the other.
        assert_eq!(one_minus_auc_pct(&[2.0], &[2.0, 1.0]), Some(25.0));
        assert_eq!(one_minus_auc_pct(&[], &[1.0]), None);
    }

    #[test]
    fn the_budget_sets_the_threshold_above_the_ham_it_would_exceed() {
        let ham: Vec<f64> = (0..1000).map(f64::from).map(|x| x / 100.0).collect();
        // 0.1% of 1,000 ham: one may score at or above the threshold (9.99), not two.
        let spam = [9.975, 9.985, 9.995, 10.0];
        let (t, caught) = caught_at_budget(&spam, &ham, 0.1).unwrap();
        assert!(t > 9.98 && t <= 9.99, "{t}");
        assert_eq!(caught, 75.0);
        let above = ham.iter().filter(|&&h| h >= t).count();
        assert_eq!(above, 1);
        // A budget below one message allows none.
        let (t, _) = caught_at_budget(&spam, &ham[..10], 5.0).unwrap();
        assert!(t > ham[9]);
        // A budget of everything catches everything.
        assert_eq!(caught_at_budget(&spam, &ham, 100.0).unwrap().1, 100.0);
    }
}
