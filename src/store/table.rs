//! A shard's table of entries: open addressing with linear probing, the entries in the slots.
//!
//! A key's probe starts at slot `hash & (slots − 1)` and goes on slot by slot to the first empty
//! one; the entry is in that first slot or, displaced, in one of the next few. So a lookup reads
//! the cache line its hash names (and, now and then, the next), and nothing else: there are no
//! control bytes apart from the entries, which in a `hashbrown` table are a line of their own
//! read before the entry's. An empty slot is `None`: `Option<Entry>` is as large as `Entry` (24
//! bytes), whose tag is never zero. At most 7/8 of the slots are used, as in `hashbrown`, so a
//! probe always ends. Removing an entry moves back the later entries of its run that their
//! probes would no longer reach (no tombstones).

use super::keys::entry_hash;
use super::timeline::Entry;

/// The smallest table that has slots.
const MIN_SLOTS: usize = 8;

#[derive(Default)]
pub(crate) struct EntryTable {
    /// A power of two in length, or empty.
    slots: Box<[Option<Entry>]>,
    len: usize,
}

/// The fewest slots that hold `entries` (none for none).
fn slots_for(entries: usize) -> usize {
    if entries == 0 {
        return 0;
    }
    let mut slots = MIN_SLOTS;
    while slots / 8 * 7 < entries {
        slots *= 2;
    }
    slots
}

impl EntryTable {
    pub fn len(&self) -> usize {
        self.len
    }

    /// Entries it holds before it grows.
    pub fn capacity(&self) -> usize {
        self.slots.len() / 8 * 7
    }

    /// Bytes of its slots.
    pub fn bytes(&self) -> usize {
        std::mem::size_of_val(&*self.slots)
    }

    fn mask(&self) -> usize {
        self.slots.len().wrapping_sub(1)
    }

    /// The slot of the entry `eq` accepts in `hash`'s probe, if there is one.
    fn position(&self, hash: u64, eq: impl Fn(&Entry) -> bool) -> Option<usize> {
        let mask = self.mask();
        let mut i = hash as usize & mask;
        loop {
            match self.slots.get(i)? {
                Some(e) if eq(e) => return Some(i),
                Some(_) => i = (i + 1) & mask,
                None => return None,
            }
        }
    }

    pub fn find(&self, hash: u64, eq: impl Fn(&Entry) -> bool) -> Option<&Entry> {
        let i = self.position(hash, eq)?;
        self.slots.get(i)?.as_ref()
    }

    pub fn find_mut(&mut self, hash: u64, eq: impl Fn(&Entry) -> bool) -> Option<&mut Entry> {
        let i = self.position(hash, eq)?;
        self.slots.get_mut(i)?.as_mut()
    }

    /// Loads the slot where `hash`'s probe starts: whether it holds an entry, and that entry's
    /// key hash. The result means nothing; it is there so the load is not optimized away.
    pub fn touch(&self, hash: u64) -> u64 {
        self.slots
            .get(hash as usize & self.mask())
            .and_then(Option::as_ref)
            .map_or(0, |e| e.hash)
    }

    /// Adds an entry for a key the table does not hold.
    pub fn insert_unique(&mut self, hash: u64, entry: Entry) {
        if self.len >= self.capacity() {
            self.resize(slots_for(self.len + 1).max(self.slots.len() * 2));
        }
        self.put(hash, entry);
        self.len += 1;
    }

    /// Puts `entry` in the first empty slot of `hash`'s probe (there is one).
    fn put(&mut self, hash: u64, entry: Entry) {
        let mask = self.mask();
        let mut i = hash as usize & mask;
        while let Some(Some(_)) = self.slots.get(i) {
            i = (i + 1) & mask;
        }
        if let Some(slot) = self.slots.get_mut(i) {
            *slot = Some(entry);
        }
    }

    fn resize(&mut self, slots: usize) {
        let old = std::mem::replace(&mut self.slots, vec![None; slots].into_boxed_slice());
        for e in old.into_vec().into_iter().flatten() {
            self.put(entry_hash(&e), e);
        }
    }

    /// Removes and returns the entry `eq` accepts in `hash`'s probe.
    pub fn remove(&mut self, hash: u64, eq: impl Fn(&Entry) -> bool) -> Option<Entry> {
        let i = self.position(hash, eq)?;
        self.take(i)
    }

    /// Empties slot `hole`, then moves back each later entry of its run whose probe passes the
    /// hole (it would otherwise end there, short of the entry).
    fn take(&mut self, mut hole: usize) -> Option<Entry> {
        let removed = self.slots.get_mut(hole)?.take()?;
        self.len -= 1;
        let mask = self.mask();
        let mut j = hole;
        loop {
            j = (j + 1) & mask;
            let Some(Some(e)) = self.slots.get(j) else {
                break;
            };
            // How far `e` is from the start of its probe, and the hole from `e`.
            let displaced = j.wrapping_sub(entry_hash(e) as usize) & mask;
            if j.wrapping_sub(hole) & mask <= displaced {
                self.slots.swap(hole, j);
                hole = j;
            }
        }
        Some(removed)
    }

    /// Keeps the entries `keep` returns true for (it may change them, not their keys), visiting
    /// each once.
    pub fn retain(&mut self, mut keep: impl FnMut(&mut Entry) -> bool) {
        // An empty slot: no run crosses it.
        let Some(start) = self.slots.iter().position(Option::is_none) else {
            return;
        };
        let before = self.len;
        for slot in self.slots.iter_mut() {
            if slot.as_mut().is_some_and(|e| !keep(e)) {
                *slot = None;
                self.len -= 1;
            }
        }
        if self.len < before {
            self.close_gaps(start);
        }
    }

    /// After slots were emptied: puts each entry that is not in the first slot of its probe
    /// again from there, which moves it back as far as it can go, so that no probe ends short
    /// of its entry. Slot `start` was empty before, so no run crossed it: going round from
    /// there, the entries before one in its run have been put again when it is, and it lands in
    /// a slot already passed (at the latest its own).
    fn close_gaps(&mut self, start: usize) {
        let mask = self.mask();
        for k in 1..self.slots.len() {
            let i = (start + k) & mask;
            let Some(Some(e)) = self.slots.get(i) else {
                continue;
            };
            let hash = entry_hash(e);
            if hash as usize & mask != i {
                if let Some(e) = self.slots.get_mut(i).and_then(Option::take) {
                    self.put(hash, e);
                }
            }
        }
    }

    /// Shrinks to the fewest slots that hold its entries and `min` (none when both are zero).
    pub fn shrink_to(&mut self, min: usize) {
        let slots = slots_for(self.len.max(min));
        if slots < self.slots.len() {
            self.resize(slots);
        }
    }

    pub fn iter(&self) -> impl Iterator<Item = &Entry> {
        self.slots.iter().flatten()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::timeline::Arena;
    use proptest::prelude::*;
    use std::collections::HashMap;

    #[test]
    fn a_slot_is_an_entry() {
        assert_eq!(std::mem::size_of::<Option<Entry>>(), 24);
    }

    fn entry(hash: u64) -> Entry {
        Entry::new(hash, 1, 0, 7, &[1, 0, 0, 0, 0], &mut Arena::default())
    }

    fn is(hash: u64) -> impl Fn(&Entry) -> bool {
        move |e| e.hash == hash
    }

    #[test]
    fn grows_and_shrinks() {
        let mut t = EntryTable::default();
        assert_eq!((t.len(), t.capacity(), t.bytes()), (0, 0, 0));
        assert!(t.find(5, is(5)).is_none());
        for h in 0..1000u64 {
            let e = entry(h);
            t.insert_unique(entry_hash(&e), e);
        }
        assert_eq!(t.len(), 1000);
        assert_eq!(t.capacity(), 1792, "2048 slots, 7/8 usable");
        assert!((0..1000u64).all(|h| {
            let e = entry(h);
            t.find(entry_hash(&e), is(h)).is_some()
        }));
        t.retain(|e| e.hash < 10);
        assert_eq!(t.len(), 10);
        t.shrink_to(0);
        assert_eq!(t.capacity(), 14);
        t.retain(|_| false);
        t.shrink_to(0);
        assert_eq!((t.len(), t.bytes()), (0, 0));
    }

    /// A run that wraps round the end and loses entries inside it (found by `agrees_with_a_map`:
    /// entries were put again going round from a slot that had just been emptied, so one whose
    /// probe starts before that slot was put before the entries ahead of it).
    #[test]
    fn retain_keeps_a_wrapping_run_reachable() {
        let mut t = EntryTable::default();
        for h in [26, 0, 12, 11, 43] {
            let e = entry(h);
            t.insert_unique(entry_hash(&e), e);
        }
        assert_eq!(
            t.bytes(),
            8 * 24,
            "one run of five in eight slots, round the end"
        );
        t.retain(|e| e.hash % 3 != 0);
        for h in [26, 11, 43] {
            let e = entry(h);
            assert!(t.find(entry_hash(&e), is(h)).is_some(), "{h}");
        }
        assert_eq!(t.len(), 3);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2_000))]

        /// Inserts, removals and retains (with a few slots, so runs wrap around the end) agree
        /// with a map, and `retain` visits every entry once.
        #[test]
        fn agrees_with_a_map(ops in proptest::collection::vec((0u8..4, 0u64..48), 1..400)) {
            let mut t = EntryTable::default();
            let mut arena = Arena::default();
            let mut model: HashMap<u64, u64> = HashMap::new();
            for (op, h) in ops {
                // Few distinct table hashes: long runs, wrapping.
                let e = entry(h);
                let hash = entry_hash(&e);
                match op {
                    0 | 1 => {
                        if let Some(found) = t.find_mut(hash, is(h)) {
                            found.add(7, &[1, 0, 0, 0, 0], &mut arena);
                            *model.get_mut(&h).unwrap() += 1;
                        } else {
                            t.insert_unique(hash, e);
                            model.insert(h, 1);
                        }
                    }
                    2 => {
                        let removed = t.remove(hash, is(h)).map(|e| e.hash);
                        prop_assert_eq!(removed, model.remove(&h).map(|_| h));
                    }
                    _ => {
                        let mut visits: HashMap<u64, u32> = HashMap::new();
                        t.retain(|e| {
                            *visits.entry(e.hash).or_default() += 1;
                            e.hash % 3 != h % 3
                        });
                        prop_assert!(visits.values().all(|&v| v == 1));
                        prop_assert_eq!(visits.len(), model.len());
                        model.retain(|k, _| k % 3 != h % 3);
                        t.shrink_to(0);
                    }
                }
                prop_assert_eq!(t.len(), model.len());
                prop_assert!(t.len() <= t.capacity() || t.capacity() == 0 && t.len() == 0);
                for (k, v) in &model {
                    let e = entry(*k);
                    let found = t.find(entry_hash(&e), is(*k));
                    let seen = found.map(|e| e.buckets(&arena).as_slice()[0].counts[0]);
                    prop_assert_eq!(seen, Some(*v));
                }
                prop_assert_eq!(t.iter().count(), model.len());
            }
        }
    }
}
