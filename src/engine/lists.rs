//! File-backed allow and block lists (`lists/NAME.KIND`): IPs and CIDR ranges, domains (with
//! their subdomains), email addresses (or `@domain`) and plain strings. Loaded with the rules,
//! shared read-only by every Lua state of a generation. Large string-like lists sit behind a
//! Bloom filter so that the common miss costs a few hashes instead of a probe into a big table.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;

use fastbloom::BloomFilter;
use ipnet::IpNet;
use rustc_hash::FxHashSet;

/// Lists with at least this many entries get a Bloom filter in front.
pub const BLOOM_MIN_ENTRIES: usize = 4_096;

/// What a list holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListKind {
    Ip,
    Domain,
    Email,
    Str,
}

impl ListKind {
    /// The kind named by a file extension.
    pub fn from_extension(ext: &str) -> Option<ListKind> {
        match ext {
            "ip" => Some(ListKind::Ip),
            "domain" => Some(ListKind::Domain),
            "email" => Some(ListKind::Email),
            "str" => Some(ListKind::Str),
            _ => None,
        }
    }
}

/// One list.
#[derive(Debug)]
pub struct List {
    kind: ListKind,
    /// Sorted, merged IPv4 ranges (inclusive).
    v4: Vec<(u32, u32)>,
    /// Sorted, merged IPv6 ranges (inclusive).
    v6: Vec<(u128, u128)>,
    strings: FxHashSet<String>,
    bloom: Option<BloomFilter>,
}

/// A problem in a list file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file}:{line}: {message}")]
pub struct ListError {
    pub file: String,
    pub line: usize,
    pub message: String,
}

impl List {
    /// Parses a list file's text. `file` names it in errors.
    pub fn parse(kind: ListKind, file: &str, text: &str) -> Result<List, ListError> {
        let mut v4 = Vec::new();
        let mut v6 = Vec::new();
        let mut strings = FxHashSet::default();
        for (n, line) in text.lines().enumerate() {
            let entry = line.split('#').next().unwrap_or("").trim();
            if entry.is_empty() {
                continue;
            }
            let err = |message: String| ListError {
                file: file.to_string(),
                line: n + 1,
                message,
            };
            match kind {
                ListKind::Ip => {
                    let net = if entry.contains('/') {
                        entry
                            .parse::<IpNet>()
                            .map_err(|e| err(format!("bad CIDR {entry:?}: {e}")))?
                    } else {
                        IpNet::from(
                            entry
                                .parse::<IpAddr>()
                                .map_err(|e| err(format!("bad IP {entry:?}: {e}")))?,
                        )
                    };
                    match net {
                        IpNet::V4(n) => v4.push((u32::from(n.network()), u32::from(n.broadcast()))),
                        IpNet::V6(n) => {
                            v6.push((u128::from(n.network()), u128::from(n.broadcast())))
                        }
                    }
                }
                ListKind::Domain => {
                    let d = crate::entities::canonical_host(entry.trim_start_matches("*."))
                        .ok_or_else(|| err(format!("bad domain {entry:?}")))?;
                    strings.insert(d);
                }
                ListKind::Email => {
                    if let Some(domain) = entry.strip_prefix('@') {
                        let d = crate::entities::canonical_host(domain)
                            .ok_or_else(|| err(format!("bad domain {entry:?}")))?;
                        strings.insert(format!("@{d}"));
                    } else {
                        let (address, _) = crate::entities::canonical_email(entry)
                            .ok_or_else(|| err(format!("bad address {entry:?}")))?;
                        strings.insert(address);
                    }
                }
                ListKind::Str => {
                    strings.insert(entry.to_string());
                }
            }
        }
        let bloom = (strings.len() >= BLOOM_MIN_ENTRIES).then(|| {
            let mut b = BloomFilter::with_false_pos(0.01).expected_items(strings.len());
            for s in &strings {
                b.insert(s.as_str());
            }
            b
        });
        Ok(List {
            kind,
            v4: merge(v4, |x| x.saturating_add(1)),
            v6: merge(v6, |x| x.saturating_add(1)),
            strings,
            bloom,
        })
    }

    pub fn kind(&self) -> ListKind {
        self.kind
    }

    /// Number of entries (ranges for IP lists).
    pub fn len(&self) -> usize {
        self.v4.len() + self.v6.len() + self.strings.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn has(&self, s: &str) -> bool {
        if let Some(b) = &self.bloom {
            if !b.contains(s) {
                return false;
            }
        }
        self.strings.contains(s)
    }

    /// Whether `value` is on the list, by the list's kind: an IP within a range, a domain or
    /// one of its parents, an address or its `@domain`, an exact string.
    pub fn contains(&self, value: &str) -> bool {
        match self.kind {
            ListKind::Ip => match value.trim().parse::<IpAddr>() {
                Ok(ip) => match crate::entities::canonical_ip(ip) {
                    IpAddr::V4(a) => in_ranges(&self.v4, u32::from(a)),
                    IpAddr::V6(a) => in_ranges(&self.v6, u128::from(a)),
                },
                Err(_) => false,
            },
            ListKind::Domain => {
                let Some(host) = crate::entities::canonical_host(value) else {
                    return false;
                };
                self.domain_or_parent(&host)
            }
            ListKind::Email => match crate::entities::canonical_email(value) {
                Some((address, domain)) => {
                    self.has(&address) || {
                        let mut key = String::with_capacity(domain.len() + 1);
                        key.push('@');
                        key.push_str(&domain);
                        self.has(&key)
                    }
                }
                None => false,
            },
            ListKind::Str => self.has(value),
        }
    }

    fn domain_or_parent(&self, host: &str) -> bool {
        let mut rest = host;
        loop {
            if self.has(rest) {
                return true;
            }
            match rest.find('.') {
                Some(i) => rest = &rest[i + 1..],
                None => return false,
            }
        }
    }
}

/// Sorts inclusive ranges and joins overlapping or adjacent ones (`succ`: the next value).
fn merge<T: Ord + Copy>(mut ranges: Vec<(T, T)>, succ: fn(T) -> T) -> Vec<(T, T)> {
    ranges.sort_unstable();
    let mut out: Vec<(T, T)> = Vec::with_capacity(ranges.len());
    for (lo, hi) in ranges {
        match out.last_mut() {
            Some(last) if lo <= succ(last.1) => last.1 = last.1.max(hi),
            _ => out.push((lo, hi)),
        }
    }
    out
}

fn in_ranges<T: Ord + Copy>(ranges: &[(T, T)], x: T) -> bool {
    let i = ranges.partition_point(|r| r.0 <= x);
    i > 0 && ranges[i - 1].1 >= x
}

/// The lists of a rule set, by name.
#[derive(Debug, Default)]
pub struct Lists {
    pub by_name: BTreeMap<String, Arc<List>>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ip_ranges_and_addresses() {
        let l = List::parse(
            ListKind::Ip,
            "t.ip",
            "# bad nets\n10.0.0.0/8\n192.0.2.7 # one host\n2001:db8::/32\n10.1.0.0/16\n",
        )
        .unwrap();
        assert!(l.contains("10.200.3.4"));
        assert!(l.contains("192.0.2.7"));
        assert!(!l.contains("192.0.2.8"));
        assert!(!l.contains("11.0.0.0"));
        assert!(l.contains("2001:db8::1"));
        assert!(
            l.contains("::ffff:10.0.0.1"),
            "v4-mapped v6 is the v4 address"
        );
        assert!(!l.contains("not an ip"));
        assert_eq!(l.v4.len(), 2, "overlapping ranges merged");
        let e = List::parse(ListKind::Ip, "t.ip", "ok 1.2.3.4\n").unwrap_err();
        assert_eq!((e.file.as_str(), e.line), ("t.ip", 1));
    }

    #[test]
    fn domains_match_subdomains_only_on_label_boundaries() {
        let l = List::parse(ListKind::Domain, "d", "Example.COM\n*.bad.test\n").unwrap();
        assert!(l.contains("example.com"));
        assert!(l.contains("mail.EXAMPLE.com."));
        assert!(!l.contains("notexample.com"));
        assert!(l.contains("x.bad.test"));
        assert!(!l.contains("test"));
    }

    #[test]
    fn emails_and_whole_domains() {
        let l = List::parse(ListKind::Email, "e", "Bob@Example.com\n@spam.test\n").unwrap();
        assert!(l.contains("bob@example.com"));
        assert!(l.contains("<BOB@example.COM>"));
        assert!(!l.contains("alice@example.com"));
        assert!(l.contains("anyone@spam.test"));
    }

    #[test]
    fn large_lists_use_a_bloom_filter_without_false_negatives() {
        let text: String = (0..10_000).map(|i| format!("s{i}\n")).collect();
        let l = List::parse(ListKind::Str, "s", &text).unwrap();
        assert!(l.bloom.is_some());
        assert!((0..10_000).all(|i| l.contains(&format!("s{i}"))));
        let misses = (0..10_000).filter(|i| l.contains(&format!("x{i}"))).count();
        assert_eq!(misses, 0, "the set decides after the filter");
    }
}
