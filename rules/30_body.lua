-- Body checks: HTML shape, hidden text, images, links and URLs, phrases.

local util = require("shrike.util")

local find, match, lower, sub, byte = string.find, string.match, string.lower, string.sub, string.byte
local shorteners, caps_ratio = util.shorteners, util.caps_ratio
local sets = util.sets

-- BODY_PHRASES: per symbol, its phrase set, how many matched phrases to show, and
-- (distinct phrases found, weight) steps from the highest down; below the last, no hit.
local PHRASE_GROUPS = {
  { symbol = "BODY_MONEY", set = sets.body_money, options = 3, steps = { 6, 2, 3, 1, 2, 0.5 } },
  { symbol = "BODY_URGENCY", set = sets.urgency, options = 2, steps = { 3, 1.5, 2, 1, 1, 0.5 } },
  { symbol = "BODY_BULK", set = sets.bulk, options = 3, steps = { 4, 2, 2, 1 } },
  { symbol = "BODY_FRAUD", set = sets.fraud, options = 3, steps = { 7, 1.5, 4, 1 } },
  { symbol = "BODY_ADULT", set = sets.adult, options = 3, steps = { 4, 2, 2, 1 } },
  { symbol = "BODY_PHARMA", set = sets.pharma, options = 3, steps = { 4, 1.5, 2, 1 } },
  { symbol = "BODY_FINANCE", set = sets.finance, options = 3, steps = { 7, 2, 4, 1 } },
  { symbol = "BODY_DEAR_FRIEND", set = sets.greeting, options = 1, steps = { 1, 1 } },
}

-- Words without which the BODY_DIET pattern below cannot match: the pattern runs only on
-- texts that have one (found in the same pass as the phrases).
local DIET_WORDS = { "weight", "weightloss", "lbs", "pounds", "inches", "fat",
  "without exercise", "without exercises", "without exercising", "without dieting", "diet pill",
  "diet pills" }

-- All the groups' lists behind one matcher, the diet words last: one pass over the text finds
-- them all.
local PHRASES
local DIET_LIST = #PHRASE_GROUPS + 1
do
  local lists = {}
  for i = 1, #PHRASE_GROUPS do lists[i] = PHRASE_GROUPS[i].set.phrases end
  lists[DIET_LIST] = DIET_WORDS
  PHRASES = re.phrases(lists)
end

-- Characters that display as nothing or reorder what is shown: zero-width space / joiners,
-- LRM/RLM, bidi embeddings and overrides, word joiner and invisible operators, bidi isolates,
-- BOM / zero-width no-break space, soft hyphen.
-- Spelled as UTF-8 byte sequences: their lead bytes let the regex skip ahead (a Unicode class
-- scans every byte, 20 times slower on the corpus).
local INVISIBLE = re.compile("(?-u)\\xE2\\x80[\\x8B-\\x8F\\xAA-\\xAE]|\\xE2\\x81[\\xA0-\\xA4\\xA6-\\xA9]|\\xEF\\xBB\\xBF|\\xC2\\xAD")
local DISPLAY_NONE = re.compile("(?i)display\\s*:\\s*none")
local VISIBILITY_HIDDEN = re.compile("(?i)visibility\\s*:\\s*hidden")
-- A zero font size: "-size: 0" here, "font" before it checked by `font_size_0`. From
-- "(?i)font-size" the regex engine could only use "font" in any case as its prefilter, which
-- every styled page is full of: 3.6 µs a page against 0.9 from "-size".
local FONT_SIZE_0 = re.compile("-(?i-u:size)\\s*:\\s*0*\\.?0+\\s*(?:px|pt|em|rem|%)?\\s*[;\"'}]")
local IMG_TAG = re.compile("(?i)<img\\b")
local HTML_TAG = re.compile("<(?i-u:html)\\b")
-- A weight-loss pitch: "lose 10-12 lbs", "burning fat", "weight loss", "without exercise".
-- (In normalized text: lower case, white space runs as one space.)
local DIET = re.compile("(?-u)\\b(?:weight[ -]?loss|lose weight|los(?:e|t|ing)\\b.{0,12}\\b(?:pounds|lbs|inches|weight)\\b|burn.{1,10}\\bfat\\b|without (?:exercis|dieting)|diet pills?)")
-- A toll-free number from its "8xx" on; what may precede it is checked by `tollfree` below. (The
-- whole number as one regex, "(?:^|[^0-9])1?[-. (]*8...", has no leading literal: the regex
-- engine then searches around every "8" and falls back to its slowest matcher, 30 µs a body.)
local TOLLFREE = re.compile("8(?:00|88|77|66)[-. )]+[0-9]{3}[-. ][0-9]{4}(?:[^0-9]|$)")

-- Phrase and shouting checks read at most this much text.
local TEXT_LIMIT = 65536
local CAPS_SAMPLE = 4096

local function has_part(msg, ctype)
  local types = msg:part_types()
  for i = 1, #types do
    if types[i] == ctype then return true end
  end
  return false
end

---------------------------------------------------------------------------------------------
-- HTML shape

rule {
  name = "HTML_ONLY",
  scores = {
    HTML_ONLY = 0.8,       -- HTML without a plain-text alternative (hard ham as often as spam)
    HTML_SHORT_TEXT = 2.0, -- ... and little visible text
    HTML_NO_HTML_TAG = 2.0, -- ... and no <html> tag: a fragment pasted by a bulk tool
  },
  description = "HTML-only message, HTML-only with little visible text, HTML-only without an <html> tag",
  group = "body",
  check = function(msg)
    if not has_part(msg, "text/html") or has_part(msg, "text/plain") then return end
    local hits = { HTML_ONLY = true }
    local visible = #msg:html_text()
    if visible < 250 then hits.HTML_SHORT_TEXT = { tostring(visible) } end
    -- the root element opens the source: the first 4 KB (DOCTYPE and comments before it) do
    local h = msg:html()
    if #h > 4096 then h = sub(h, 1, 4096) end
    if not HTML_TAG:match(h) then hits.HTML_NO_HTML_TAG = true end
    return hits
  end,
}

-- Colours that are white, and backgrounds that are not.
local WHITE = { ["#fff"] = true, ["#ffffff"] = true, ["white"] = true, ["fff"] = true,
  ["ffffff"] = true, ["#fffffe"] = true, ["#fefefe"] = true }

local WHITE_TEXT = re.compile("(?i)color\\s*[=:]\\s*[\"']?(#?fff(fff)?\\b|white\\b|#fffffe|#fefefe)")

-- Colours given to text (by <font color=…> or a CSS color), and backgrounds (bgcolor=…, CSS
-- background-color and background). One regex pass each over the source as it is: names match
-- in any ASCII case (`(?i-u:…)`, exactly what lower-casing the source first would match, without
-- copying it), and the colours found are lower-cased.
local FONT_COLOR = re.compile("(?i-u:<font)[^>]*\\s(?i-u:color)\\s*=\\s*[\"']?(#?[0-9a-zA-Z]+)")
-- CSS `color` but not `background-color` / `border-color`: a "-color" declaration matches the
-- first branch, which captures nothing, so `all` skips it. (Written as "(?:^|[^-])color", the
-- pattern starts with a class and the regex engine loses its literal prefilter: 5x slower.)
local CSS_COLOR = re.compile("-(?i-u:color)\\s*:\\s*#?[0-9a-zA-Z]+|(?i-u:color)\\s*:\\s*(#?[0-9a-zA-Z]+)")
local BACKGROUND = re.compile(
  "(?i-u:bgcolor)\\s*=\\s*[\"']?(#?[0-9a-zA-Z]+)|(?i-u:background-color)\\s*:\\s*(#?[0-9a-zA-Z]+)|(?i-u:background)\\s*:\\s*(#?[0-9a-zA-Z]+)")
local BACKGROUND_IMAGE = re.compile("(?i-u:background)\\s*=")

local function any_white(list)
  for i = 1, #list do
    if WHITE[lower(list[i])] then return true end
  end
  return false
end

-- True when the HTML sets a font size of zero: a FONT_SIZE_0 match right after "font" in any
-- case (other "-size" properties are skipped; at most 1,000 of them are looked at).
local function font_size_0(h)
  local pos = 1
  for _ = 1, 1000 do
    local s, e = FONT_SIZE_0:find(h, pos)
    if not s then return false end
    if s > 4 and lower(sub(h, s - 4, s - 1)) == "font" then return true end
    pos = e + 1
  end
  return false
end

local function white_text_on_white(h)
  -- (the cheapest test first: one search that stops at its first match)
  if BACKGROUND_IMAGE:match(h) then return false end
  -- no background other than white anywhere (a dark table behind white text is fine). This
  -- goes before the text colours: most HTML with a white colour somewhere also has another
  -- background, and then the two colour passes are not needed (callgrind: the rule 22.5 k ->
  -- 16.8 k instructions a message)
  local backgrounds = BACKGROUND:all(h, 10000)
  for i = 1, #backgrounds do
    if not WHITE[lower(backgrounds[i])] then return false end
  end
  -- and text coloured white, by attribute or style
  return any_white(FONT_COLOR:all(h)) or any_white(CSS_COLOR:all(h))
end

rule {
  name = "MIME_BASE64_TEXT",
  score = 1.5,
  description = "Message text (not an attached file) sent base64-encoded: readable text has no need to hide from a glance",
  group = "body",
  check = function(msg)
    -- the part records only for a message with a base64 part
    local encodings = msg:part_encodings()
    for i = 1, #encodings do
      if encodings[i] == "base64" then
        local p = msg:parts()[i]
        if not p.attachment and find(p.content_type, "^text/") then
          return true, { p.content_type }
        end
      end
    end
  end,
}

rule {
  name = "HTML_HIDDEN_TEXT",
  score = 2.0,
  description = "HTML hides text (display:none, visibility:hidden, font-size:0, white on white)",
  group = "body",
  check = function(msg)
    local html = msg:html()
    if html == "" then return end
    if DISPLAY_NONE:match(html) then return 1, { "display:none" } end
    if VISIBILITY_HIDDEN:match(html) then return 1, { "visibility:hidden" } end
    if font_size_0(html) then
      return 1, { "font-size:0" }
    end
    if WHITE_TEXT:match(html) and white_text_on_white(html) then
      return 1, { "white on white" }
    end
  end,
}

rule {
  name = "INVISIBLE_CHARS",
  score = 2.0,
  description = "Invisible Unicode characters (zero-width, bidi controls, soft hyphen, BOM) in the shown text",
  group = "body",
  check = function(msg)
    local n = INVISIBLE:count(msg:text())
    local ht = msg:html_text()
    if ht ~= "" then n = n + INVISIBLE:count(ht) end
    n = n + INVISIBLE:count(msg:subject())
    if n >= 3 then
      return n >= 10 and 1.5 or 1, { tostring(n) }
    end
  end,
}

rule {
  name = "HTML_IMAGES_LITTLE_TEXT",
  score = 1.5,
  description = "Images (inline or attached) with little text around them",
  group = "body",
  check = function(msg)
    local text = #msg:text()
    if text >= 800 then return end
    local images = 0
    local html = msg:html()
    if html ~= "" then images = IMG_TAG:count(html) end
    local atts = msg:attachments()
    for i = 1, #atts do
      if find(lower(atts[i].content_type or ""), "^image/") then images = images + 1 end
    end
    if images == 0 then return end
    if images >= 3 and text < 800 then return 1, { images .. " images", text .. " chars" } end
    if text < 200 then return 1, { images .. " images", text .. " chars" } end
  end,
}

---------------------------------------------------------------------------------------------
-- Links and URLs

-- Anchor text that is itself an address: "www.example.com", "https://example.com/x".
local function text_is_address(t)
  if find(t, "^%s*[Hh][Tt][Tt][Pp][Ss]?://") or find(t, "^%s*[Ww][Ww][Ww]%.") then return 1 end
  -- A bare host name, maybe with a slash: a label, a dot, and more ending in two letters.
  -- Checked in linear steps: as one pattern ("^%s*[%w%-]+%.[%w%-%.]*%a%a+/?%s*$") the
  -- matcher backtracks quadratically over a long run of letters in a sender's anchor text.
  -- A host name has at most 253 characters: longer text is none, and a message of thousands
  -- of long anchors costs no more than one of short ones.
  if #t > 300 then return nil end
  local host = match(t, "^%s*([%w%-%.]+)/?%s*$")
  if not host then return nil end
  local _, dot = find(host, "^[%w%-]+%.")
  if dot and #host - dot >= 2 and find(host, "^%a%a$", #host - 1) then return 0.5 end
  return nil
end

-- True when `host` is `domain` or one of its subdomains.
local function within(host, domain)
  if not host or not domain then return false end
  if host == domain then return true end
  local n = #host - #domain
  return n > 1 and sub(host, n) == "." .. domain
end

rule {
  name = "PHISHING",
  score = 4.0,
  description = "A link's text shows one domain and its target is another (not the sender's own)",
  group = "body",
  check = function(msg)
    local anchors = msg:anchors()
    if #anchors == 0 then return end
    local _, from_domain = msg:from()
    from_domain = from_domain and lower(from_domain)
    local best, opt = nil, nil
    for i = 1, #anchors do
      local a = anchors[i]
      -- Newsletters send every link through their own click tracker: a target in the
      -- sender's own domain is not a disguise.
      if a.mismatch and not within(from_domain, a.target_domain) then
        local w = text_is_address(a.text)
        if w and (not best or w > best) then
          best, opt = w, a.text_domain .. " -> " .. a.target_domain
          if w == 1 then break end
        end
      end
    end
    if best then return best, { opt } end
  end,
}

rule {
  name = "URL_CHECKS",
  scores = {
    URL_IP = 4.0,          -- a link to a numeric IP address
    URL_SHORTENER = 1.0,   -- a link through a URL shortener
    URL_USERINFO = 3.0,    -- http://www.bank.example@198.51.100.7/: the "host" shown is a user name
    URL_MANY_DOMAINS = 0.0, -- links to 10+ registrable domains: informational (digests; 0 spam in the dev replay)
  },
  description = "Links to IP addresses, through URL shorteners, with a user name posing as host, or to very many domains",
  group = "body",
  check = function(msg)
    -- the distinct hosts and domains and two per-URL facts: no URL records to build
    local hosts = msg:hosts()
    if #hosts == 0 then return end
    local hits
    local userinfo = msg:first_url("userinfo")
    if userinfo then hits = { URL_USERINFO = { userinfo } } end
    local ip_url = msg:first_url("is_ip")
    if ip_url then
      hits = hits or {}
      hits.URL_IP = { ip_url }
    end
    local domains = msg:domains()
    local shortener
    for i = 1, #hosts do
      if shorteners[hosts[i]] then shortener = hosts[i]; break end
    end
    if not shortener then
      for i = 1, #domains do
        if shorteners[domains[i]] then shortener = domains[i]; break end
      end
    end
    if shortener then
      hits = hits or {}
      hits.URL_SHORTENER = { shortener }
    end
    local nd = #domains
    if nd >= 10 then
      hits = hits or {}
      hits.URL_MANY_DOMAINS = { weight = nd >= 20 and 2 or 1, tostring(nd) }
    end
    return hits
  end,
}

---------------------------------------------------------------------------------------------
-- Shouting and phone numbers

rule {
  name = "BODY_CAPS",
  score = 1.5,
  description = "Body text mostly in capital letters (200+ letters, over 40% capitals)",
  group = "body",
  check = function(msg)
    local t = msg:text()
    if #t < 200 then return end
    -- a sample of the text is enough for a ratio
    local ratio, letters = caps_ratio(t, CAPS_SAMPLE)
    if letters >= 200 and ratio > 0.4 then return 1, { string.format("%d%%", ratio * 100 // 1) } end
  end,
}

local SEPARATOR = { [45] = true, [46] = true, [32] = true, [40] = true } -- - . space (

-- True when `t` has a toll-free number: "8xx" (TOLLFREE) preceded by separators, optionally a
-- "1" before them, and before that the start of the text or a non-digit.
local function tollfree(t)
  local pos = 1
  for _ = 1, 50 do
    local s = TOLLFREE:find(t, pos)
    if not s then return false end
    local i = s - 1
    while i >= 1 and SEPARATOR[byte(t, i)] do i = i - 1 end
    if i >= 1 and byte(t, i) == 49 then i = i - 1 end -- "1"
    local b = i >= 1 and byte(t, i)
    if not b or b < 48 or b > 57 then return true end
    pos = s + 1
  end
  return false
end

rule {
  name = "BODY_TOLLFREE",
  score = 1.5,
  description = "A North American toll-free number (800, 888, 877, 866)",
  group = "body",
  check = function(msg)
    local t = msg:text()
    if #t < 20 then return end
    return tollfree(t)
  end,
}

---------------------------------------------------------------------------------------------
-- Phrases

rule {
  name = "BODY_PHRASES",
  scores = {
    BODY_MONEY = 1.5,   -- weight 0.5 at 2 distinct phrases, 1 at 3, 2 at 6
    BODY_URGENCY = 1.0, -- weight 0.5 at 1 phrase, 1 at 2, 1.5 at 3
    BODY_BULK = 2.5,    -- opt-out boilerplate of unsolicited mail: weight 1 at 2, 2 at 4
    BODY_FRAUD = 4.5,   -- advance-fee fraud: 4 distinct phrases
    BODY_ADULT = 1.5,   -- adult-content vocabulary: 2 distinct words (weight 2 at 4)
    BODY_PHARMA = 1.5,  -- pharmacy and diet offers: 2 distinct phrases
    BODY_FINANCE = 1.0, -- loan, mortgage, insurance, income pitch: 4 distinct words (weight 2 at 7)
    BODY_DEAR_FRIEND = 1.5, -- greets an unnamed reader: "Dear Friend", "Dear Sir/Madam"
    BODY_DIET = 2.0,    -- a weight-loss pitch ("lose 10-12 lbs", "burning fat")
  },
  description = "Body text with money, urgency, bulk-mail, advance-fee-fraud, adult, pharmacy, diet or loan phrasing, or greeting nobody in particular",
  group = "body",
  check = function(msg)
    local t = msg:text_normalized()
    if #t < 20 then return end
    -- the pitch is at the top: search the first 64 KiB only
    if #t > TEXT_LIMIT then t = sub(t, 1, TEXT_LIMIT) end
    local counts, found = PHRASES:search(t, 3)
    local hits
    if counts[DIET_LIST] > 0 then
      local ds, de = DIET:find(t)
      if ds then hits = { BODY_DIET = { sub(t, ds, de) } } end
    end
    for i = 1, #PHRASE_GROUPS do
      local g = PHRASE_GROUPS[i]
      local n = counts[i]
      local weight
      for j = 1, #g.steps, 2 do
        if n >= g.steps[j] then weight = g.steps[j + 1]; break end
      end
      if weight then
        local opts = found[i]
        for k = #opts, g.options + 1, -1 do opts[k] = nil end
        opts.weight = weight
        hits = hits or {}
        hits[g.symbol] = opts
      end
    end
    return hits
  end,
}
