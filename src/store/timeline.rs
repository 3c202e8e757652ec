//! One key's timeline: counters per time bucket, compact for the common case.
//!
//! Most keys are touched once. Such a key is one 24-byte `Entry` in its shard's table: the key
//! (hash, type, namespace), the bucket it was touched in, and its five counters packed 12 bits
//! each. A key that needs more — a second bucket, or a counter past 4,095 — moves its buckets to
//! the shard's arena, where each bucket has full 64-bit counters (nothing ever wraps: additions
//! saturate at `u64::MAX`, which no real count reaches). Memory thus grows with a key's
//! non-empty buckets, not with the length of the windows.
//!
//! Buckets live at the finest resolution first; as they age past a resolution's horizon they
//! fold into the enclosing bucket of the next coarser one, and past the last horizon they are
//! dropped. Every count is in exactly one bucket at any time, so window sums never count twice.

use std::num::NonZeroU8;

use super::{Counts, Layout, COUNTERS};

/// Bits per packed inline counter, and the largest value it holds.
const INLINE_BITS: u32 = 12;
const INLINE_MAX: u64 = (1 << INLINE_BITS) - 1;

/// Tag bit: the buckets are in the arena (`word` is the index). Bit 0 of a tag is always set
/// (`NonZeroU8::MIN`), so that an empty table slot (`Option<Entry>`) takes no more room.
const IN_ARENA: u8 = 2;

/// The tag of an inline bucket at `resolution`.
fn inline_tag(resolution: u8) -> NonZeroU8 {
    NonZeroU8::MIN | resolution << 2
}

fn arena_tag() -> NonZeroU8 {
    NonZeroU8::MIN | IN_ARENA
}

/// A key's place in a shard's table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Entry {
    pub hash: u64,
    pub kind: u16,
    pub namespace: u8,
    /// 1, and `IN_ARENA` or the resolution of the inline bucket shifted left by two.
    tag: NonZeroU8,
    /// The inline bucket's id, or the arena index.
    word: u32,
    /// Inline counters, `INLINE_BITS` each.
    packed: u64,
}

/// One bucket with full counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bucket {
    /// Index into `Layout::resolutions`.
    pub resolution: u8,
    /// Start time divided by the resolution's width.
    pub id: u32,
    pub counts: Counts,
}

/// Timelines that outgrew their inline bucket, with slot reuse. Boxed on first use so that a
/// shard whose keys all fit inline pays one pointer for it (and the shard fits a cache line).
#[derive(Debug, Default)]
pub(crate) struct Arena(Option<Box<Slots>>);

#[derive(Debug, Default)]
struct Slots {
    slots: Vec<Vec<Bucket>>,
    free: Vec<u32>,
}

impl Arena {
    fn alloc(&mut self, buckets: Vec<Bucket>) -> u32 {
        let a = self.0.get_or_insert_with(Box::default);
        match a.free.pop() {
            Some(i) => {
                if let Some(slot) = a.slots.get_mut(i as usize) {
                    *slot = buckets;
                }
                i
            }
            None => {
                a.slots.push(buckets);
                u32::try_from(a.slots.len() - 1).unwrap_or(u32::MAX)
            }
        }
    }

    fn release(&mut self, index: u32) {
        let Some(a) = self.0.as_mut() else {
            return;
        };
        if let Some(slot) = a.slots.get_mut(index as usize) {
            *slot = Vec::new();
            a.free.push(index);
        }
        // Give the box back when nothing is left in it (a shard after a sweep).
        if a.free.len() == a.slots.len() {
            self.0 = None;
        }
    }

    fn get(&self, index: u32) -> Option<&Vec<Bucket>> {
        self.0.as_ref()?.slots.get(index as usize)
    }

    fn get_mut(&mut self, index: u32) -> Option<&mut Vec<Bucket>> {
        self.0.as_mut()?.slots.get_mut(index as usize)
    }

    /// Heap bytes held by the arena's buckets.
    pub fn bytes(&self) -> usize {
        self.0.as_ref().map_or(0, |a| {
            std::mem::size_of::<Slots>()
                + a.slots.capacity() * std::mem::size_of::<Vec<Bucket>>()
                + a.free.capacity() * std::mem::size_of::<u32>()
                + a.slots
                    .iter()
                    .map(|s| s.capacity() * std::mem::size_of::<Bucket>())
                    .sum::<usize>()
        })
    }
}

fn pack(counts: &Counts) -> Option<u64> {
    let mut packed = 0u64;
    for (i, &c) in counts.iter().enumerate() {
        if c > INLINE_MAX {
            return None;
        }
        packed |= c << (i as u32 * INLINE_BITS);
    }
    Some(packed)
}

fn unpack(packed: u64) -> Counts {
    let mut counts = [0u64; COUNTERS];
    for (i, c) in counts.iter_mut().enumerate() {
        *c = (packed >> (i as u32 * INLINE_BITS)) & INLINE_MAX;
    }
    counts
}

fn add_counts(into: &mut Counts, delta: &Counts) {
    for (a, d) in into.iter_mut().zip(delta) {
        *a = a.saturating_add(*d);
    }
}

impl Entry {
    /// A new key whose first bucket is `bucket` (at resolution 0).
    pub fn new(
        hash: u64,
        kind: u16,
        namespace: u8,
        id: u32,
        delta: &Counts,
        arena: &mut Arena,
    ) -> Entry {
        let mut entry = Entry {
            hash,
            kind,
            namespace,
            tag: inline_tag(0),
            word: id,
            packed: 0,
        };
        match pack(delta) {
            Some(packed) => entry.packed = packed,
            None => entry.move_to_arena(
                vec![Bucket {
                    resolution: 0,
                    id,
                    counts: *delta,
                }],
                arena,
            ),
        }
        entry
    }

    /// A key restored from a snapshot with these buckets.
    pub fn from_buckets(
        hash: u64,
        kind: u16,
        namespace: u8,
        mut buckets: Vec<Bucket>,
        arena: &mut Arena,
    ) -> Entry {
        buckets.sort_unstable_by_key(|b| (b.resolution, b.id));
        let mut entry = Entry {
            hash,
            kind,
            namespace,
            tag: inline_tag(0),
            word: 0,
            packed: 0,
        };
        match buckets.as_slice() {
            [only] if pack(&only.counts).is_some() => {
                entry.tag = inline_tag(only.resolution);
                entry.word = only.id;
                entry.packed = pack(&only.counts).unwrap_or(0);
            }
            _ => entry.move_to_arena(buckets, arena),
        }
        entry
    }

    fn move_to_arena(&mut self, buckets: Vec<Bucket>, arena: &mut Arena) {
        self.tag = arena_tag();
        self.word = arena.alloc(buckets);
        self.packed = 0;
    }

    fn inline_bucket(&self) -> Option<Bucket> {
        (self.tag.get() & IN_ARENA == 0).then(|| Bucket {
            resolution: self.tag.get() >> 2,
            id: self.word,
            counts: unpack(self.packed),
        })
    }

    /// The buckets, oldest resolution-0 first (a copy for inline entries).
    pub fn buckets<'a>(&self, arena: &'a Arena) -> BucketsRef<'a> {
        match self.inline_bucket() {
            Some(b) => BucketsRef::Inline(b),
            None => BucketsRef::Arena(arena.get(self.word).map_or(&[][..], Vec::as_slice)),
        }
    }

    /// Adds `delta` to the resolution-0 bucket `id`.
    pub fn add(&mut self, id: u32, delta: &Counts, arena: &mut Arena) {
        if let Some(mut b) = self.inline_bucket() {
            if b.resolution == 0 && b.id == id {
                add_counts(&mut b.counts, delta);
                match pack(&b.counts) {
                    Some(packed) => self.packed = packed,
                    None => self.move_to_arena(vec![b], arena),
                }
                return;
            }
            let mut buckets = vec![b];
            insert_bucket(&mut buckets, 0, id, delta);
            self.move_to_arena(buckets, arena);
            return;
        }
        if let Some(buckets) = arena.get_mut(self.word) {
            insert_bucket(buckets, 0, id, delta);
        }
    }

    /// Folds aged buckets into coarser ones and drops expired ones. Returns false when the key
    /// has nothing left (and has released its arena slot).
    pub fn age(&mut self, now: u64, layout: &Layout, arena: &mut Arena) -> bool {
        if let Some(b) = self.inline_bucket() {
            return match layout.settle(b.resolution as usize, b.id, now) {
                Some((resolution, id)) => {
                    self.tag = inline_tag(resolution as u8);
                    self.word = id;
                    true
                }
                None => false,
            };
        }
        let Some(buckets) = arena.get_mut(self.word) else {
            return false;
        };
        if buckets.iter().all(|b| {
            layout.settle(b.resolution as usize, b.id, now) == Some((b.resolution as usize, b.id))
        }) {
            return true; // nothing aged: the common case, no allocation
        }
        let old = std::mem::take(buckets);
        for b in old {
            if let Some((resolution, id)) = layout.settle(b.resolution as usize, b.id, now) {
                insert_bucket(buckets, resolution as u8, id, &b.counts);
            }
        }
        if buckets.is_empty() {
            arena.release(self.word);
            return false;
        }
        // Back inline when one small bucket is left.
        if let [only] = buckets.as_slice() {
            if let Some(packed) = pack(&only.counts) {
                let (resolution, id) = (only.resolution, only.id);
                arena.release(self.word);
                self.tag = inline_tag(resolution);
                self.word = id;
                self.packed = packed;
            }
        }
        true
    }

    /// Releases the arena slot of a key being removed.
    pub fn release(&self, arena: &mut Arena) {
        if self.tag.get() & IN_ARENA != 0 {
            arena.release(self.word);
        }
    }
}

/// Adds to bucket (resolution, id), keeping buckets sorted by (resolution, id).
fn insert_bucket(buckets: &mut Vec<Bucket>, resolution: u8, id: u32, delta: &Counts) {
    match buckets.binary_search_by(|b| (b.resolution, b.id).cmp(&(resolution, id))) {
        Ok(i) => add_counts(&mut buckets[i].counts, delta),
        Err(i) => buckets.insert(
            i,
            Bucket {
                resolution,
                id,
                counts: *delta,
            },
        ),
    }
}

/// A key's buckets without copying arena storage.
pub enum BucketsRef<'a> {
    Inline(Bucket),
    Arena(&'a [Bucket]),
}

impl BucketsRef<'_> {
    pub fn as_slice(&self) -> &[Bucket] {
        match self {
            BucketsRef::Inline(b) => std::slice::from_ref(b),
            BucketsRef::Arena(s) => s,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::StoreConfig;

    /// The default layout: 10-minute buckets for a day, daily buckets for 14 days.
    fn layout() -> Layout {
        Layout::new(&StoreConfig::default().resolutions).unwrap()
    }

    #[test]
    fn entry_is_24_bytes() {
        assert_eq!(std::mem::size_of::<Entry>(), 24);
    }

    #[test]
    fn inline_until_it_cannot_be() {
        let mut arena = Arena::default();
        let mut e = Entry::new(1, 8, 0, 100, &[1, 1, 0, 0, 0], &mut arena);
        e.add(100, &[4094, 0, 0, 0, 0], &mut arena);
        assert!(e.inline_bucket().is_some());
        assert_eq!(e.buckets(&arena).as_slice()[0].counts, [4095, 1, 0, 0, 0]);
        e.add(100, &[1, 0, 0, 0, 0], &mut arena);
        assert!(
            e.inline_bucket().is_none(),
            "past 12 bits moves to the arena"
        );
        assert_eq!(e.buckets(&arena).as_slice()[0].counts[0], 4096);
        e.add(101, &[1, 0, 0, 0, 0], &mut arena);
        assert_eq!(e.buckets(&arena).as_slice().len(), 2);
    }

    #[test]
    fn counters_never_wrap() {
        let mut arena = Arena::default();
        let mut e = Entry::new(1, 8, 0, 7, &[u64::MAX - 1, 0, 0, 0, 0], &mut arena);
        e.add(7, &[5, 0, 0, 0, 0], &mut arena);
        assert_eq!(e.buckets(&arena).as_slice()[0].counts[0], u64::MAX);
    }

    #[test]
    fn aging_folds_then_drops() {
        let layout = layout();
        let mut arena = Arena::default();
        let t0 = 1_000_000_200u64; // inside a day
        let id = (t0 / 600) as u32;
        let mut e = Entry::new(1, 8, 0, id, &[3, 0, 0, 0, 0], &mut arena);
        e.add(id + 1, &[2, 0, 0, 0, 0], &mut arena);
        assert!(e.age(t0 + 3_600, &layout, &mut arena));
        assert_eq!(e.buckets(&arena).as_slice().len(), 2, "still fine-grained");
        // Two days later both 10-minute buckets have folded into their day, back inline.
        assert!(e.age(t0 + 2 * 86_400, &layout, &mut arena));
        let buckets = e.buckets(&arena).as_slice().to_vec();
        assert_eq!(buckets.len(), 1);
        assert_eq!(buckets[0].resolution, 1);
        assert_eq!(buckets[0].id, (t0 / 86_400) as u32);
        assert_eq!(buckets[0].counts[0], 5);
        assert!(e.inline_bucket().is_some());
        assert!(
            !e.age(t0 + 20 * 86_400, &layout, &mut arena),
            "gone after 14 days"
        );
        assert!(arena.0.is_none(), "the arena box is given back when empty");
    }
}
