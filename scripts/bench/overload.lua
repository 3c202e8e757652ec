-- wrk script for scripts/overload.sh: checkv2.lua's requests (POST /checkv2 cycling through the
-- messages listed in $BENCH_LIST), plus a `response` callback that tallies the replies by
-- status: 2xx, 503 (and how many of those lack a Retry-After header), and any other status by
-- its code. `done` prints checkv2.lua's summary, then one line per tally:
--
--   status 2xx N
--   status 503 N
--   status 503-without-retry-after N
--   status other N          (then "status NNN N" for each other code)
--
-- Run from the repository's root (it loads scripts/bench/checkv2.lua by that path):
--
--   BENCH_LIST=/tmp/list wrk -t2 -c512 -d60s -s scripts/bench/overload.lua http://127.0.0.1:11333

dofile("scripts/bench/checkv2.lua")

local base_setup, base_done = setup, done
local all = {}

function setup(thread)
  base_setup(thread)
  table.insert(all, thread)
end

-- Per thread (each wrk thread has its own Lua state); `done` adds them up with thread:get.
-- Flat, with string keys only: wrk 4.1 crashes copying a nested table between states.
tally = { ok = 0, busy = 0, busy_bare = 0, other = 0 }

function response(status, headers, body)
  if status >= 200 and status < 300 then
    tally.ok = tally.ok + 1
  elseif status == 503 then
    tally.busy = tally.busy + 1
    if not (headers["retry-after"] or headers["Retry-After"]) then
      tally.busy_bare = tally.busy_bare + 1
    end
  else
    tally.other = tally.other + 1
    local key = "code" .. status
    tally[key] = (tally[key] or 0) + 1
  end
end

function done(summary, latency, requests)
  base_done(summary, latency, requests)
  local sum = { ok = 0, busy = 0, busy_bare = 0, other = 0, codes = {} }
  for _, thread in ipairs(all) do
    local t = thread:get("tally")
    sum.ok = sum.ok + t.ok
    sum.busy = sum.busy + t.busy
    sum.busy_bare = sum.busy_bare + t.busy_bare
    sum.other = sum.other + t.other
    for key, n in pairs(t) do
      local code = string.match(key, "^code(%d+)$")
      if code then
        sum.codes[code] = (sum.codes[code] or 0) + n
      end
    end
  end
  io.write(string.format("status 2xx %d\n", sum.ok))
  io.write(string.format("status 503 %d\n", sum.busy))
  io.write(string.format("status 503-without-retry-after %d\n", sum.busy_bare))
  io.write(string.format("status other %d\n", sum.other))
  for code, n in pairs(sum.codes) do
    io.write(string.format("status %s %d\n", code, n))
  end
end
