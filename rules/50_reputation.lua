-- Reputation: what the store has seen of this message's pieces before it.
--
-- Counts exclude the current message. `spam` and `ham` count earlier verdicts (and learning),
-- `complaints` users who marked such a message as spam, `rescues` users who moved one out of
-- spam. A sender, IP or domain whose mail was mostly judged ham is "known good": bulk checks
-- leave it alone, so a busy newsletter is not punished for being busy.

local util = require("shrike.util")

local is_private_ip, ramp = util.is_private_ip, util.ramp
local lower, format = string.lower, string.format

local BULK_SEEN = 30          -- messages in the last hour that make a piece "bulk"
local SPAM_MIN_LABELLED = 10  -- verdicts needed before a spam ratio means anything
local SPAM_RATIO = 0.8
local COMPLAINTS_MIN = 3      -- complaints in 7 days
local COMPLAINT_SHARE = 0.2   -- complaints per message seen that mean more than noise
local RESCUES_MIN = 3         -- rescues in 14 days

-- Mostly judged ham before: a known-good sender, domain or text.
local function known_good(seen, spam, ham)
  return ham > 0 and ham * 2 >= seen and ham > spam
end

---------------------------------------------------------------------------------------------
-- Bulk: the same piece in many messages within the hour

rule {
  name = "BULK",
  scores = {
    BULK_SUBJECT = 1.0,
    BULK_FROM = 0.5,
    BULK_URL_DOMAIN = 1.0,
    BULK_BODY = 1.5,  -- near-duplicate bodies (most fuzzy shingles seen 30+ times)
  },
  description = "The same subject, sender, URL domain or near-identical body in 30+ messages within the hour",
  group = "reputation",
  check = function(msg)
    local hits
    local seen, spam, ham = msg:stat("subject", "1h")
    if seen >= BULK_SEEN and #msg:subject_normalized() >= 8 and not known_good(seen, spam, ham) then
      hits = { BULK_SUBJECT = { weight = seen >= 100 and 1.5 or 1, tostring(seen) } }
    end
    seen, spam, ham = msg:stat("from", "1h")
    if seen >= BULK_SEEN and not known_good(seen, spam, ham) then
      hits = hits or {}
      hits.BULK_FROM = { weight = seen >= 100 and 1.5 or 1, tostring(seen) }
    end
    seen, spam, ham = msg:stat("url_domain", "1h")
    if seen >= BULK_SEEN and not known_good(seen, spam, ham) then
      hits = hits or {}
      hits.BULK_URL_DOMAIN = { weight = seen >= 100 and 1.5 or 1, tostring(seen) }
    end
    -- One shared min-hash value means little (a common footer); most of the 32 shared means
    -- a near-duplicate body.
    -- (the values seen 30+ times are summed only when the most-seen ones are not mostly ham)
    seen, spam, ham = msg:stat("body_fuzzy", "1h")
    if seen >= BULK_SEEN and not known_good(seen, spam, ham) then
      local n_sum, s_sum, h_sum, _, _, bulk, total = msg:stat("body_fuzzy", "1h", "sum", BULK_SEEN)
      if total > 0 and bulk * 2 >= total and not known_good(n_sum, s_sum, h_sum) then
        hits = hits or {}
        hits.BULK_BODY = { format("%d/%d", bulk, total) }
      end
    end
    return hits
  end,
}

---------------------------------------------------------------------------------------------
-- Spam reports: verdicts and complaints

-- Weight of a spam history: the spam ratio past 0.8 over 10+ verdicts (0.5 .. 1), and
-- complaints (0.5 at 3, 1 at 10).
local function spam_weight(seen, spam, ham)
  local labelled = spam + ham
  if labelled < SPAM_MIN_LABELLED then return nil end
  local ratio = spam / labelled
  if ratio < SPAM_RATIO then return nil end
  return 0.5 + 0.5 * ramp(ratio, SPAM_RATIO, 1.0), ratio
end

-- Complaints count when there are a few, more than rescues, and they are not a sliver of a busy
-- piece's traffic: a mailing-list host that a spam also linked to draws a handful of complaints
-- among hundreds of wanted messages.
local function complaint_weight(seen, complaints, rescues)
  if complaints < COMPLAINTS_MIN or complaints <= rescues then return nil end
  if complaints < COMPLAINT_SHARE * seen then return nil end
  return 0.5 + 0.5 * ramp(complaints, COMPLAINTS_MIN, 10)
end

local function add_reputation(hits, seen, spam, ham, complaints, rescues, spam_sym, complaint_sym)
  local w = spam_weight(seen, spam, ham)
  if w then
    hits = hits or {}
    hits[spam_sym] = { weight = w, format("%d/%d spam", spam, spam + ham) }
  end
  w = complaint_weight(seen, complaints, rescues)
  if w then
    hits = hits or {}
    hits[complaint_sym] = { weight = w, format("%d complaints in %d", complaints, seen) }
  end
  return hits
end

-- Fewer complaints than COMPLAINTS_MIN still count against a key with no good history at all:
-- never judged ham, never rescued, and the complaints not a sliver of its traffic. A throwaway
-- sender address is reported once or twice before it is abandoned; a correspondent whose
-- address a spam forged has ham behind it and is left alone.
local function reported(seen, ham, complaints, rescues)
  return complaints > 0 and complaints < COMPLAINTS_MIN and ham == 0 and rescues == 0
    and complaints >= COMPLAINT_SHARE * seen
end

-- A piece with one key per message (sender, sending IP).
local function check_reputation(msg, kind, hits, spam_sym, complaint_sym, reported_sym)
  local seen, spam, ham, complaints, rescues = msg:stat(kind, "7d")
  if seen == 0 and spam == 0 and complaints == 0 then return hits end
  if reported_sym and reported(seen, ham, complaints, rescues) then
    hits = hits or {}
    hits[reported_sym] = { format("%d complaints in %d", complaints, seen) }
  end
  return add_reputation(hits, seen, spam, ham, complaints, rescues, spam_sym, complaint_sym)
end

-- A piece with several keys per message (URL domains): each judged on its own counts, the
-- worst one wins (the column-wise maximum only decides whether to look).
local function check_each(msg, kind, hits, spam_sym, complaint_sym)
  local _, spam, ham, complaints = msg:stat(kind, "7d")
  if spam + ham < SPAM_MIN_LABELLED and complaints < COMPLAINTS_MIN then return hits end
  local best, best_weight
  for _, w in ipairs(msg:stats(kind, "7d")) do
    -- A URL domain's verdict ratio counts only with a user's complaint behind it: otherwise our
    -- own verdicts on the first copies of a newsletter (a shop, a list host) would brand the
    -- rest of them spam, feeding on themselves.
    local w_spam, w_ham = w.spam, w.ham
    if w.complaints == 0 or w.complaints <= w.rescues then w_spam, w_ham = 0, 0 end
    local found = add_reputation(nil, w.seen, w_spam, w_ham, w.complaints, w.rescues,
      spam_sym, complaint_sym)
    if found then
      local total = 0
      for _, h in pairs(found) do total = total + h.weight end
      if not best or total > best_weight then best, best_weight = found, total end
    end
  end
  if best then
    hits = hits or {}
    for k, v in pairs(best) do hits[k] = v end
  end
  return hits
end

rule {
  name = "REPUTATION_SPAM",
  scores = {
    REP_FROM_SPAM = 3.0,
    REP_FROM_COMPLAINTS = 4.0,
    REP_IP_SPAM = 3.0,
    REP_IP_COMPLAINTS = 4.0,
    REP_URL_SPAM = 3.0,
    REP_URL_COMPLAINTS = 4.0,
    REP_FROM_REPORTED = 4.0,  -- one or two complaints, no ham or rescue (chosen on one fold)
  },
  description = "The sender, sending IP or a URL domain was mostly spam, or drew complaints, in the last 7 days; or the sender drew a complaint and has no good history",
  group = "reputation",
  check = function(msg)
    local hits = nil
    if msg:from() then
      hits = check_reputation(msg, "from", hits, "REP_FROM_SPAM", "REP_FROM_COMPLAINTS",
        "REP_FROM_REPORTED")
    end
    -- A private or loopback address says nothing about the sender (it is our own relay).
    -- (`sender_ip`: the client's address, else the first of the Received chain)
    local ip = msg:sender_ip()
    if ip and not is_private_ip(ip) then
      hits = check_reputation(msg, "sender_ip", hits, "REP_IP_SPAM", "REP_IP_COMPLAINTS")
    end
    if #msg:domains() > 0 then
      hits = check_each(msg, "url_domain", hits, "REP_URL_SPAM", "REP_URL_COMPLAINTS")
    end
    return hits
  end,
}

---------------------------------------------------------------------------------------------
-- Rescues: users moved such messages out of spam

rule {
  name = "REPUTATION_RESCUED",
  scores = {
    REP_FROM_RESCUED = -2.0,
    REP_BODY_RESCUED = -1.5,
  },
  description = "Users moved mail from this sender, or with this text, out of spam (14 days)",
  group = "reputation",
  check = function(msg)
    local hits
    -- The From address's rescues credit only a sender that proved the From: a forger would
    -- otherwise borrow the rescues of whatever address it writes from.
    if util.authenticated_from(msg) then
      local _, _, _, complaints, rescues = msg:stat("from", "14d")
      if rescues >= RESCUES_MIN and rescues > complaints then
        hits = { REP_FROM_RESCUED = { weight = rescues >= 10 and 1.5 or 1, tostring(rescues) } }
      end
    end
    local _, _, _, complaints, rescues = msg:stat("body_exact", "14d")
    if rescues >= RESCUES_MIN and rescues > complaints then
      hits = hits or {}
      hits.REP_BODY_RESCUED = { tostring(rescues) }
    end
    return hits
  end,
}

---------------------------------------------------------------------------------------------
-- A sender domain with a history: seen a few times in two weeks, never complained about, most
-- of it not judged spam. Newsletters write from a new address each time (bounce-tracking
-- addresses like "Online#3.21245.db-Q@newsletters.example.com"), so the domain is the identity
-- that lasts; free mailbox domains are everyone's and say nothing. Spam from a domain that
-- users reported, or that the filter mostly caught, gets no credit.

local KNOWN_DOMAIN_SEEN = 3   -- messages in 14 days

rule {
  name = "REP_FROM_DOMAIN_KNOWN",
  score = -2.0,  -- chosen on one fold of the cross-validation (docs/perf-log.md)
  description = "The authenticated From domain (DMARC, aligned DKIM or SPF; not a free mailbox) was seen 3+ times in 14 days without a complaint, mostly not judged spam",
  group = "reputation",
  check = function(msg)
    -- Only a From domain the sender proved: a forged one would borrow a known domain's history.
    local domain = util.authenticated_from(msg)
    if not domain or util.freemail[domain] then return end
    local seen, spam, _, complaints = msg:stat("from_domain", "14d")
    if seen < KNOWN_DOMAIN_SEEN or complaints > 0 or spam * 2 >= seen then return end
    return 1, { tostring(seen) }
  end,
}

---------------------------------------------------------------------------------------------
-- Sender volume

rule {
  name = "SENDER_MANY_RCPTS",
  score = 1.5,
  description = "The sender wrote to 50 or more distinct recipients in 24 hours",
  group = "reputation",
  check = function(msg)
    local n = msg:stat("unique_sender", "24h")
    if n < 50 then return end
    local fseen, fspam, fham = msg:stat("from", "24h")
    if known_good(fseen, fspam, fham) then return end
    return n >= 200 and 2 or 1, { tostring(n) }
  end,
}

local RATE_LIMIT = 200 -- messages per sender address per hour

rule {
  name = "SENDER_RATELIMIT",
  score = 2.0,
  description = "The sender address went over 200 messages in an hour",
  group = "reputation",
  check = function(msg)
    local from = msg:from()
    if not from then return end
    local count, over = ratelimit("sender", lower(from), RATE_LIMIT, 3600)
    if not over then return end
    local seen, spam, ham = msg:stat("from", "1h")
    if known_good(seen, spam, ham) then return end
    return 1, { tostring(count) }
  end,
}
