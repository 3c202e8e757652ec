//! Lua patterns that a sender can make expensive: a rule set's `string.find`, `match`, `gmatch`
//! and `gsub` patterns, each run against inputs made from its own items, measured by the work
//! Lua's matcher does (its steps, counted in `vendor/lua-5.4.8/lstrlib.c`) at two lengths.
//! Work that grows faster than the input flags the pattern: it backtracks, and a sender who
//! writes the right subject or anchor text makes it cost seconds. The budget stops such a call
//! (`preempt`), but the rule is then skipped, so the default rules must have none and `shrike
//! rules check` reports any a rule author adds.
//!
//! Steps, not time: the same count on a busy machine as on an idle one, so a test can assert it.

use mlua::{Function, HookTriggers, Lua, LuaOptions, StdLib, VmState};

use super::preempt;

/// The two input lengths: four times longer input should cost about four times the steps.
const SHORT: usize = 2_000;
const LONG: usize = 8_000;
/// A pattern is flagged when, on some input, the long input costs more than this many steps
/// per character and more than this many times the short one's steps per character. A linear
/// pattern costs a few steps a character whatever the length; a quadratic one thousands at
/// 8,000 characters and four times more per character than at 2,000.
const STEPS_PER_CHAR: u64 = 32;
const GROWTH: f64 = 2.0;
/// A probe is stopped after this many steps (a pattern with nested repetitions would run for
/// hours); being stopped counts as the cost.
const CAP: u64 = 4 * 1024 * 1024;

/// What a pattern costs on its worst input found.
#[derive(Debug, Clone)]
pub struct PatternCost {
    pub pattern: String,
    /// The input, described: what is repeated and what follows (`"a"×8000 .. "!"`).
    pub input: String,
    pub steps_short: u64,
    pub steps_long: u64,
    /// The long input hit the probe's cap.
    pub capped: bool,
}

impl PatternCost {
    /// Whether the work grows faster than the input (or is past the cap at all).
    pub fn super_linear(&self) -> bool {
        let per_char_long = self.steps_long as f64 / LONG as f64;
        let per_char_short = self.steps_short.max(4096) as f64 / SHORT as f64;
        self.capped
            || (self.steps_long > STEPS_PER_CHAR * LONG as u64
                && per_char_long > GROWTH * per_char_short)
    }
}

/// Runs `f` and returns, with its result, every distinct pattern the string library was given
/// on this thread meanwhile (in order of first use).
pub fn recording<R>(f: impl FnOnce() -> R) -> (R, Vec<Vec<u8>>) {
    preempt::recording_patterns(f)
}

/// The string literals of a Lua source that look like patterns (a `%` class, a `[` set, or a
/// repeated `.`), unescaped: what a rule could pass to `find` or `match` on a path its tests do
/// not reach, so that `recording` alone would miss it. A literal that is no pattern costs a
/// probe and is linear.
pub fn literals(source: &str) -> Vec<Vec<u8>> {
    let b = source.as_bytes();
    let mut out: Vec<Vec<u8>> = Vec::new();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            // a comment: skip to the end of the line (long comments' text is skipped the same
            // way, line by line, which is close enough for a lint)
            b'-' if b.get(i + 1) == Some(&b'-') => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            q @ (b'"' | b'\'') => {
                let mut lit = Vec::new();
                i += 1;
                while i < b.len() && b[i] != q && b[i] != b'\n' {
                    if b[i] == b'\\' && i + 1 < b.len() {
                        i += 1;
                        match b[i] {
                            b'n' => lit.push(b'\n'),
                            b't' => lit.push(b'\t'),
                            b'r' => lit.push(b'\r'),
                            d if d.is_ascii_digit() => {
                                let mut v: u32 = 0;
                                let mut k = 0;
                                while k < 3 && i < b.len() && b[i].is_ascii_digit() {
                                    v = v * 10 + u32::from(b[i] - b'0');
                                    i += 1;
                                    k += 1;
                                }
                                lit.push(v.min(255) as u8);
                                continue;
                            }
                            c => lit.push(c),
                        }
                    } else {
                        lit.push(b[i]);
                    }
                    i += 1;
                }
                // a regular expression for `re()` (Rust's regex crate: linear time), not a
                // Lua pattern: a flag group or a backslash class
                let regex = lit.starts_with(b"(?")
                    || lit
                        .windows(2)
                        .any(|w| w[0] == b'\\' && w[1].is_ascii_alphabetic());
                let pattern_like = !regex
                    && (lit.contains(&b'%')
                        || lit.contains(&b'[')
                        || lit
                            .windows(2)
                            .any(|w| w[0] == b'.' && matches!(w[1], b'*' | b'+' | b'-')));
                if pattern_like && lit.len() <= 256 && !out.contains(&lit) {
                    out.push(lit);
                }
            }
            _ => {}
        }
        i += 1;
    }
    out
}

/// Measures `patterns` (in a state of their own, not a rule set's): the worst input found
/// for each, worst first.
pub fn measure(patterns: &[Vec<u8>]) -> mlua::Result<Vec<PatternCost>> {
    let lua = Lua::new_with(StdLib::STRING, LuaOptions::default())?;
    let find: Function = lua.load("return string.find").eval()?;
    let mut out = Vec::new();
    for p in patterns {
        if let Some(cost) = worst(&lua, &find, p)? {
            out.push(cost);
        }
    }
    out.sort_by_key(|c| std::cmp::Reverse(c.steps_long));
    Ok(out)
}

/// The pattern's worst input among those `inputs` makes; None when the pattern does not
/// compile.
fn worst(lua: &Lua, find: &Function, pattern: &[u8]) -> mlua::Result<Option<PatternCost>> {
    let p = lua.create_string(pattern)?;
    // A malformed pattern raises at once on any input: nothing to measure.
    if find
        .call::<mlua::MultiValue>((lua.create_string("")?, &p))
        .is_err()
    {
        return Ok(None);
    }
    let items = items(pattern);
    let mut best: Option<PatternCost> = None;
    for shape in shapes(lua, find, &items)? {
        let (short, _) = cost(lua, find, &p, &shape.make(SHORT))?;
        let (long, capped) = cost(lua, find, &p, &shape.make(LONG))?;
        if best.as_ref().is_none_or(|b| long > b.steps_long) {
            best = Some(PatternCost {
                pattern: String::from_utf8_lossy(pattern).into_owned(),
                input: shape.describe(LONG),
                steps_short: short,
                steps_long: long,
                capped,
            });
        }
        if capped {
            break;
        }
    }
    Ok(best)
}

/// The steps one `string.find(input, pattern)` takes, stopped at `CAP`.
fn cost(lua: &Lua, find: &Function, p: &mlua::String, input: &[u8]) -> mlua::Result<(u64, bool)> {
    let s = lua.create_string(input)?;
    let start = preempt::match_steps();
    // The string library calls an armed count hook every 4,096 steps; a period no instruction
    // count reaches arms one for that alone.
    lua.set_hook(
        HookTriggers::new().every_nth_instruction(u32::MAX),
        move |_, _| {
            if preempt::match_steps() - start > CAP {
                Err(mlua::Error::runtime("step cap"))
            } else {
                Ok(VmState::Continue)
            }
        },
    )?;
    let r = find.call::<mlua::MultiValue>((s, p));
    lua.remove_hook();
    let steps = preempt::match_steps() - start;
    Ok((steps, r.is_err() && steps > CAP))
}

/// One item of a pattern: a single-character class with its quantifier, or a special (anchor,
/// capture, `%b`, `%f`).
#[derive(Debug, Clone)]
struct Item {
    /// The single-character class, without its quantifier (None for specials).
    class: Option<Vec<u8>>,
    repeats: bool,
}

fn items(p: &[u8]) -> Vec<Item> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < p.len() {
        let start = i;
        let class_end = match p[i] {
            b'(' | b')' | b'^' | b'$' => {
                out.push(Item {
                    class: None,
                    repeats: false,
                });
                i += 1;
                continue;
            }
            b'%' if p.get(i + 1) == Some(&b'b') => {
                let end = (i + 4).min(p.len());
                out.push(Item {
                    class: None,
                    repeats: false,
                });
                i = end;
                continue;
            }
            b'%' if p.get(i + 1) == Some(&b'f') => {
                let end = set_end(p, i + 2);
                out.push(Item {
                    class: None,
                    repeats: false,
                });
                i = end;
                continue;
            }
            b'%' => (i + 2).min(p.len()),
            b'[' => set_end(p, i),
            _ => i + 1,
        };
        let class = p[start..class_end].to_vec();
        let quant = p
            .get(class_end)
            .filter(|q| matches!(q, b'*' | b'+' | b'-' | b'?'));
        let end = class_end + usize::from(quant.is_some());
        out.push(Item {
            repeats: matches!(quant, Some(b'*' | b'+' | b'-')),
            class: Some(class),
        });
        i = end;
    }
    out
}

/// The end (exclusive) of the set starting at `p[i] == '['`.
fn set_end(p: &[u8], mut i: usize) -> usize {
    i += 1;
    if p.get(i) == Some(&b'^') {
        i += 1;
    }
    // a `]` first in the set is a member
    if p.get(i) == Some(&b']') {
        i += 1;
    }
    while i < p.len() && p[i] != b']' {
        i += if p[i] == b'%' { 2 } else { 1 };
    }
    (i + 1).min(p.len())
}

/// An input: `head`, then `unit` repeated, then `tail`.
struct Shape {
    head: Vec<u8>,
    unit: Vec<u8>,
    tail: Vec<u8>,
}

impl Shape {
    fn make(&self, len: usize) -> Vec<u8> {
        let n = len / self.unit.len().max(1);
        let mut v = Vec::with_capacity(self.head.len() + len + self.tail.len());
        v.extend_from_slice(&self.head);
        for _ in 0..n {
            v.extend_from_slice(&self.unit);
        }
        v.extend_from_slice(&self.tail);
        v
    }

    fn describe(&self, len: usize) -> String {
        let n = len / self.unit.len().max(1);
        format!(
            "{:?} .. {:?}×{n} .. {:?}",
            String::from_utf8_lossy(&self.head),
            String::from_utf8_lossy(&self.unit),
            String::from_utf8_lossy(&self.tail)
        )
    }
}

/// A character the class matches, found by asking Lua (so sets, ranges and negations mean
/// what they mean to the matcher), preferring letters, digits and punctuation over controls.
fn member(lua: &Lua, find: &Function, class: &[u8]) -> mlua::Result<Option<u8>> {
    let mut anchored = b"^".to_vec();
    anchored.extend_from_slice(class);
    anchored.push(b'$');
    let p = lua.create_string(&anchored)?;
    let order = (b'a'..=b'z')
        .chain(b'A'..=b'Z')
        .chain(b'0'..=b'9')
        .chain(b" .-_/@:!<>=\"'%".iter().copied())
        .chain(0u8..=255);
    for c in order {
        let s = lua.create_string([c])?;
        if let Ok(r) = find.call::<Option<i64>>((s, &p)) {
            if r.is_some() {
                return Ok(Some(c));
            }
        }
    }
    Ok(None)
}

/// The inputs tried on a pattern: each repeating item's character (and each pair of
/// neighbouring items' characters) repeated, inside a walk that matches the items before it
/// and after it, followed by nothing or by a character that breaks the match; and the whole
/// walk repeated (what `gsub` and `gmatch` see).
fn shapes(lua: &Lua, find: &Function, items: &[Item]) -> mlua::Result<Vec<Shape>> {
    let mut chars = Vec::with_capacity(items.len());
    for it in items {
        chars.push(match &it.class {
            Some(c) => member(lua, find, c)?,
            None => None,
        });
    }
    let walk = |from: usize, to: usize| -> Vec<u8> {
        (from..to)
            .filter_map(|k| chars.get(k).copied().flatten())
            .collect()
    };
    let mut out = Vec::new();
    let breakers: [&[u8]; 3] = [b"", b"\x01", b"!"];
    let mut units: Vec<(usize, Vec<u8>)> = Vec::new();
    for (k, it) in items.iter().enumerate() {
        if let Some(c) = chars[k] {
            if it.repeats {
                units.push((k, vec![c]));
            }
            if let Some(Some(d)) = chars.get(k + 1) {
                if *d != c {
                    units.push((k, vec![c, *d]));
                }
            }
        }
    }
    for (k, unit) in units {
        for b in breakers {
            let mut tail = walk(k + 1, items.len());
            tail.extend_from_slice(b);
            out.push(Shape {
                head: walk(0, k),
                unit: unit.clone(),
                tail,
            });
            // the repetition alone, then the breaker: a long run the item's class accepts
            out.push(Shape {
                head: Vec::new(),
                unit: unit.clone(),
                tail: b.to_vec(),
            });
        }
    }
    let whole = walk(0, items.len());
    if !whole.is_empty() {
        for b in breakers {
            out.push(Shape {
                head: Vec::new(),
                unit: whole.clone(),
                tail: b.to_vec(),
            });
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(p: &str) -> PatternCost {
        let costs = measure(&[p.as_bytes().to_vec()]).unwrap();
        costs.into_iter().next().expect("a cost")
    }

    #[test]
    fn backtracking_patterns_are_flagged_and_linear_ones_are_not() {
        for p in [
            "^%s*[%w%-]+%.[%w%-%.]*%a%a+/?%s*$",
            "^(.-)(.-)(.-)(.-)x$",
            "([^.]+%.[^.]+)$",
        ] {
            let c = one(p);
            assert!(c.super_linear(), "not flagged: {c:?}");
        }
        for p in [
            "^%s*[Hh][Tt][Tt][Pp][Ss]?://",
            "%d%$",
            "^%s*([%w%-%.]+)/?%s*$",
            "[!?][!?][!?]",
            "%a%a$",
            "%S%s%s%s%s+%S+$",
        ] {
            let c = one(p);
            assert!(!c.super_linear(), "flagged: {c:?}");
        }
    }

    #[test]
    fn a_pattern_with_nested_repetitions_is_stopped_at_the_cap() {
        let c = one("^(.-)(.-)(.-)(.-)(.-)x$");
        assert!(c.capped && c.super_linear(), "{c:?}");
    }

    #[test]
    fn pattern_literals_are_found_in_the_source_and_comments_are_not() {
        let src = r#"local x = find(s, "^%s*[%w%-]+%.") -- "%d+" in a comment
local y = 'a.-b' local z = "plain text" local w = "\\%a\"%["
local r = re("(?i)a.*b") local q = re("\\bx%[")
"#;
        assert_eq!(
            literals(src),
            vec![
                b"^%s*[%w%-]+%.".to_vec(),
                b"a.-b".to_vec(),
                b"\\%a\"%[".to_vec()
            ]
        );
    }

    #[test]
    fn malformed_patterns_are_skipped() {
        assert!(measure(&[b"[a".to_vec(), b"%".to_vec()])
            .unwrap()
            .is_empty());
    }

    #[test]
    fn the_patterns_lua_was_given_are_recorded_once_each() {
        let lua = Lua::new();
        let ((), seen) = recording(|| {
            lua.load(
                r#"for _ = 1, 3 do string.find("abc", "b+") end
                   string.gsub("abc", "%a", "x"); string.find("abc", "b", 1, true)"#,
            )
            .exec()
            .unwrap()
        });
        assert_eq!(seen, vec![b"b+".to_vec(), b"%a".to_vec()]);
    }
}
