-- shrike.util: helpers and constant word lists for the default rule set.
--
-- Everything constant (phrase lists, sets, patterns) is built once, when the module is first
-- required; the functions below allocate nothing per call unless they return a new table.
-- Phrase lists are lower-case: match them against msg:subject_normalized() and
-- msg:text_normalized(), which are case-folded.

local find, sub, gsub, lower, byte = string.find, string.sub, string.gsub, string.lower, string.byte
local tonumber, pairs = tonumber, pairs

local M = {}

---------------------------------------------------------------------------------------------
-- Sets and lists

--- A set (`{ [v] = true }`) of the values of an array.
function M.set(list)
  local s = {}
  for i = 1, #list do s[list[i]] = true end
  return s
end

--- True when `fn(v)` is truthy for some element of the array.
function M.any(list, fn)
  for i = 1, #list do
    if fn(list[i]) then return true end
  end
  return false
end

--- How many elements of the array `fn(v)` is truthy for.
function M.count(list, fn)
  local n = 0
  for i = 1, #list do
    if fn(list[i]) then n = n + 1 end
  end
  return n
end

--- Number of keys of a table (a set).
function M.size(t)
  local n = 0
  for _ in pairs(t) do n = n + 1 end
  return n
end

--- Clamp `x` into `[lo, hi]`.
function M.clamp(x, lo, hi)
  if x < lo then return lo end
  if x > hi then return hi end
  return x
end

--- Linear ramp: 0 at or below `lo`, 1 at or above `hi`, in between proportionally.
function M.ramp(x, lo, hi)
  if x <= lo then return 0 end
  if x >= hi then return 1 end
  return (x - lo) / (hi - lo)
end

---------------------------------------------------------------------------------------------
-- Characters

--- Number of matches of a Lua pattern class (e.g. "%u", "[!?]") in `s`. One loop step per
--- match: for dense classes over long texts prefer `re.count`.
function M.count_class(s, class)
  local n, pos = 0, 1
  while true do
    local _, j = find(s, class, pos)
    if not j then return n end
    n = n + 1
    pos = j + 1
  end
end

--- Share of capitals among the ASCII letters of `s` (of its first `max` bytes when given), and
--- the number of ASCII letters. `caps_ratio("FREE money")` → 0.444, 9. Counts in Rust
--- (`char_counts`), without building strings.
function M.caps_ratio(s, max)
  local upper, lowers = char_counts(s, max)
  local letters = upper + lowers
  if letters == 0 then return 0, 0 end
  return upper / letters, letters
end

--- Number of plain (not pattern) occurrences of `needle` in `s`.
function M.count_plain(s, needle)
  local n, pos = 0, 1
  while true do
    local i, j = find(s, needle, pos, true)
    if not i then return n end
    n = n + 1
    pos = j + 1
  end
end

--- True when `p` occurs in `s` as whole words: a phrase that starts (ends) with a letter or
--- digit must not be preceded (followed) by one ("cialis" is not in "specialist").
local function is_word_byte(b)
  return b ~= nil and ((b >= 48 and b <= 57) or (b >= 65 and b <= 90) or (b >= 97 and b <= 122))
end

local function find_word(s, p)
  local first_w = is_word_byte(byte(p, 1))
  local last_w = is_word_byte(byte(p, -1))
  local pos = 1
  while true do
    local i, j = find(s, p, pos, true)
    if not i then return false end
    if not (first_w and is_word_byte(byte(s, i - 1))) and not (last_w and is_word_byte(byte(s, j + 1))) then
      return true
    end
    pos = i + 1
  end
end
M.find_word = find_word

-- Regex text matching `p` literally.
local function regex_escape(p)
  return (gsub(p, "[%\\%.%+%*%?%(%)%|%[%]%{%}%^%$%#%-%&%~]", "\\%0"))
end
M.regex_escape = regex_escape

--- A phrase list ready for `find_phrases`: the array plus its matcher (`re.phrases`), which
--- finds every phrase of the list in one pass over a text.
function M.phrase_set(phrases)
  return { phrases = phrases, matcher = re.phrases({ phrases }) }
end

--- The phrases of `phrases` (a `phrase_set`, or an array of plain strings) found in `s` as
--- whole words: count of distinct phrases, and an array of the first `max_opts` found (for
--- symbol options; nil when none found). A phrase set costs one pass over `s`.
function M.find_phrases(s, phrases, max_opts)
  max_opts = max_opts or 3
  if phrases.matcher then
    return phrases.matcher:count(s, max_opts)
  end
  local n, found = 0, nil
  for i = 1, #phrases do
    local p = phrases[i]
    if find_word(s, p) then
      n = n + 1
      if n <= max_opts then
        found = found or {}
        found[n] = p
      end
    end
  end
  return n, found
end

---------------------------------------------------------------------------------------------
-- Phrase lists (lower-case, matched as plain substrings)

-- Money and "offer" phrases for subjects.
M.subject_money_phrases = {
  "free money", "cash bonus", "make money", "earn money", "earn extra", "extra income",
  "extra cash", "fast cash", "easy money", "double your", "get paid", "get rich", "grow rich",
  "financial freedom", "be your own boss", "work from home", "work at home", "home based business",
  "residual income", "no investment", "investment opportunity", "mortgage rate", "lowest rate",
  "low rates", "refinance", "refi ", "debt free", "out of debt", "eliminate debt",
  "consolidate", "credit card", "bad credit", "loan approved", "pre-approved", "preapproved",
  "you're approved", "you are approved", "insurance quote", "free quote", "lowest price",
  "low price", "half price", "best price", "% off", "clearance sale", "save big", "save up to",
  "per month", "per year", "free trial", "free access", "free gift", "gift card", "for only $",
  "only $", "cash prize", "you have won", "you've won", "winner", "lottery", "casino", "viagra",
  "cialis", "pharmacy", "prescription", "weight loss", "lose weight", "hgh", "growth hormone",
  "merchant account", "profits", "100% free", "million dollars", "$$$", "unsecured",
  "guaranteed", "money maker", "cash",
}

-- Money and "offer" phrases for bodies.
M.body_money_phrases = {
  "make money", "earn money", "earn extra", "extra income", "extra cash", "fast cash",
  "easy money", "double your money", "get paid to", "get rich", "financial freedom",
  "be your own boss", "work from home", "work at home", "home based business",
  "home-based business", "residual income", "no investment", "no experience necessary",
  "multi-level marketing", "network marketing", "mortgage rate", "lowest rate", "refinance",
  "debt free", "out of debt", "eliminate your debt", "consolidate your debt", "bad credit",
  "credit card offer", "pre-approved", "preapproved", "no credit check", "100% free",
  "risk free", "risk-free", "no obligation", "money back guarantee", "money-back guarantee",
  "100% guaranteed", "satisfaction guaranteed", "lowest price", "best price", "half price",
  "wholesale price", "order now", "buy now", "order today", "call now", "call toll free",
  "toll free", "toll-free", "free quote", "free trial", "free gift", "free access",
  "free consultation", "cash prize", "you have won", "you've won", "you have been selected",
  "claim your prize", "lottery", "online casino", "viagra", "cialis", "online pharmacy",
  "no prescription", "weight loss", "lose weight", "growth hormone", "penis", "enlargement",
  "merchant account", "credit card processing", "incredible offer", "special promotion",
  "per month", "save up to", "% off", "unsecured", "millions of dollars", "no hidden",
  "cost you nothing", "dollars per", "per week", "$ per", "stock pick", "investment opportunity",
  "earn up to", "income potential", "cash flow",
}

-- Urgency phrases (subjects and bodies).
M.urgency_phrases = {
  "act now", "act fast", "act today", "immediate reply",
  "limited time", "limited offer", "offer expires", "expires soon", "while supplies last",
  "last chance", "final notice", "don't wait", "dont wait", "do not delay", "don't delay",
  "now or never", "before it's too late", "today only", "only today", "one time offer",
  "once in a lifetime", "respond now", "reply now", "apply now", "order now", "call now",
  "time is running out", "action required",
  "your account will be", "verify your account", "confirm your account", "account suspended",
  "account has been suspended", "account is limited", "within 24 hours",
}

-- Urgency in subjects: the body list and words that are too common in bodies.
M.subject_urgency_phrases = {
  "urgent", "immediately", "important notice", "hurry", "deadline", "final notice",
  "expires", "expiring", "last chance", "act now", "act fast", "don't miss", "dont miss",
  "limited time", "today only", "verify your account", "account suspended", "action required",
  "account is limited", "account has been limited", "account will be closed", "unusual activity",
  "security alert", "password expires",
}

-- Opt-out boilerplate and other phrasing that bulk senders of unsolicited mail use.
M.bulk_phrases = {
  "this is not spam", "this is not a spam", "not unsolicited", "is not unsolicited",
  "s. 1618", "s.1618", "section 301", "one-time mailing", "one time mailing",
  "to be removed", "to be taken off", "remove in the subject", "remove\" in the subject",
  "with remove in", "removal instructions", "to unsubscribe from this mailing",
  "you received this email because", "you have received this email because",
  "you are on a list", "opt-in list", "opted in", "opt-out", "opt out",
  "no longer wish to receive", "do not wish to receive", "click here", "click below",
  "dear friend", "dear sir/madam", "dear sir or madam", "as seen on", "no cost to you",
  "this email was sent to you", "email marketing", "bulk email", "mass email",
  "million email addresses", "targeted email", "your email address was", "we respect your privacy",
}

-- Advance-fee ("419") fraud phrasing.
M.fraud_phrases = {
  "next of kin", "beneficiary", "barrister", "foreign partner", "foreign account",
  "transfer of the sum", "transfer the sum", "the sum of", "million united states dollars",
  "million us dollars", "us$", "usd", "security company", "diplomatic",
  "strictest confidence", "strict confidence", "absolute confidentiality", "confidential business",
  "business proposal", "business relationship", "mutual benefit", "mutually benefit",
  "late husband", "late father", "deceased", "crude oil", "central bank", "federal ministry",
  "nigeria", "lagos", "sierra leone", "ivory coast", "cote d'ivoire", "abidjan", "zimbabwe",
  "kindly", "god bless", "percent of the total", "% of the total", "your assistance",
  "assistance in", "consignment", "reply urgently",
}

-- Adult-content vocabulary (words that ordinary mail, even frank mail, rarely uses).
M.adult_phrases = {
  "hardcore", "horny", "porno", "xxx", "webcam", "live sex", "lesbian", "lesbians", "erotic",
  "adult site", "adult entertainment", "hottest babes", "hot babes", "sluts", "pussy",
  "barely legal", "nude pics", "naked girls", "hot girls", "cumshot", "cum shots", "orgy",
}

-- Pharmacy, diet and "enhancement" offers.
M.pharma_phrases = {
  "viagra", "cialis", "levitra", "phentermine", "vicodin", "propecia", "herbal viagra", "hgh",
  "human growth hormone", "weight loss", "lose weight", "diet pills", "lbs", "pharmacy",
  "prescription", "herbal", "enlargement", "enhancement", "anti-aging", "aging process",
}

-- Loans, mortgages, insurance and income pitches.
M.finance_phrases = {
  "mortgage", "refinance", "refinancing", "interest rates", "lender", "lenders", "life insurance",
  "annuity", "annuities", "loan", "loans", "debt", "commission", "commissions", "income", "earn",
  "home equity", "credit rating", "credit report", "unsecured", "homeowner", "homeowners",
}

-- Greetings of a reader the sender does not know ("dear friends" is left out: clubs and lists
-- greet their members so).
M.greeting_phrases = {
  "dear friend", "dear sir", "dear sirs", "dear madam", "dear sir or madam",
  "dear sir/madam", "dear valued customer", "dear valued member", "dear member",
  "dear homeowner", "dear customer", "dear business owner", "dear entrepreneur",
}

-- Free mailbox providers: anyone can open an address there.
M.freemail = M.set {
  "gmail.com", "googlemail.com", "yahoo.com", "yahoo.co.uk", "ymail.com", "hotmail.com",
  "outlook.com", "live.com", "msn.com", "aol.com", "icloud.com", "mail.com", "email.com",
  "gmx.net", "gmx.de", "web.de", "mail.ru", "yandex.ru", "excite.com", "juno.com", "usa.net",
  "netscape.net", "lycos.com", "rediffmail.com", "arabia.com", "protonmail.com", "zoho.com",
}

-- The lists as phrase sets (with their one-pass regex), for find_phrases.
M.sets = {
  subject_money = M.phrase_set(M.subject_money_phrases),
  subject_urgency = M.phrase_set(M.subject_urgency_phrases),
  body_money = M.phrase_set(M.body_money_phrases),
  urgency = M.phrase_set(M.urgency_phrases),
  bulk = M.phrase_set(M.bulk_phrases),
  fraud = M.phrase_set(M.fraud_phrases),
  adult = M.phrase_set(M.adult_phrases),
  pharma = M.phrase_set(M.pharma_phrases),
  finance = M.phrase_set(M.finance_phrases),
  greeting = M.phrase_set(M.greeting_phrases),
}

---------------------------------------------------------------------------------------------
-- Domains

-- URL-shortener domains (registrable domains and a few hosts).
M.shorteners = M.set {
  "bit.ly", "bitly.com", "bit.do", "tinyurl.com", "goo.gl", "t.co", "ow.ly", "is.gd", "v.gd",
  "buff.ly", "rebrand.ly", "cutt.ly", "shorturl.at", "tiny.cc", "rb.gy", "t.ly", "tiny.one",
  "s.id", "shorte.st", "adf.ly", "bc.vc", "soo.gd", "clck.ru", "qr.ae", "po.st", "lnkd.in",
  "db.tt", "qr.net", "1url.com", "tweez.me", "v.ht", "x.co", "u.to", "yourls.org", "su.pr",
  "mcaf.ee", "ity.im", "q.gs", "vzturl.com", "trib.al", "snip.ly", "short.io", "shorturl.com",
  "tr.im", "cli.gs", "filoops.info", "tiny.pl", "kutt.it", "urlzs.com", "surl.li", "gg.gg",
  "shrtco.de", "2.gy", "1link.in", "linktr.ee", "t2m.io", "zpr.io", "lnk.to", "rotf.lol",
}

--- True when `host` (or its registrable `domain`, when given) is a URL shortener.
function M.is_shortener(host, domain)
  return (domain and M.shorteners[domain]) or M.shorteners[host] or false
end

-- Large mailbox providers: a mail server claiming to be one of them should not sit on a
-- private address at the edge of the chain.
M.big_providers = M.set {
  "gmail.com", "googlemail.com", "google.com", "yahoo.com", "yahoo.co.uk", "ymail.com",
  "hotmail.com", "outlook.com", "live.com", "msn.com", "aol.com", "icloud.com", "me.com",
  "mail.ru", "yandex.ru", "gmx.net", "gmx.de", "web.de", "comcast.net", "att.net",
}

--- The last `n` labels of `host` ("c.d" of "a.b.c.d" for 2), or nil when it has fewer. Found
--- by walking back from the end: a pattern anchored only at the end ("([^.]+%.[^.]+)$") is
--- tried from every start and backtracks quadratically over a long label.
local function last_labels(host, n)
  local dots = 0
  for i = #host, 1, -1 do
    if byte(host, i) == 46 then
      dots = dots + 1
      if dots == n then
        if i == #host then return nil end
        return sub(host, i + 1)
      end
    end
  end
  if dots == n - 1 then return host end
  return nil
end

--- The big provider `host` claims to be (a name ending in one of them), or nil.
function M.big_provider_of(host)
  if not host or host == "" then return nil end
  host = lower(host)
  -- try the last two and three labels
  local two = last_labels(host, 2)
  if two and M.big_providers[two] then return two end
  local three = last_labels(host, 3)
  if three and M.big_providers[three] then return three end
  return nil
end

---------------------------------------------------------------------------------------------
-- IP addresses

--- True for loopback, private (RFC 1918), link-local, CGNAT, unspecified and IPv6 ULA /
--- link-local / loopback addresses (an IPv4-mapped IPv6 address read as IPv4); false for nil
--- and for anything that is no IP address. The sandbox's `is_private_ip`, in Rust: the Lua
--- patterns it replaced cost ~4 k instructions a call.
M.is_private_ip = is_private_ip

---------------------------------------------------------------------------------------------
-- Dates

local MONTHS = {
  jan = 1, feb = 2, mar = 3, apr = 4, may = 5, jun = 6,
  jul = 7, aug = 8, sep = 9, oct = 10, nov = 11, dec = 12,
}

-- Obsolete zone names of RFC 5322, in minutes east of UTC.
local ZONES = {
  ut = 0, gmt = 0, utc = 0, z = 0,
  est = -300, edt = -240, cst = -360, cdt = -300, mst = -420, mdt = -360, pst = -480, pdt = -420,
  bst = 60, cet = 60, cest = 120, met = 60, mest = 120, eet = 120, eest = 180, jst = 540,
}

--- Days since 1970-01-01 of a proleptic Gregorian date.
function M.days_from_civil(y, m, d)
  if m <= 2 then y = y - 1 end
  local era = (y >= 0 and y or y - 399) // 400
  local yoe = y - era * 400
  local mp = (m + 9) % 12
  local doy = (153 * mp + 2) // 5 + d - 1
  local doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
  return era * 146097 + doe - 719468
end

--- Parse an RFC 5322 date ("Thu, 22 Aug 2002 18:26:25 -0700", weekday and seconds optional,
--- two-digit years and obsolete zone names accepted) into Unix seconds, or nil.
function M.parse_date(s)
  if not s then return nil end
  local d, mon, y, hh, mm, rest = s:match("(%d%d?)%s+(%a%a%a)%a*%s+(%d%d%d?%d?)%s+(%d%d?):(%d%d)(.*)$")
  if not d then return nil end
  local m = MONTHS[lower(mon)]
  if not m then return nil end
  d, y, hh, mm = tonumber(d), tonumber(y), tonumber(hh), tonumber(mm)
  if y < 50 then y = y + 2000 elseif y < 1000 then y = y + 1900 end
  local ss = 0
  local sec, after = rest:match("^:(%d%d)(.*)$")
  if sec then ss, rest = tonumber(sec), after end
  local offset = 0
  local sign, zh, zm = rest:match("^%s*([+-])(%d%d)(%d%d)")
  if sign then
    offset = tonumber(zh) * 60 + tonumber(zm)
    if sign == "-" then offset = -offset end
  else
    local name = rest:match("^%s*(%a+)")
    if name then offset = ZONES[lower(name)] or 0 end
  end
  if d < 1 or d > 31 or hh > 23 or mm > 59 or ss > 60 then return nil end
  return ((M.days_from_civil(y, m, d) * 24 + hh) * 60 + mm) * 60 + ss - offset * 60
end

--- The time stamp of a Received header (the date after its last ";"), or nil.
function M.received_time(received)
  if not received then return nil end
  local semi = nil
  local pos = 1
  while true do
    local i = find(received, ";", pos, true)
    if not i then break end
    semi, pos = i, i + 1
  end
  if not semi then return nil end
  return M.parse_date(sub(received, semi + 1))
end

---------------------------------------------------------------------------------------------
-- Authentication

--- Whether domain `d` is `domain`, under it, or one it is under (relaxed alignment).
local function aligned_with(d, domain)
  if not d or d == "" then return false end
  d = lower(d)
  return d == domain or sub(domain, -#d - 1) == "." .. d or sub(d, -#domain - 1) == "." .. domain
end

--- The From domain (lower case) when the sender proved it may write from it: DMARC passed for
--- it, a DKIM signature aligned with it passed, or SPF passed for an envelope domain aligned
--- with it. nil for a From nobody authenticated, and offline (msg:auth().ran false). Anyone can
--- write any From: a negative score that credits the From domain or address needs this.
function M.authenticated_from(msg)
  local _, domain = msg:from()
  if not domain or domain == "" then return nil end
  local a = msg:auth()
  if not a.ran then return nil end
  domain = lower(domain)
  if a.dmarc.result == "pass" and (not a.dmarc.domain or aligned_with(a.dmarc.domain, domain)) then
    return domain
  end
  for i = 1, #a.dkim do
    local s = a.dkim[i]
    if s.result == "pass" and s.aligned then return domain end
  end
  if a.spf.result == "pass" and aligned_with(a.spf.domain, domain) then return domain end
  return nil
end

return M
