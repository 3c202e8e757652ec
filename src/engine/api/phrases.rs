//! Phrase matchers for rules (`re.phrases`): the lists behind one matcher and their searches
//! through mlua (the raw methods are in `ffi/api.rs`; the matching itself in `phrases.rs`).

use mlua::{Lua, Table};

use super::BStr;
use crate::engine::ffi::Lent;
use crate::engine::phrases::{Found, PhraseSets};
use crate::engine::state::Unlimited;

/// Phrase lists behind one matcher (`re.phrases`), with the phrases to report. Lua sees a
/// table of two raw C closures over it (`phrases_call`), each with an mlua function of the same
/// work as its slow path, which owns an `Rc` of this and so keeps it alive.
pub(in crate::engine) struct Phrases {
    pub(in crate::engine) sets: PhraseSets,
    pub(in crate::engine) phrases: Vec<Vec<Vec<u8>>>,
    /// The state's memory limit (see `RegexHandle`).
    pub(in crate::engine) limit: usize,
    /// The last search's result, held here while the raw path builds its tables (a Lua error
    /// unwinds over that frame, which must own nothing).
    pub(in crate::engine) found: Lent<Vec<Found>>,
}

impl Phrases {
    /// `counts, found = P:search(text[, max])`: per list, the number of distinct phrases found
    /// as whole words, and the first `max` (default 3) of them in order of appearance (`false`
    /// for a list with none).
    pub(in crate::engine) fn search(
        &self,
        lua: &Lua,
        t: &[u8],
        max: Option<usize>,
    ) -> mlua::Result<(Table, Table)> {
        let max = max.unwrap_or(3);
        let found = self.sets.search(t);
        let _unlimited = Unlimited::new(lua, self.limit);
        let counts = lua.create_sequence_from(found.iter().map(|f| f.indices.len()))?;
        let mut lists = Vec::with_capacity(found.len());
        for (f, phrases) in found.iter().zip(&self.phrases) {
            lists.push(if f.indices.is_empty() {
                mlua::Either::Right(false)
            } else {
                mlua::Either::Left(
                    lua.create_sequence_from(
                        f.indices.iter().take(max).map(|&k| BStr(&phrases[k])),
                    )?,
                )
            });
        }
        Ok((counts, lua.create_sequence_from(lists)?))
    }

    /// `n, found = P:count(text[, max])`: `search` for the first list alone, without the
    /// per-list tables: the number of distinct phrases and the first `max` of them (nil when
    /// none). What `util.find_phrases` needs, and most texts match nothing.
    pub(in crate::engine) fn count(
        &self,
        lua: &Lua,
        t: &[u8],
        max: Option<usize>,
    ) -> mlua::Result<(usize, Option<Table>)> {
        let max = max.unwrap_or(3);
        let found = self.sets.search(t);
        let (Some(f), Some(phrases)) = (found.first(), self.phrases.first()) else {
            return Ok((0, None));
        };
        if f.indices.is_empty() {
            return Ok((0, None));
        }
        let _unlimited = Unlimited::new(lua, self.limit);
        let list =
            lua.create_sequence_from(f.indices.iter().take(max).map(|&k| BStr(&phrases[k])))?;
        Ok((f.indices.len(), Some(list)))
    }
}
