-- wrk script: POST /checkv2, cycling through the messages listed (one path per line) in the
-- file named by $BENCH_LIST. Each wrk thread starts at a different offset. Prints the rate and
-- latency percentiles at the end (wrk counts non-2xx replies itself: "errors ... status").
--
-- The client shares the machine with the server, so it does as little as it can per request:
-- every request is formatted once, at start, and there is no `response` callback (with one,
-- wrk hands every reply's headers to Lua as a fresh table).
--
--   BENCH_LIST=/tmp/list wrk -t2 -c16 -d30s -s scripts/bench/checkv2.lua http://127.0.0.1:11333

local bodies = {}
local list = os.getenv("BENCH_LIST") or error("set BENCH_LIST to a file of message paths")
for path in io.lines(list) do
  local f = io.open(path, "rb")
  if f then
    bodies[#bodies + 1] = f:read("*a")
    f:close()
  end
end
assert(#bodies > 0, "no messages in " .. list)

local threads = {}
local counter = 0

function setup(thread)
  counter = counter + 1
  thread:set("offset", counter * 7919)
  table.insert(threads, thread)
end

local i = 0
local prepared = {}

-- $BENCH_IP and $BENCH_HELO, when set, go with every request as the `IP` and `Helo` headers
-- (scripts/bench_dns.sh: SPF and the DNS lists need a client address). $BENCH_ENVELOPE=1 gives
-- each message instead the envelope an MTA sends (IP, Helo, Hostname, From, Rcpt, Queue-Id, a
-- different one a message), so that the decision history records what it would behind an MTA
-- (scripts/bench_history.sh).
local function envelope(k)
  return {
    ["Content-Type"] = "text/plain",
    ["IP"] = string.format("198.51.%d.%d", (k * 7) % 256, (k * 13) % 256),
    ["Helo"] = string.format("mx%d.sender%d.example", k % 3, k),
    ["Hostname"] = string.format("mail.sender%d.example", k),
    ["From"] = string.format("user%d@sender%d.example", k % 97, k),
    ["Rcpt"] = string.format("rcpt%d@ourcompany.example", k % 50),
    ["Queue-Id"] = string.format("%05X%05X", (k * 2654435761) % 1048576, (k * 40503) % 1048576),
  }
end

-- $BENCH_USER_FROM=1 sends each message as outbound mail of a login in its own From domain
-- (`User: bench@<From domain>`), which DKIM signing signs (scripts/bench_sign.sh).
local function from_domain(body)
  local head = body:match("^(.-)\r?\n\r?\n") or body
  local from = head:match("\n[Ff][Rr][Oo][Mm]:[^\n]-@([%w%.%-]+)") or head:match("^[Ff][Rr][Oo][Mm]:[^\n]-@([%w%.%-]+)")
  return from and from:lower()
end

function init(args)
  i = offset or 0
  local headers = { ["Content-Type"] = "text/plain" }
  if os.getenv("BENCH_IP") then headers["IP"] = os.getenv("BENCH_IP") end
  if os.getenv("BENCH_HELO") then headers["Helo"] = os.getenv("BENCH_HELO") end
  local per_message = os.getenv("BENCH_ENVELOPE") == "1"
  local user_from = os.getenv("BENCH_USER_FROM") == "1"
  for k, body in ipairs(bodies) do
    local h = per_message and envelope(k) or headers
    if user_from then
      h = { ["Content-Type"] = "text/plain", ["User"] = "bench@" .. (from_domain(body) or "none.example") }
    end
    prepared[k] = wrk.format("POST", "/checkv2", h, body)
  end
end

-- $BENCH_PAUSE_MS: each connection waits that long before each request (an offered rate below
-- saturation: scripts/mx_farm.sh measures p99 at about half the saturated rate this way).
local pause = tonumber(os.getenv("BENCH_PAUSE_MS") or "0") or 0
if pause > 0 then
  function delay() return pause end
end

function request()
  i = i + 1
  return prepared[(i % #prepared) + 1]
end

function done(summary, latency, requests)
  local s = summary
  io.write(string.format("messages: %d in %.1f s = %.1f msg/s, errors: connect %d read %d write %d status %d timeout %d\n",
    s.requests, s.duration / 1e6, s.requests / (s.duration / 1e6),
    s.errors.connect, s.errors.read, s.errors.write, s.errors.status, s.errors.timeout))
  io.write(string.format("latency ms: p50 %.2f  p90 %.2f  p99 %.2f  max %.2f\n",
    latency:percentile(50) / 1000, latency:percentile(90) / 1000,
    latency:percentile(99) / 1000, latency.max / 1000))
end
