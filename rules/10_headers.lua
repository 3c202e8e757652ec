-- Header checks: missing and malformed fields, dates, Message-ID, mailer, Received chain,
-- recipients.

local util = require("shrike.util")

local byte, find, lower, match, sub = string.byte, string.find, string.lower, string.match, string.sub
local big_providers = util.big_providers

local DAY = 86400

-- HELO names that only spamware uses: a mailbox provider's bare domain, or a placeholder.
local FAKE_HELO = util.set {
  "yahoo.com", "msn.com", "aol.com", "lycos.com", "excite.com", "juno.com", "compuserve.com",
  "caramail.com", "eudoramail.com", "desertmail.com", "rediffmail.com", "netscape.net",
  "bigfoot.com", "mail.com", "email.com", "gmail.com", "outlook.com",
  "localhost.com", "mydomain.com", "yourdomain.com", "domain.com", "yourwebsite.com",
}

---------------------------------------------------------------------------------------------
-- Missing fields

rule {
  name = "HDR_MISSING",
  scores = {
    MISSING_DATE = 1.5,
    MISSING_MESSAGE_ID = 1.5,
    MISSING_FROM = 2.0,
  },
  description = "A header every mail client writes is missing (Date, Message-ID, From)",
  group = "headers",
  check = function(msg)
    local a = msg:anomalies()
    if not (a.missing_date or a.missing_message_id or a.missing_from) then return end
    local hits = {}
    if a.missing_date then hits.MISSING_DATE = true end
    if a.missing_message_id then hits.MISSING_MESSAGE_ID = true end
    if a.missing_from then hits.MISSING_FROM = true end
    return hits
  end,
}

---------------------------------------------------------------------------------------------
-- Date

rule {
  name = "INVALID_DATE",
  score = 2.5,
  description = "Date header that does not parse",
  group = "headers",
  check = function(msg)
    return msg:has_anomaly("invalid_date")
  end,
}

rule {
  name = "DATE_CHECKS",
  scores = {
    DATE_IN_FUTURE = 2.0,     -- more than a day ahead of the scan clock
    DATE_IN_PAST = 0.1,       -- more than a year behind the scan clock (old mail is often fine)
    DATE_AHEAD_OF_RCVD = 3.0, -- written more than 6 hours after the receiving side's stamp
    DATE_BAD_ZONE = 3.0,      -- a zone offset no place has ("-1900", "+0575")
    DATE_ZONE_MALFORMED = 2.0, -- a zone in no form RFC 5322 allows ("GMT+1", "+-0500", "Eastern Daylight Time")
  },
  description = "Date far from the scan clock, ahead of the time the message was received, or in an impossible or malformed zone",
  group = "headers",
  check = function(msg)
    local hits
    -- the zone read in Rust: an impossible offset, or a form RFC 5322 does not allow
    local problem, zone = msg:date_zone()
    if problem == "bad_offset" then
      hits = { DATE_BAD_ZONE = { zone } }
    elseif problem then
      hits = { DATE_ZONE_MALFORMED = { zone } }
    end
    local date = msg:date()
    if not date then return hits end
    local now = msg:now()
    if date > now + DAY then
      hits = hits or {}
      hits.DATE_IN_FUTURE = true
    elseif date < now - 365 * DAY then
      hits = hits or {}
      hits.DATE_IN_PAST = true
    end
    -- The receiving side stamps the Received header of the hop where a public address handed
    -- the message over: a sender's clock that runs hours ahead of it is a forged or careless
    -- bulk mailer. The hops above that one are local (a content filter, fetchmail), and their
    -- stamps can come days later; without a public hop, the topmost stamp.
    local rtime = msg:received_time("public") or msg:received_time()
    if rtime and date > rtime + 6 * 3600 and date < rtime + 365 * DAY then
      hits = hits or {}
      hits.DATE_AHEAD_OF_RCVD = { string.format("%dh", (date - rtime) // 3600) }
    end
    return hits
  end,
}

---------------------------------------------------------------------------------------------
-- Message-ID

-- Outlook and Outlook Express write the time into the 12-hex-digit first part of their ids:
-- digits 5 to 12 are the high 32 bits of the Windows FILETIME (100 ns since 1601) of the moment
-- the message was written, one unit every 429.5 seconds. Ratware copies the form with digits
-- of its own.
local function outlook_time_token(mid)
  local t = match(mid, "^%x%x%x%x(%x%x%x%x%x%x%x%x)%$")
  return t and tonumber(t, 16)
end

-- Whether the token is within 250 units (about 30 hours) of the Date, or of the topmost or
-- the earliest Received stamp (a sender's clock may be wrong, the Date rewritten).
local function outlook_time_fits(msg, token)
  local n = msg:received_count()
  local times = { msg:date(), n > 0 and msg:received_time() or nil,
    n > 1 and msg:received_time(n) or nil }
  local any = false
  for i = 1, 3 do
    local t = times[i]
    if t then
      any = true
      if math.abs((t + 11644473600) * 1e7 / 4294967296 - token) < 250 then return true end
    end
  end
  return not any
end

-- What `match(mid, "^%[?([^@>%]]*)%]?>?%s*$", from)` captures, with plain searches: the text
-- from `from` (after one "[") up to the first "]" or ">", when what follows is at most "]", ">"
-- and white space; nil otherwise. (`from` is past the id's last "@".)
local function mid_domain(mid, from)
  if byte(mid, from) == 91 then from = from + 1 end -- "["
  local close = find(mid, "]", from, true)
  local gt = find(mid, ">", from, true)
  if gt and (not close or gt < close) then close = gt end
  if not close then return sub(mid, from) end
  local rest = close
  if byte(mid, rest) == 93 then rest = rest + 1 end -- "]"
  if byte(mid, rest) == 62 then rest = rest + 1 end -- ">"
  if rest <= #mid and not find(mid, "^%s*$", rest) then return nil end
  return sub(mid, from, close - 1)
end

rule {
  name = "MID_DOMAIN",
  scores = {
    MID_IP_LITERAL = 0.0, -- <...@[192.0.2.1]>: informational (65 ham, 4 spam in the dev replay)
    MID_NO_FQDN = 0.0,    -- <...@localhost>, <...@hostname>: informational (2-fold CV on the dev
                          -- split: 20% of spam, 10% of ham, 49% of hard ham)
    MID_NO_AT = 2.0,      -- no "@" at all: <E9D312B69C2346E8>, "PM200011:12:45 AM"
    MID_OUTLOOK_FORGED = 1.5, -- Outlook's <hex$hex$hex@host> form, sent by another mailer
    MID_OUTLOOK_TIME = 3.0,   -- Outlook's form, but the time written into it is not the message's
  },
  description = "Message-ID without @, whose domain part is an IP literal or not a fully qualified name, or in Outlook's form from another mailer or with another time in it",
  group = "headers",
  check = function(msg)
    local mid = msg:message_id()
    if not mid then return end
    -- Every mailer writes id-left "@" id-right (RFC 5322); one without "@" is made up. (`mid`
    -- is the id without its angle brackets.)
    if not find(mid, "@", 1, true) then return "MID_NO_AT", 1, { mid } end
    local hits
    -- Outlook and Outlook Express (and Microsoft's CDO library) write
    -- <0a1b2c3d4e5f$0a1b2c3d$0a1b2c3d@host>; ratware copies the form, zeros and all, under
    -- other mailer names or none.
    -- (the 13th byte is its first "$": most ids fail that test before the pattern runs)
    if byte(mid, 13) == 36
      and find(mid, "^%x%x%x%x%x%x%x%x%x%x%x%x%$%x%x%x%x%x%x%x%x%$%x%x%x%x%x%x%x%x@") then
      local mailer = msg:mailer() or ""
      if not find(mailer, "^Microsoft") then
        hits = { MID_OUTLOOK_FORGED = { mailer ~= "" and mailer or "no mailer" } }
      end
      local token = outlook_time_token(mid)
      if token and not outlook_time_fits(msg, token) then
        hits = hits or {}
        hits.MID_OUTLOOK_TIME = true
      end
    end
    -- After the last "@" (none may follow the domain part), found by plain searches: what
    -- `match(mid, "^.*@%[?([^@>%]]*)%]?>?%s*$")` reads, without `.*` backtracking over the id
    -- or a class tested on every byte of the domain.
    local at = find(mid, "@", 1, true)
    while true do
      local nxt = find(mid, "@", at + 1, true)
      if not nxt then break end
      at = nxt
    end
    local domain = mid_domain(mid, at + 1)
    if not domain or domain == "" then
      hits = hits or {}
      hits.MID_NO_FQDN = true
    elseif find(domain, "^%d+%.%d+%.%d+%.%d+$") or find(domain, "^[Ii][Pp][Vv]6:") then
      hits = hits or {}
      hits.MID_IP_LITERAL = true
    elseif not find(domain, ".", 1, true) or find(domain, "^localhost") or byte(domain, -1) == 46 then
      hits = hits or {}
      hits.MID_NO_FQDN = { domain }
    end
    return hits
  end,
}

---------------------------------------------------------------------------------------------
-- Sender addresses

local freemail = util.freemail

-- Free mailbox providers and what their own servers' names contain. Hotmail and AOL are left
-- out: in the dev split, lists and gateways that drop Received headers passed their users' ham.
local PROVIDER_HOSTS = {
  ["yahoo.com"] = { "yahoo." }, ["yahoo.co.uk"] = { "yahoo." }, ["ymail.com"] = { "yahoo." },
  ["msn.com"] = { "msn.com", "hotmail.com" }, ["excite.com"] = { "excite" },
  ["lycos.com"] = { "lycos" }, ["juno.com"] = { "juno.com" }, ["netscape.net"] = { "netscape", "aol.com" },
  ["mail.com"] = { "mail.com" }, ["email.com"] = { "mail.com" }, ["caramail.com"] = { "caramail" },
  ["gmail.com"] = { "google.com", "gmail.com" }, ["googlemail.com"] = { "google.com" },
}

-- Whether the first `n` bytes of `s` end in two ASCII letters, then three or more digits: what
-- `find(sub(s, 1, n), "%a%a%d%d%d+$")` says, by a walk back from the end instead of a pattern
-- tried at every position.
local function ends_in_nums(s, n)
  local i = n
  while i > 0 do
    local c = byte(s, i)
    if c < 48 or c > 57 then break end
    i = i - 1
  end
  if n - i < 3 or i < 2 then return false end
  local a, b = byte(s, i - 1, i)
  return (a >= 65 and a <= 90 or a >= 97 and a <= 122) and (b >= 65 and b <= 90 or b >= 97 and b <= 122)
end

-- Whether `s` contains one of the plain strings `needles`.
local function contains_any(s, needles)
  for j = 1, #needles do
    if find(s, needles[j], 1, true) then return true end
  end
  return false
end

rule {
  name = "SENDER_ADDRESS",
  scores = {
    FROM_ENDS_IN_NUMS = 1.0, -- "des34newsa" is fine, "suz0123893616943" is not: a word, then 3+ digits
    FREEMAIL_REPLYTO = 1.5,  -- replies go to a free mailbox, not to the sender's domain
    FROM_ENCODED_ADDR = 2.0, -- "=?iso-2022-jp?B?...?=@example.jp": an encoded word as the address
    FREEMAIL_FORGED_RCVD = 1.5, -- From a free mailbox provider, but none of its servers in the Received chain
  },
  description = "From address of a word and a number, or MIME-encoded (an encoded word in the address itself), or at a free mailbox provider whose servers the message never passed; Reply-To at a free mailbox provider other than the From domain",
  group = "headers",
  check = function(msg)
    local addr, from_domain = msg:from()
    local hits
    -- RFC 2047 allows encoded words in the display name only; ratware encodes the whole address
    -- and leaves "@domain" after it, where no address can be read.
    if not addr then
      local raw_from = msg:raw_header("From")
      if raw_from and find(raw_from, "?=@", 1, true) then
        hits = { FROM_ENCODED_ADDR = true }
      end
    else
      -- the local part (before the first "@") ends in a word, then 3+ digits
      local at = find(addr, "@", 1, true)
      if at and ends_in_nums(addr, at - 1) then
        hits = { FROM_ENDS_IN_NUMS = { sub(addr, 1, at - 1) } }
      end
    end
    -- Mail from a provider's mailbox leaves through the provider's servers, and the Received
    -- chain names them (its web front ends write "by web12.mail.yahoo.com via HTTP").
    local needles = from_domain and PROVIDER_HOSTS[from_domain]
    if needles then
      -- first the hops' host names (already parsed), then the whole headers ("by" clauses)
      local seen = false
      local domains = msg:hop_domains()
      for i = 1, #domains do
        if contains_any(domains[i], needles) then seen = true; break end
      end
      if not seen then
        local rcvd = msg:headers("Received")
        for i = 1, #rcvd do
          if contains_any(lower(rcvd[i]), needles) then seen = true; break end
        end
      end
      if not seen then
        hits = hits or {}
        hits.FREEMAIL_FORGED_RCVD = { from_domain }
      end
    end
    -- addresses and domains come lower-cased
    local _, reply_domain = msg:reply_to()
    if reply_domain then
      if freemail[reply_domain] and from_domain ~= reply_domain then
        hits = hits or {}
        hits.FREEMAIL_REPLYTO = { reply_domain }
      end
    end
    return hits
  end,
}

---------------------------------------------------------------------------------------------
-- Other fields

rule {
  name = "HDR_PRIORITY_HIGH",
  score = 1.5,
  description = "Marked as highest priority (X-Priority: 1, X-MSMail-Priority: High)",
  group = "headers",
  check = function(msg)
    local p = msg:header("X-Priority")
    if p and find(p, "^%s*1") then return true end
    p = msg:header("X-MSMail-Priority")
    if p and find(lower(p), "^%s*high") then return true end
  end,
}

rule {
  name = "MISSING_MIME_VERSION",
  score = 2.0,
  description = "HTML or multipart Content-Type without a MIME-Version header",
  group = "headers",
  check = function(msg)
    if msg:header_count("MIME-Version") > 0 then return end
    local ct = msg:header("Content-Type")
    if not ct then return end
    ct = lower(ct)
    return find(ct, "^%s*text/html") ~= nil or find(ct, "^%s*multipart/") ~= nil
  end,
}

---------------------------------------------------------------------------------------------
-- Mailer

-- Outlook Express and Outlook 9/10/11 ("Build ...") always wrote X-MimeOLE; the Macintosh
-- editions and today's Outlook (16.0) do not, and are left alone.
local function claims_old_outlook(mailer)
  if not find(mailer, "^Microsoft Outlook") then return false end
  if find(mailer, "Macintosh", 1, true) then return false end
  return find(mailer, "^Microsoft Outlook Express [4-6]%.") ~= nil
    or find(mailer, "^Microsoft Outlook[^%d]*Build %d") ~= nil
end

rule {
  name = "MAILER_CHECKS",
  scores = {
    FORGED_OUTLOOK = 6.0,  -- claims Outlook (Express) in a form it never wrote, or without X-MimeOLE
    MAILER_RANDOM = 2.0,   -- a random-looking token as mailer name
  },
  description = "X-Mailer that no real mail client writes",
  group = "headers",
  check = function(msg)
    -- (X-Mailer, else User-Agent, trimmed; nil when empty: read once a scan, and cached)
    local mailer = msg:mailer()
    if not mailer then return end
    if claims_old_outlook(mailer) then
      -- Outlook Express versions are exactly "Microsoft Outlook Express M.mm.bbbb.rrrr".
      local oe = find(mailer, "^Microsoft Outlook Express [4-6]%.")
      if oe and not find(mailer, "^Microsoft Outlook Express %d%.%d%d%.%d%d%d%d%.%d%d%d%d?$") then
        return "FORGED_OUTLOOK", 1, { "version format" }
      end
      if msg:header_count("X-MimeOLE") == 0 then
        return "FORGED_OUTLOOK", 1, { "no X-MimeOLE" }
      end
      -- Outlook Express wrote its own Message-ID, always <8 or 12 hex$8 hex$8 hex@host>
      -- (through Hotmail's web gateway, Hotmail's <27 letters and digits@hotmail.com>). Any
      -- other id was written by the program that really sent the message, or by a relay.
      if oe then
        local mid = msg:message_id() or ""
        if not find(mid, "^%x%x%x%x%x%x%x%x%$%x%x%x%x%x%x%x%x%$%x%x%x%x%x%x%x%x@")
          and not find(mid, "^%x%x%x%x%x%x%x%x%x%x%x%x%$%x%x%x%x%x%x%x%x%$%x%x%x%x%x%x%x%x@")
          and not find(mid, "^[%w-]+@hotmail%.com$") then
          return "FORGED_OUTLOOK", 1, { "message-id" }
        end
      end
      return
    end
    -- "kmsOS3CsY2G6UT3hb": one token of 10+ letters and digits mixing cases and digits.
    if #mailer >= 10 and #mailer <= 40 and find(mailer, "^%w+$")
      and find(mailer, "%u.*%u") and find(mailer, "%l.*%l") and find(mailer, "%d") then
      -- and no run of 4 lower-case letters that would make it look like a word
      if not find(mailer, "%l%l%l%l") then
        return "MAILER_RANDOM", 1, { mailer }
      end
    end
  end,
}

---------------------------------------------------------------------------------------------
-- Received chain

rule {
  name = "RCVD_CHECKS",
  scores = {
    RCVD_TOO_MANY = 1.0,       -- 20 or more hops: a loop or a forged chain
    RCVD_FORGED_PROVIDER = 1.5, -- a hop claims a big mailbox provider from a private address
    RCVD_HELO_IP = 1.0,        -- "from 192.0.2.7 ([192.0.2.7])": a bare IP as HELO name
    RCVD_FAKE_HELO = 4.0,      -- greeted as a mailbox provider's bare domain ("from yahoo.com (")
  },
  description = "Suspicious Received chain: too long, forged provider hops, bare IP or a provider's bare domain as HELO",
  group = "headers",
  check = function(msg)
    local n = msg:received_count()
    if n == 0 then return end
    local hits
    if n >= 20 then hits = { RCVD_TOO_MANY = { tostring(n) } } end
    -- A client that greets with its bare address (not the [address] literal) is spamware:
    -- `helo_ip` marks a hop written "from 192.0.2.7 ([192.0.2.7])".
    local helo_ip = msg:bare_helo_ip()
    if helo_ip then
      hits = hits or {}
      hits.RCVD_HELO_IP = { helo_ip }
    end
    -- The two checks below look at hops whose host is under a name of FAKE_HELO or
    -- big_providers: without one (most mail), the hop records are not needed.
    local domains, named = msg:hop_domains(), false
    for i = 1, #domains do
      local d = domains[i]
      if FAKE_HELO[d] or big_providers[d] then named = true; break end
    end
    if not named then return hits end
    local ips = msg:ips()
    -- A mailbox provider's relays greet with their own full names (mta5.mail.yahoo.com), never
    -- with the provider's bare domain, nor with a placeholder like "mydomain.com". (Hotmail's web
    -- servers did greet as "hotmail.com": it is not in the set.)
    for i = 1, #ips do
      local host = ips[i].host
      if host and FAKE_HELO[host] and ips[i].source ~= "client" then
        hits = hits or {}
        hits.RCVD_FAKE_HELO = { host }
        break
      end
    end
    -- A big provider's own relays hand mail on from public addresses; a host that names one
    -- of them but connected from a private address is a forged hop. Only the hops outside
    -- the receiving side's network count: skip those from private addresses at the top.
    -- (`domain` is the registrable domain of the hop's host name)
    for i = 1, #ips do
      local h = ips[i]
      local provider = h.domain
      if provider and big_providers[provider] and h.source ~= "client" and h.private
        and not find(lower(h.host), "localhost", 1, true) then
        -- the provider's internal hops sit under a public hop of the same provider
        local prev = ips[i - 1]
        if not (prev and prev.domain == provider) then
          hits = hits or {}
          hits.RCVD_FORGED_PROVIDER = { h.host .. " [" .. h.ip .. "]" }
          break
        end
      end
    end
    return hits
  end,
}

---------------------------------------------------------------------------------------------
-- Recipients

rule {
  name = "RCPT_CHECKS",
  scores = {
    TO_UNDISCLOSED = 2.0, -- "undisclosed-recipients:;" and the like
    TO_MISSING = 0.0,     -- no To, Cc or Bcc: informational (135 ham, 0 spam in the dev replay)
    RCPT_MANY = 2.5,      -- 20 or more addresses in To and Cc (weight 0.5 from 10)
  },
  description = "Hidden or very many recipients",
  group = "headers",
  check = function(msg)
    local hits
    local to = msg:header("To")
    if to then
      if find(lower(to), "undisclosed", 1, true) then
        hits = { TO_UNDISCLOSED = true }
      end
    elseif msg:has_anomaly("missing_to") then
      hits = { TO_MISSING = true }
    end
    local n = msg:email_count("to") + msg:email_count("cc")
    if n >= 10 then
      hits = hits or {}
      hits.RCPT_MANY = { weight = n >= 20 and 1 or 0.5, tostring(n) }
    end
    return hits
  end,
}
