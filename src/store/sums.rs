//! Window sums without a heap allocation per key: up to `INLINE_WINDOWS` windows are kept in
//! place; more (an unusual configuration) spill to a `Vec`. Dereferences to `[Counts]`, so it
//! reads like the `Vec<Counts>` it replaced (`get`, indexing, `iter`, `&sums` in a `for`).

use std::ops::{Deref, DerefMut};

use serde::{Serialize, Serializer};

use super::Counts;

/// Windows kept without allocating: the five default windows and one more.
pub const INLINE_WINDOWS: usize = 6;

/// The sums of one key over the configured windows.
#[derive(Clone)]
pub struct WindowSums(Repr);

// The inline variant is large on purpose: avoiding the heap is the point.
#[allow(clippy::large_enum_variant)]
#[derive(Clone)]
enum Repr {
    Inline {
        len: u8,
        sums: [Counts; INLINE_WINDOWS],
    },
    Heap(Vec<Counts>),
}

impl WindowSums {
    /// `len` windows of zeros.
    #[inline]
    pub fn zeros(len: usize) -> WindowSums {
        if len <= INLINE_WINDOWS {
            WindowSums(Repr::Inline {
                // len <= INLINE_WINDOWS < 256
                len: len as u8,
                sums: [[0; super::COUNTERS]; INLINE_WINDOWS],
            })
        } else {
            Self::heap(len)
        }
    }

    #[cold]
    fn heap(len: usize) -> WindowSums {
        WindowSums(Repr::Heap(vec![Counts::default(); len]))
    }
}

impl Default for WindowSums {
    fn default() -> Self {
        WindowSums::zeros(0)
    }
}

impl Deref for WindowSums {
    type Target = [Counts];

    fn deref(&self) -> &[Counts] {
        match &self.0 {
            Repr::Inline { len, sums } => sums.get(..usize::from(*len)).unwrap_or(&[]),
            Repr::Heap(v) => v,
        }
    }
}

impl DerefMut for WindowSums {
    fn deref_mut(&mut self) -> &mut [Counts] {
        match &mut self.0 {
            Repr::Inline { len, sums } => sums.get_mut(..usize::from(*len)).unwrap_or(&mut []),
            Repr::Heap(v) => v,
        }
    }
}

impl From<Vec<Counts>> for WindowSums {
    fn from(v: Vec<Counts>) -> Self {
        let mut sums = WindowSums::zeros(v.len());
        sums.copy_from_slice(&v);
        sums
    }
}

impl<'a> IntoIterator for &'a WindowSums {
    type Item = &'a Counts;
    type IntoIter = std::slice::Iter<'a, Counts>;

    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

impl PartialEq for WindowSums {
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}

impl Eq for WindowSums {}

impl std::fmt::Debug for WindowSums {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl Serialize for WindowSums {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        (**self).serialize(serializer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_like_a_vec() {
        for len in [0, 1, 5, INLINE_WINDOWS, INLINE_WINDOWS + 1, 20] {
            let v: Vec<Counts> = (0..len as u64).map(|i| [i, i + 1, 0, 0, i * 7]).collect();
            let mut s = WindowSums::from(v.clone());
            assert_eq!(&*s, v.as_slice());
            assert_eq!(s.len(), len);
            assert_eq!(s.get(len), None);
            assert_eq!(
                serde_json::to_string(&s).unwrap(),
                serde_json::to_string(&v).unwrap()
            );
            assert_eq!(format!("{s:?}"), format!("{v:?}"));
            for c in s.iter_mut() {
                c[3] = 9;
            }
            assert!((&s).into_iter().all(|c| c[3] == 9));
            assert_eq!(s, s.clone());
            assert_eq!(WindowSums::zeros(len).len(), len);
        }
        assert!(WindowSums::default().is_empty());
    }
}
