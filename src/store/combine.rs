//! Figures over window counts: several keys' counts combined column by column (`msg:stat`'s
//! max, sum, min and median), and a window's spam ratio.

use super::{Counter, Counts, COUNTERS};

/// How the counts of several keys are combined, column by column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Combine {
    Max,
    Sum,
    Min,
    /// The upper median: the middle value of an odd count, the higher of the two middle ones
    /// of an even count.
    Median,
}

impl Combine {
    /// `max`, `sum`, `min` or `median`; None for anything else.
    pub fn parse(s: &[u8]) -> Option<Self> {
        match s {
            b"max" => Some(Combine::Max),
            b"sum" => Some(Combine::Sum),
            b"min" => Some(Combine::Min),
            b"median" => Some(Combine::Median),
            _ => None,
        }
    }
}

/// The elementwise max (saturating sum, min, upper median) of `rows`; zeros when there are none.
pub fn combine(rows: impl Iterator<Item = Counts>, how: Combine) -> Counts {
    let mut out = [0u64; COUNTERS];
    match how {
        Combine::Max | Combine::Sum => {
            for r in rows {
                for (o, v) in out.iter_mut().zip(r) {
                    *o = if how == Combine::Max {
                        (*o).max(v)
                    } else {
                        o.saturating_add(v)
                    };
                }
            }
        }
        Combine::Min | Combine::Median => {
            let rows: Vec<Counts> = rows.collect();
            if !rows.is_empty() {
                for (i, o) in out.iter_mut().enumerate() {
                    let mut col: Vec<u64> = rows.iter().map(|r| r[i]).collect();
                    col.sort_unstable();
                    *o = if how == Combine::Min {
                        col[0]
                    } else {
                        col[col.len() / 2]
                    };
                }
            }
        }
    }
    out
}

/// Spam among the judged messages of one window's counts: spam / (spam + ham), 0 when none was
/// judged.
pub fn spam_ratio(counts: &Counts) -> f64 {
    let spam = counts[Counter::Spam as usize];
    let judged = spam + counts[Counter::Ham as usize];
    if judged == 0 {
        0.0
    } else {
        spam as f64 / judged as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ROWS: [Counts; 4] = [
        [5, 1, 9, 0, 3],
        [2, 7, 4, 0, 8],
        [9, 3, 1, 0, 1],
        [1, 4, 6, 2, 5],
    ];

    fn of(how: Combine, rows: &[Counts]) -> Counts {
        combine(rows.iter().copied(), how)
    }

    #[test]
    fn each_combination_column_by_column() {
        assert_eq!(of(Combine::Max, &ROWS), [9, 7, 9, 2, 8]);
        assert_eq!(of(Combine::Sum, &ROWS), [17, 15, 20, 2, 17]);
        assert_eq!(of(Combine::Min, &ROWS), [1, 1, 1, 0, 1]);
        // four values: the higher of the two middle ones
        assert_eq!(of(Combine::Median, &ROWS), [5, 4, 6, 0, 5]);
        // three values: the middle one
        assert_eq!(of(Combine::Median, &ROWS[..3]), [5, 3, 4, 0, 3]);
        assert_eq!(of(Combine::Median, &ROWS[..1]), ROWS[0]);
    }

    #[test]
    fn no_rows_are_zeros_and_sums_saturate() {
        for how in [Combine::Max, Combine::Sum, Combine::Min, Combine::Median] {
            assert_eq!(of(how, &[]), [0; COUNTERS], "{how:?}");
        }
        let big = [[u64::MAX - 1, 0, 0, 0, 0], [5, 0, 0, 0, 0]];
        assert_eq!(of(Combine::Sum, &big)[0], u64::MAX);
    }

    #[test]
    fn names_parse_and_others_do_not() {
        assert_eq!(Combine::parse(b"max"), Some(Combine::Max));
        assert_eq!(Combine::parse(b"sum"), Some(Combine::Sum));
        assert_eq!(Combine::parse(b"min"), Some(Combine::Min));
        assert_eq!(Combine::parse(b"median"), Some(Combine::Median));
        for bad in [&b""[..], b"MAX", b"mean", b"max "] {
            assert_eq!(Combine::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn spam_ratio_of_the_judged_only() {
        assert_eq!(spam_ratio(&[10, 0, 0, 0, 0]), 0.0);
        assert_eq!(spam_ratio(&[10, 3, 1, 7, 7]), 0.75);
        assert_eq!(spam_ratio(&[1, 2, 0, 0, 0]), 1.0);
    }
}
