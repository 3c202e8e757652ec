-- miltertest script for shrike's milter: a full SMTP-shaped conversation per message, no MTA.
--
-- Run: miltertest -D MILTER=inet:11332@127.0.0.1 -s tests/milter/shrike-basic.lua
-- Exit status 0 = all checks passed; any error() aborts with status != 0.
--
-- Expected (default rules and config):
--   ordinary message -> SMFIR_ACCEPT with X-Spam-Score, X-Spam-Status and X-Spam-Symbols added
--   GTUBE            -> SMFIR_REPLYCODE 550 5.7.1
--   forged X-Spam-*  -> removed (MT_HDRCHANGE) before ours are added

local sock = MILTER or "inet:11332@127.0.0.1"

local function check(cond, what)
  if not cond then error("FAILED: " .. what) end
  mt.echo("ok   - " .. what)
end

-- shrike asks for no replies before end of message (SMFIP_NR_*); miltertest reports those
-- steps as SMFIR_CONTINUE.
local function step(conn, rc, what)
  check(rc == nil, what .. " sent")
  check(mt.getreply(conn) == SMFIR_CONTINUE, what .. " -> continue")
end

local function session(tag, headers, body)
  local conn = mt.connect(sock, 5, 0.5)
  check(conn ~= nil, tag .. ": connect to " .. sock)
  check(mt.negotiate(conn, nil, nil, nil) == nil, tag .. ": option negotiation")
  mt.macro(conn, SMFIC_CONNECT, "j", "mta.test", "{client_addr}", "192.0.2.10")
  step(conn, mt.conninfo(conn, "client.test", "192.0.2.10"), tag .. ": connect")
  step(conn, mt.helo(conn, "client.test"), tag .. ": helo")
  mt.macro(conn, SMFIC_MAIL, "i", "QID" .. tag, "{mail_addr}", "alice@example.org")
  step(conn, mt.mailfrom(conn, "<alice@example.org>"), tag .. ": mail from")
  mt.macro(conn, SMFIC_RCPT, "{rcpt_addr}", "bob@example.com")
  step(conn, mt.rcptto(conn, "<bob@example.com>"), tag .. ": rcpt to")
  step(conn, mt.data(conn), tag .. ": data")
  for _, h in ipairs(headers) do
    step(conn, mt.header(conn, h[1], h[2]), tag .. ": header " .. h[1])
  end
  step(conn, mt.eoh(conn), tag .. ": end of headers")
  step(conn, mt.bodystring(conn, body), tag .. ": body")
  check(mt.eom(conn) == nil, tag .. ": end of message sent")
  return conn
end

local base = {
  { "From", "Alice Martin <alice@example.org>" },
  { "To", "Bob Stone <bob@example.com>" },
  { "Date", "Tue, 14 May 2024 10:14:58 +0200" },
  { "Message-ID", "<20240514081458.12345@mail.example.org>" },
}

local function with(extra)
  local h = {}
  for _, x in ipairs(base) do h[#h + 1] = x end
  for _, x in ipairs(extra) do h[#h + 1] = x end
  return h
end

-- 1. ordinary message: accepted with our headers; a forged X-Spam-Status is removed.
local c = session("normal",
  with({ { "Subject", "Notes from the planning meeting" }, { "X-Spam-Status", "No, forged" } }),
  "Hi Bob,\r\nthanks for joining the planning meeting. I will send the draft schedule.\r\n")
check(mt.getreply(c) == SMFIR_ACCEPT, "normal: eom -> SMFIR_ACCEPT")
check(mt.eom_check(c, MT_HDRADD, "X-Spam-Score"), "normal: X-Spam-Score added")
check(mt.eom_check(c, MT_HDRADD, "X-Spam-Status"), "normal: X-Spam-Status added")
check(mt.eom_check(c, MT_HDRADD, "X-Spam-Symbols"), "normal: X-Spam-Symbols added")
check(mt.eom_check(c, MT_HDRCHANGE, "X-Spam-Status"), "normal: forged X-Spam-Status removed")
check(not mt.eom_check(c, MT_BODYCHANGE), "normal: body not changed")
mt.disconnect(c)

-- 2. GTUBE: 550 5.7.1 at end of message, no headers.
c = session("gtube", with({ { "Subject", "Test spam mail (GTUBE)" } }),
  "XJS*C4JDBQADN1.NSBN3*2IDNEN*GTUBE-STANDARD-ANTI-UBE-TEST-EMAIL*C.34X\r\n")
check(mt.getreply(c) == SMFIR_REPLYCODE, "gtube: eom -> SMFIR_REPLYCODE")
check(mt.eom_check(c, MT_SMTPREPLY, "550", "5.7.1", "Spam message rejected"), "gtube: 550 5.7.1")
check(not mt.eom_check(c, MT_HDRADD), "gtube: no header added")
mt.disconnect(c)

mt.echo("ALL SHRIKE MILTERTEST CHECKS PASSED")
