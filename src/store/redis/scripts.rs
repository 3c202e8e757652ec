//! The per-node scripts of the scan path: one call reads (or writes) every key a batch has on
//! one node, instead of one command per key and field.
//!
//! Why: a message touches ~35 timeline keys; as plain commands that was ~107 commands a message
//! (an `HGETALL` per key, two `HINCRBY`s per key and counter, the `EXPIRE`s and unique-pair
//! scripts), each encoded, routed and answered on both sides, and ~400 reply values parsed
//! into a value tree. A script declared `allow-cross-slot-keys` may touch keys of many slots
//! as long as one node serves them all, so the link groups a batch's keys by node and sends one
//! call per node (chunks of at most `CHUNK` keys, so that no call holds a node for long).
//!
//! - `READ`: per key, the window sums the rules read, summed on the node from the key's
//!   buckets (the same selection as `keys::window_sums`), as one string of comma-separated
//!   stored sums (`windows × COUNTERS`), empty for a key with nothing in any window. Fields
//!   past their resolution's keep are deleted there and then.
//! - `WRITE`: the write-behind flush's operations (increments, unique pairs, deletes) in one
//!   call; every command inside runs under `pcall`, so one bad key (another program's key of
//!   another type) costs its own operation, never the rest of the call, and a call that ran is
//!   never sent again. It answers the operations whose key this node no longer serves (a
//!   resharding the slot map has not caught up with): those are put back for the next flush. A key's TTL is renewed when a write creates its coarsest bucket (a
//!   day), as the plain path did one flush later.
//!
//! Scripts are sent by SHA (`EVALSHA`); a node that does not know one (restarted, a promoted
//! replica) answers NOSCRIPT and the same call is sent again with the script's text, which
//! also loads it (`conn::Item::retry`).

use std::fmt::Write as _;

use redis::{Cmd, Value};

use crate::store::{Counts, Layout, StoreKey, WindowCounts, WindowSums, COUNTERS};

/// Most keys in one script call.
pub const CHUNK: usize = 128;

pub const READ: &str = r"#!lua flags=allow-cross-slot-keys
local byte, sub, tonumber, format = string.byte, string.sub, tonumber, string.format
local now = tonumber(ARGV[1])
local nres = tonumber(ARGV[2])
local bucket, keep = {}, {}
for r = 0, nres - 1 do
  bucket[r] = tonumber(ARGV[3 + 2 * r])
  keep[r] = tonumber(ARGV[4 + 2 * r])
end
local at = 3 + 2 * nres
local nwin = tonumber(ARGV[at])
-- Per resolution, the windows it serves: their index and start.
local wins = {}
for r = 0, nres - 1 do wins[r] = {} end
for w = 1, nwin do
  local r = tonumber(ARGV[at + 2 * w])
  local list = wins[r]
  list[#list + 1] = { w, now - tonumber(ARGV[at + 2 * w - 1]) }
end
local nc = tonumber(ARGV[at + 2 * nwin + 1])
local out = {}
for k = at + 2 * nwin + 2, #ARGV do
  local key = ARGV[k]
  local h = redis.call('HGETALL', key)
  local sums, stale = nil, nil
  for i = 1, #h, 2 do
    local f = h[i]
    local r, c = byte(f, 1, 2)
    local id = tonumber(sub(f, 3))
    if id and c then
      r, c = r - 48, c - 48
      local b = bucket[r]
      if b and c >= 0 and c < nc then
        local e = (id + 1) * b
        if e + keep[r] <= now then
          stale = stale or {}
          stale[#stale + 1] = f
        else
          local v = tonumber(h[i + 1]) or 0
          for _, win in ipairs(wins[r]) do
            if e > win[2] then
              sums = sums or {}
              local j = (win[1] - 1) * nc + c + 1
              sums[j] = (sums[j] or 0) + v
            end
          end
        end
      end
    end
  end
  if stale then
    for s = 1, #stale, 500 do
      redis.call('HDEL', key, unpack(stale, s, math.min(s + 499, #stale)))
    end
  end
  if sums then
    local parts = {}
    for j = 1, nwin * nc do parts[j] = format('%d', sums[j] or 0) end
    out[#out + 1] = table.concat(parts, ',')
  else
    out[#out + 1] = ''
  end
end
return out
";

pub const WRITE: &str = r"#!lua flags=allow-cross-slot-keys
local ttl = ARGV[1]
local coarse = ARGV[2]
local a, op_no = 3, 0
local moved = {}
local function run(...)
  local r = redis.pcall(...)
  if type(r) == 'table' and r.err and string.find(r.err, 'non local key', 1, true) then
    moved[#moved + 1] = op_no
  end
  return r
end
while a <= #ARGV do
  local op = ARGV[a]
  op_no = op_no + 1
  local before = #moved
  if op == 'i' then
    local key, n = ARGV[a + 1], tonumber(ARGV[a + 2])
    a = a + 3
    local first = false
    for i = 0, n - 1 do
      local f, d = ARGV[a + 2 * i], ARGV[a + 2 * i + 1]
      local v = run('HINCRBY', key, f, d)
      if #moved > before then break end
      if type(v) == 'number' and string.sub(f, 1, 1) == coarse and v == tonumber(d) then
        first = true
      end
    end
    if first then run('EXPIRE', key, ttl) end
    a = a + 2 * n
  elseif op == 'p' then
    local marker, key, period, n = ARGV[a + 1], ARGV[a + 2], ARGV[a + 3], tonumber(ARGV[a + 4])
    a = a + 5
    local set = run('SET', marker, '1', 'NX', 'EX', period)
    if type(set) == 'table' and set.ok then
      for i = 0, n - 1 do run('HINCRBY', key, ARGV[a + i], 1) end
      run('EXPIRE', key, ttl)
    end
    a = a + n
  elseif op == 'd' then
    local key, n = ARGV[a + 1], tonumber(ARGV[a + 2])
    a = a + 3
    if n > 0 then run('HDEL', key, unpack(ARGV, a, a + n - 1)) end
    a = a + n
  else
    return redis.error_reply('shrike write script: unknown operation ' .. tostring(op))
  end
end
return moved
";

/// A script: its text and SHA.
pub struct Script {
    text: &'static str,
    sha: String,
}

impl Script {
    fn new(text: &'static str) -> Script {
        Script {
            text,
            sha: redis::Script::new(text).get_hash().to_owned(),
        }
    }

    /// `EVALSHA` of this script, and the same call as `EVAL` (for a node that lacks it).
    /// A cluster refuses a command whose declared keys span slots (CROSSSLOT), whatever the
    /// script's flags: the call declares one key, which routes it, and names the others in its
    /// arguments, which `allow-cross-slot-keys` lets it touch on this node.
    pub fn calls(&self, route: &str, args: &[&str]) -> (Cmd, Cmd) {
        let build = |verb: &str, body: &str| {
            let mut c = redis::cmd(verb);
            c.arg(body).arg(1).arg(route).arg(args);
            c
        };
        (build("EVALSHA", &self.sha), build("EVAL", self.text))
    }
}

/// The two scripts and the read script's fixed arguments (the layout and the windows).
pub struct Scripts {
    pub read: Script,
    pub write: Script,
    /// `READ`'s arguments after `now`.
    read_args: Vec<String>,
    windows: usize,
    /// `WRITE`'s first arguments: the timeline TTL and the coarsest resolution's digit.
    write_head: [String; 2],
}

impl Scripts {
    pub fn new(layout: &Layout, windows_secs: &[u64], ttl: u64) -> Scripts {
        let res = layout.resolutions();
        let mut read_args = vec![res.len().to_string()];
        for r in res {
            read_args.push(r.bucket_secs.to_string());
            read_args.push(r.keep_secs.to_string());
        }
        read_args.push(windows_secs.len().to_string());
        for &w in windows_secs {
            // The finest resolution that keeps the whole window (`keys::window_sums`).
            let r = res
                .iter()
                .position(|r| r.keep_secs >= w)
                .unwrap_or(res.len() - 1);
            read_args.push(w.to_string());
            read_args.push(r.to_string());
        }
        read_args.push(COUNTERS.to_string());
        Scripts {
            read: Script::new(READ),
            write: Script::new(WRITE),
            read_args,
            windows: windows_secs.len(),
            write_head: [ttl.to_string(), (res.len() - 1).to_string()],
        }
    }

    /// The read of `keys` (timeline key names, one node's) at `now`.
    pub fn read_call(&self, keys: &[&str], now: u64) -> (Cmd, Cmd) {
        let now = now.to_string();
        let mut args: Vec<&str> = Vec::with_capacity(self.read_args.len() + 1 + keys.len());
        args.push(&now);
        args.extend(self.read_args.iter().map(String::as_str));
        args.extend(keys);
        self.read
            .calls(keys.first().copied().unwrap_or_default(), &args)
    }

    /// A key's window sums from its string in `READ`'s reply; `None` for another shape.
    pub fn parse_sums(&self, v: &Value) -> Option<WindowCounts> {
        let bytes: &[u8] = match v {
            Value::BulkString(b) => b,
            Value::SimpleString(s) => s.as_bytes(),
            _ => return None,
        };
        let mut windows = WindowSums::zeros(self.windows);
        if bytes.is_empty() {
            return Some(WindowCounts { windows });
        }
        let mut stored = vec![[0i64; COUNTERS]; self.windows];
        let mut n = 0;
        for part in bytes.split(|&b| b == b',') {
            let v: i64 = std::str::from_utf8(part).ok()?.parse().ok()?;
            *stored.get_mut(n / COUNTERS)?.get_mut(n % COUNTERS)? = v;
            n += 1;
        }
        if n != self.windows * COUNTERS {
            return None;
        }
        for (w, s) in stored.iter().enumerate() {
            windows[w] = super::keys::counts_of_stored(s);
        }
        Some(WindowCounts { windows })
    }

    /// Builds `WRITE` calls: operations are added with `inc`, `pair` and `del`, then taken.
    pub fn writes(&self) -> WriteCall<'_> {
        WriteCall {
            scripts: self,
            route: None,
            args: self.write_head.to_vec(),
        }
    }
}

/// One `WRITE` call being built (one node's operations, at most `CHUNK` of them).
pub struct WriteCall<'a> {
    scripts: &'a Scripts,
    /// The first operation's key: it routes the call.
    route: Option<String>,
    args: Vec<String>,
}

impl WriteCall<'_> {
    /// Adds `counts` at time `at` to `key`'s timeline.
    pub fn inc(&mut self, layout: &Layout, prefix: &str, key: &StoreKey, at: u64, counts: &Counts) {
        let fields = super::keys::increment_fields(layout, at, counts);
        let name = super::keys::timeline_key(prefix, key);
        self.route.get_or_insert_with(|| name.clone());
        self.args.push("i".into());
        self.args.push(name);
        self.args.push(fields.len().to_string());
        for (f, d) in fields {
            self.args.push(f);
            let mut s = String::new();
            let _ = write!(s, "{d}");
            self.args.push(s);
        }
    }

    /// Counts `unique` once for `pair` in `period` (the pair marker and the unique key's
    /// timeline share a slot).
    pub fn pair(
        &mut self,
        layout: &Layout,
        prefix: &str,
        pair: &StoreKey,
        unique: &StoreKey,
        period: u64,
        at: u64,
    ) {
        let one = crate::store::Increment::one(*unique, crate::store::Counter::Seen).counts;
        let fields = super::keys::increment_fields(layout, at, &one);
        let name = super::keys::timeline_key(prefix, unique);
        self.route.get_or_insert_with(|| name.clone());
        self.args.push("p".into());
        self.args.push(super::keys::pair_key(prefix, pair, unique));
        self.args.push(name);
        self.args.push(period.to_string());
        self.args.push(fields.len().to_string());
        self.args.extend(fields.into_iter().map(|(f, _)| f));
    }

    /// Deletes `fields` of the hash `name`.
    pub fn del(&mut self, name: &str, fields: &[Vec<u8>]) {
        self.route.get_or_insert_with(|| name.to_owned());
        self.args.push("d".into());
        self.args.push(name.to_owned());
        self.args.push(fields.len().to_string());
        self.args.extend(
            fields
                .iter()
                .map(|f| String::from_utf8_lossy(f).into_owned()),
        );
    }

    /// The call (`EVALSHA`, `EVAL`) and the first key's name (for its slot).
    pub fn finish(self) -> (Cmd, Cmd, String) {
        let route = self.route.unwrap_or_default();
        let args: Vec<&str> = self.args.iter().map(String::as_str).collect();
        let (sha, text) = self.scripts.write.calls(&route, &args);
        (sha, text, route)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::StoreConfig;

    #[test]
    fn sums_parse_strictly() {
        let cfg = StoreConfig::default();
        let layout = Layout::new(&cfg.resolutions).unwrap();
        let s = Scripts::new(&layout, &cfg.windows_secs, 100);
        let bulk = |t: &str| Value::BulkString(t.as_bytes().to_vec());
        let zero = s.parse_sums(&bulk("")).unwrap();
        assert!(zero.windows.iter().all(|w| w.iter().all(|&c| c == 0)));
        // Five windows of five stored counters: seen is stored less spam and ham.
        let mut parts = vec!["0"; 25];
        parts[0] = "2";
        parts[1] = "3";
        parts[5] = "-1";
        parts[7] = "1";
        let w = s.parse_sums(&bulk(&parts.join(","))).unwrap();
        assert_eq!(w.windows[0], [5, 3, 0, 0, 0]);
        assert_eq!(w.windows[1], [0, 0, 1, 0, 0]);
        // Too few, too many, not numbers, not a string.
        assert!(s.parse_sums(&bulk("1,2")).is_none());
        assert!(s.parse_sums(&bulk(&vec!["0"; 26].join(","))).is_none());
        assert!(s.parse_sums(&bulk(&vec!["x"; 25].join(","))).is_none());
        assert!(s.parse_sums(&Value::Int(1)).is_none());
    }

    #[test]
    fn read_arguments_name_each_windows_resolution() {
        let cfg = StoreConfig::default();
        let layout = Layout::new(&cfg.resolutions).unwrap();
        let s = Scripts::new(&layout, &cfg.windows_secs, 100);
        // Two resolutions (10 minutes kept a day, days kept 14 days); the windows up to a day
        // read the first, the week and two weeks the second.
        assert_eq!(
            s.read_args,
            [
                "2", "600", "86400", "86400", "1209600", "5", "600", "0", "3600", "0", "86400",
                "0", "604800", "1", "1209600", "1", "5"
            ]
        );
        assert_eq!(s.write_head, ["100".to_string(), "1".to_string()]);
    }

    /// Starts a redis-server (Debian's, which the test setup installs) on a free port.
    struct Server(
        std::process::Child,
        u16,
        #[allow(dead_code)] tempfile::TempDir,
    );

    impl Server {
        fn start() -> Server {
            let port = std::net::TcpListener::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap()
                .port();
            let dir = tempfile::tempdir().unwrap();
            let child = std::process::Command::new("redis-server")
                .args([
                    "--port",
                    &port.to_string(),
                    "--bind",
                    "127.0.0.1",
                    "--save",
                    "",
                ])
                .arg("--dir")
                .arg(dir.path())
                .stdout(std::process::Stdio::null())
                .spawn()
                .expect("redis-server (apt-get install redis-server)");
            // Dropped (killed and waited for) on every path from here.
            let server = Server(child, port, dir);
            for _ in 0..200 {
                if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                    return server;
                }
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            panic!("redis-server did not start");
        }
    }

    impl Drop for Server {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }

    #[test]
    fn the_scripts_sum_and_write_as_the_plain_commands_did() {
        let server = Server::start();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let cfg = StoreConfig::default();
        let layout = Layout::new(&cfg.resolutions).unwrap();
        let scripts = Scripts::new(&layout, &cfg.windows_secs, 1_296_000);
        rt.block_on(async {
            let client = redis::Client::open(format!("redis://127.0.0.1:{}", server.1)).unwrap();
            let mut c = client.get_multiplexed_async_connection().await.unwrap();
            let now = 1_800_000_123u64;
            // Timelines of increments at many ages (some past every keep), in stored form, and
            // fields the scripts must ignore.
            let mut rng = 0x2545_f491_4f6c_dd1du64;
            let mut next = move || {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                rng
            };
            let key = |i: u64| StoreKey {
                namespace: 0,
                kind: 3,
                hash: i,
            };
            let names: Vec<String> = (0..40)
                .map(|i| super::super::keys::timeline_key("t", &key(i)))
                .collect();
            for name in &names[..39] {
                let mut fields: std::collections::HashMap<String, i64> = Default::default();
                for _ in 0..(next() % 30) {
                    let age = match next() % 3 {
                        0 => next() % 1_200,
                        1 => next() % 90_000,
                        _ => next() % (20 * 86_400),
                    };
                    let mut counts = [0u64; COUNTERS];
                    counts[0] = 1;
                    counts[(next() % COUNTERS as u64) as usize] += next() % 3;
                    for (f, d) in super::super::keys::increment_fields(&layout, now - age, &counts)
                    {
                        *fields.entry(f).or_default() += d;
                    }
                }
                fields.insert("x1".into(), 5);
                fields.insert("7012".into(), 9);
                fields.insert("0912".into(), 9);
                let mut hset = redis::cmd("HSET");
                hset.arg(name);
                for (f, v) in &fields {
                    hset.arg(f).arg(v);
                }
                let _: i64 = hset.query_async(&mut c).await.unwrap();
            }
            // What the plain path computed from HGETALL.
            let mut expected = Vec::new();
            for name in &names {
                let v: Value = redis::cmd("HGETALL")
                    .arg(name)
                    .query_async(&mut c)
                    .await
                    .unwrap();
                let d = super::super::keys::decode(&layout, &v, now);
                expected.push((
                    super::super::keys::window_sums(&layout, &cfg.windows_secs, &d, now),
                    d.stale.len(),
                ));
            }
            assert!(expected.iter().any(|(w, _)| w.windows[0][0] > 0));
            assert!(expected.iter().filter(|(w, _)| w.windows[4][0] > 0).count() > 20);
            let keys: Vec<&str> = names.iter().map(String::as_str).collect();
            let (sha, text) = scripts.read_call(&keys, now);
            // Unknown to the server until its text is sent.
            let err = sha.query_async::<Value>(&mut c).await.unwrap_err();
            assert_eq!(
                err.kind(),
                redis::ErrorKind::Server(redis::ServerErrorKind::NoScript)
            );
            let Value::Array(got) = text.query_async::<Value>(&mut c).await.unwrap() else {
                panic!("READ answers an array");
            };
            assert_eq!(got.len(), names.len());
            let mut stale = 0;
            for ((v, (want, n)), name) in got.iter().zip(&expected).zip(&names) {
                let sums = scripts.parse_sums(v).expect("a sums string");
                assert_eq!(sums.windows, want.windows, "{name}");
                stale += n;
                // Stale fields are gone; the ones the scripts ignore stay.
                let left: Vec<String> = redis::cmd("HKEYS")
                    .arg(name)
                    .query_async(&mut c)
                    .await
                    .unwrap();
                let d = super::super::keys::decode(
                    &layout,
                    &Value::Array(
                        left.iter()
                            .flat_map(|f| {
                                [Value::BulkString(f.clone().into_bytes()), Value::Int(1)]
                            })
                            .collect(),
                    ),
                    now,
                );
                assert!(d.stale.is_empty(), "{name}: {:?}", d.stale);
                if name != &names[39] {
                    assert!(left.iter().any(|f| f == "x1"));
                }
            }
            assert!(
                stale > 10,
                "the timelines had stale fields to delete ({stale})"
            );
            // The SHA now works.
            let again: Value = sha.query_async(&mut c).await.unwrap();
            assert!(matches!(again, Value::Array(ref a) if a.len() == names.len()));

            // WRITE: an increment creating a day bucket renews the TTL; one into an existing
            // day bucket does not; a pair counts once; a delete; a key of another type costs
            // only its own operation.
            let fresh = super::super::keys::timeline_key("t", &key(100));
            let pair = StoreKey {
                namespace: 0,
                kind: 9,
                hash: 1,
            };
            let _: () = redis::cmd("SET")
                .arg(&names[39])
                .arg("not a hash")
                .query_async(&mut c)
                .await
                .unwrap();
            let mut call = scripts.writes();
            call.inc(&layout, "t", &key(39), now, &[1, 1, 0, 0, 0]);
            call.inc(&layout, "t", &key(100), now, &[2, 0, 0, 0, 0]);
            call.pair(&layout, "t", &pair, &key(100), 3600, now);
            call.pair(&layout, "t", &pair, &key(100), 3600, now);
            call.del(&names[0], &[b"x1".to_vec()]);
            let (_, text, _) = call.finish();
            let _: Value = text.query_async(&mut c).await.unwrap();
            let v: Value = redis::cmd("HGETALL")
                .arg(&fresh)
                .query_async(&mut c)
                .await
                .unwrap();
            let d = super::super::keys::decode(&layout, &v, now);
            let w = super::super::keys::window_sums(&layout, &cfg.windows_secs, &d, now);
            assert_eq!(
                w.windows[0],
                [3, 0, 0, 0, 0],
                "two seen and one unique pair"
            );
            let ttl: i64 = redis::cmd("TTL")
                .arg(&fresh)
                .query_async(&mut c)
                .await
                .unwrap();
            assert!(ttl > 1_000_000, "{ttl}");
            let marker = super::super::keys::pair_key("t", &pair, &key(100));
            let pttl: i64 = redis::cmd("TTL")
                .arg(&marker)
                .query_async(&mut c)
                .await
                .unwrap();
            assert!((1..=3600).contains(&pttl), "{pttl}");
            let has: bool = redis::cmd("HEXISTS")
                .arg(&names[0])
                .arg("x1")
                .query_async(&mut c)
                .await
                .unwrap();
            assert!(!has);
            // A second increment into the same day: no TTL renewal.
            let _: () = redis::cmd("EXPIRE")
                .arg(&fresh)
                .arg(50)
                .query_async(&mut c)
                .await
                .unwrap();
            let mut call = scripts.writes();
            call.inc(&layout, "t", &key(100), now + 1, &[1, 0, 0, 0, 0]);
            let (_, text, _) = call.finish();
            let _: Value = text.query_async(&mut c).await.unwrap();
            let ttl: i64 = redis::cmd("TTL")
                .arg(&fresh)
                .query_async(&mut c)
                .await
                .unwrap();
            assert!(ttl <= 50, "{ttl}");
        });
    }
}
