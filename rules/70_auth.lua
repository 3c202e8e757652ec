-- Mail authentication and DNS lists: SPF, DKIM, DMARC and ARC results (msg:auth()) and DNS
-- list hits (msg:dnsbl()) as the symbols rspamd's users know, with rspamd's default scores.
-- They come from the network checks `serve` runs before the rules ([dns]); offline (`scan`,
-- `replay`, or [dns] enabled = false) msg:auth().ran is false and none of these fire.

local function opts(weight, ...)
  local t = { weight = weight }
  for i = 1, select("#", ...) do
    local v = select(i, ...)
    if v then t[#t + 1] = v end
  end
  return t
end

-- Result to symbol, built once per state (not per message).
local SPF_SYMBOLS = {
  pass = "R_SPF_ALLOW", fail = "R_SPF_FAIL", softfail = "R_SPF_SOFTFAIL",
  neutral = "R_SPF_NEUTRAL", temperror = "R_SPF_DNSFAIL", permerror = "R_SPF_PERMFAIL",
  none = "R_SPF_NA",
}
local DKIM_SYMBOLS = {
  pass = "R_DKIM_ALLOW", fail = "R_DKIM_REJECT", neutral = "R_DKIM_REJECT",
  temperror = "R_DKIM_TEMPFAIL", permerror = "R_DKIM_PERMFAIL",
}
local DMARC_POLICY_SYMBOLS = { reject = "DMARC_POLICY_REJECT", quarantine = "DMARC_POLICY_QUARANTINE" }
local ARC_SYMBOLS = {
  pass = "ARC_ALLOW", fail = "ARC_REJECT", permerror = "ARC_INVALID", neutral = "ARC_INVALID",
  temperror = "ARC_DNSFAIL",
}

rule {
  name = "AUTH_SPF",
  description = "SPF result of the envelope sender (RFC 7208)",
  group = "auth",
  scores = {
    R_SPF_ALLOW = -0.2, R_SPF_FAIL = 1.0, R_SPF_SOFTFAIL = 0.0, R_SPF_NEUTRAL = 0.0,
    R_SPF_DNSFAIL = 0.0, R_SPF_PERMFAIL = 0.0, R_SPF_NA = 0.0,
  },
  check = function(msg)
    local a = msg:auth()
    if not a.ran then return end
    local s = a.spf
    local sym = SPF_SYMBOLS[s.result]
    return { [sym] = opts(1, s.domain, s.reason) }
  end,
}

rule {
  name = "AUTH_DKIM",
  description = "DKIM signatures (RFC 6376): valid, invalid, key not found in time, broken",
  group = "auth",
  scores = {
    R_DKIM_ALLOW = -0.2, R_DKIM_REJECT = 1.0, R_DKIM_TEMPFAIL = 0.0, R_DKIM_PERMFAIL = 0.0,
    R_DKIM_NA = 0.0,
  },
  check = function(msg)
    local a = msg:auth()
    if not a.ran then return end
    if #a.dkim == 0 then return "R_DKIM_NA" end
    local hits = {}
    for _, d in ipairs(a.dkim) do
      local sym = DKIM_SYMBOLS[d.result]
      if sym then
        local h = hits[sym] or opts(1)
        if d.domain then h[#h + 1] = d.domain end
        hits[sym] = h
      end
    end
    if next(hits) == nil then return "R_DKIM_NA" end
    return hits
  end,
}

rule {
  name = "AUTH_DMARC",
  description = "DMARC (RFC 7489): aligned pass, or failure under the domain's published policy",
  group = "auth",
  scores = {
    DMARC_POLICY_ALLOW = -0.5, DMARC_POLICY_REJECT = 2.0, DMARC_POLICY_QUARANTINE = 1.5,
    DMARC_POLICY_SOFTFAIL = 0.1, DMARC_NA = 0.0, DMARC_DNSFAIL = 0.0,
  },
  check = function(msg)
    local a = msg:auth()
    if not a.ran then return end
    local d = a.dmarc
    local sym
    if d.result == "pass" then
      sym = "DMARC_POLICY_ALLOW"
    elseif d.result == "fail" then
      sym = DMARC_POLICY_SYMBOLS[d.policy] or "DMARC_POLICY_SOFTFAIL"
    elseif d.result == "temperror" then
      sym = "DMARC_DNSFAIL"
    else
      sym = "DMARC_NA"
    end
    return { [sym] = opts(1, d.domain, d.policy) }
  end,
}

rule {
  name = "AUTH_ARC",
  description = "ARC chain (RFC 8617): valid, failed, malformed",
  group = "auth",
  -- A valid chain says only that its sealers signed it, and anyone can seal its own mail: no
  -- ham points for it (rspamd gives -1) until sealers can be named as trusted.
  scores = { ARC_ALLOW = 0.0, ARC_REJECT = 1.0, ARC_INVALID = 0.5, ARC_DNSFAIL = 0.0, ARC_NA = 0.0 },
  check = function(msg)
    local a = msg:auth()
    if not a.ran then return end
    local r = a.arc.result
    local sym = ARC_SYMBOLS[r] or "ARC_NA"
    return { [sym] = opts(1, a.arc.domain) }
  end,
}

-- DNS lists: the symbols of the preset zones ([[dnsbl]] in shrike.toml). A zone of your own
-- is scored by its `scores` in the config, or by a rule of yours reading msg:dnsbl().
-- *_BLOCKED is our resolver being refused (a public or forwarding resolver, a typo in the zone,
-- too many queries): never a listing, score 0.
local LIST_SCORES = {
  RBL_SPAMHAUS_SBL = 4.0, RBL_SPAMHAUS_CSS = 2.0, RBL_SPAMHAUS_XBL = 4.0,
  RBL_SPAMHAUS_DROP = 7.0, RBL_SPAMHAUS_PBL = 2.0, RBL_SPAMHAUS_LISTED = 0.0,
  RBL_SPAMHAUS_BLOCKED = 0.0,
  DBL_SPAM = 6.5, DBL_PHISH = 6.5, DBL_MALWARE = 6.5, DBL_BOTNET = 5.5, DBL_ABUSE = 5.5,
  DBL_ABUSE_REDIR = 1.5, DBL_ABUSE_PHISH = 5.5, DBL_ABUSE_MALWARE = 5.5, DBL_ABUSE_BOTNET = 5.5,
  DBL_LISTED = 0.0, DBL_BLOCKED = 0.0,
  SURBL_MULTI_ABUSE = 5.0, SURBL_MULTI_MALWARE = 5.0, SURBL_MULTI_PHISH = 5.0,
  SURBL_MULTI_CR = 4.0, SURBL_LISTED = 0.0, SURBL_BLOCKED = 0.0,
  URIBL_BLACK = 7.5, URIBL_GREY = 1.5, URIBL_RED = 0.5, URIBL_LISTED = 0.0, URIBL_BLOCKED = 0.0,
}

rule {
  name = "DNS_LISTS",
  description = "Sender address or a URL / sender domain on a DNS block list",
  group = "dnsbl",
  scores = LIST_SCORES,
  check = function(msg)
    local hits = {}
    for _, h in ipairs(msg:dnsbl()) do
      if LIST_SCORES[h.symbol] then
        local o = hits[h.symbol] or opts(1)
        o[#o + 1] = h.name
        hits[h.symbol] = o
      end
    end
    return hits
  end,
}

-- The reputation of a sender that proved who it is: the signing domain of a valid DKIM
-- signature aligned with From (store key type `dkim_domain`). A forger can copy a good
-- sender's From, not its signature, so this history cannot be borrowed.
rule {
  name = "REPUTATION_DKIM",
  scores = { REP_DKIM_GOOD = -1.0, REP_DKIM_SPAM = 3.0 },
  description = "Mail signed (DKIM, aligned) by this domain in the last 7 days was mostly ham, or mostly spam",
  group = "reputation",
  check = function(msg)
    local d = msg:auth().aligned_dkim_domain
    if not d then return end
    local seen, spam, ham, complaints = msg:stat("dkim_domain", "7d")
    if spam + ham < 10 then return end
    if ham >= 10 and spam * 10 <= ham and complaints * 20 <= seen then
      return { REP_DKIM_GOOD = opts(1, d, string.format("%d ham of %d", ham, seen)) }
    end
    if spam >= 10 and ham * 4 <= spam then
      return { REP_DKIM_SPAM = opts(1, d, string.format("%d spam of %d", spam, seen)) }
    end
  end,
}
