-- Subject checks: shouting, punctuation, money and urgency phrases, tracking tags, look-alike
-- characters.

local util = require("shrike.util")

local find, gsub = string.find, string.gsub
local find_phrases, find_word = util.find_phrases, util.find_word
local MONEY, URGENCY = util.sets.subject_money, util.sets.subject_urgency

rule {
  name = "SUBJ_ALL_CAPS",
  score = 3.0,
  description = "Subject in capital letters only (at least 10 letters)",
  group = "subject",
  check = function(msg)
    local s = msg:subject()
    if #s < 10 then return end
    -- a lower-case letter usually comes early, so look for one before counting capitals
    if find(s, "%l") then return end
    local _, upper = gsub(s, "%u", "")
    if upper < 10 then return end
    return true
  end,
}

rule {
  name = "SUBJ_EXCESS_PUNCT",
  score = 1.0,
  description = "Subject with runs of !, ? or $ (!!!, ???, $$$)",
  group = "subject",
  check = function(msg)
    local s = msg:subject()
    -- every run needs one of these characters; plain searches are cheap, patterns are not
    -- (and a pattern is tried from the first byte that can start its match, not from 1)
    local bang, question = find(s, "!", 1, true), find(s, "?", 1, true)
    if not (bang or question or find(s, "$", 1, true)) then return end
    if find(s, "!!!", 1, true) or find(s, "???", 1, true) or find(s, "$$$", 1, true)
      or bang and find(s, "!%s*!%s*!", bang)
      or (bang or question) and find(s, "[!?][!?][!?]", math.min(bang or #s, question or #s)) then
      return true
    end
  end,
}

rule {
  name = "SUBJ_MONEY",
  score = 1.5,
  description = "Subject with money or offer phrases (weight 1 per phrase, at most 2)",
  group = "subject",
  check = function(msg)
    local s = msg:subject_normalized()
    if s == "" then return end
    local n, found = find_phrases(s, MONEY)
    if n > 0 then return n >= 2 and 2 or 1, found end
  end,
}

rule {
  name = "SUBJ_FREE",
  score = 0.5,
  description = "Subject offers something free",
  group = "subject",
  check = function(msg)
    local s = msg:subject_normalized()
    return s ~= "" and find_word(s, "free")
  end,
}

rule {
  name = "SUBJ_URGENCY",
  score = 1.0,
  description = "Subject with urgency phrases",
  group = "subject",
  check = function(msg)
    local s = msg:subject_normalized()
    if s == "" then return end
    local n, found = find_phrases(s, URGENCY)
    if n > 0 then return 1, found end
  end,
}

rule {
  name = "SUBJ_ADV",
  score = 2.5,
  description = "Subject labelled as an advertisement (ADV:)",
  group = "subject",
  check = function(msg)
    local s = msg:subject()
    return find(s, "^%s*[Aa][Dd][Vv]%s*:") ~= nil or find(s, "^%s*%[[Aa][Dd][Vv]%]") ~= nil
  end,
}

rule {
  name = "SUBJ_TRACKING_TAG",
  score = 4.0,
  description = "Subject padded with spaces before a random tag at its end (bulk-mailer tracking)",
  group = "subject",
  check = function(msg)
    local s = msg:subject()
    -- "Get out of debt quick!                    4179uKlj5-057SXua1524UHkC5-900-28"
    -- (four whitespace characters in a row first: a pattern that fails at its first item is
    -- tried faster at each byte. Faster still, plain searches rule out most subjects before
    -- it: such a run holds two spaces in a row or one of the other white space bytes.)
    if not (find(s, "  ", 1, true) or find(s, "\t", 1, true) or find(s, "\r", 1, true)
      or find(s, "\n", 1, true) or find(s, "\v", 1, true) or find(s, "\f", 1, true)) then
      return
    end
    if find(s, "%s%s%s%s") and find(s, "%S%s%s%s%s+%S+$") then return true end
  end,
}

rule {
  name = "SUBJ_SHAPE",
  scores = {
    SUBJ_DOLLARS = 1.0,       -- "$1.21 each", "65000$+"
    SUBJ_FW_NO_THREAD = 1.0,  -- "FW:" on a message that forwards nothing
  },
  description = "Subject names a dollar amount, or says FW: without In-Reply-To or References",
  group = "subject",
  check = function(msg)
    local s = msg:subject()
    if s == "" then return end
    local hits
    if find(s, "$", 1, true) and (find(s, "%$%s?%d") or find(s, "%d%$")) then
      hits = { SUBJ_DOLLARS = true }
    end
    if find(s, "^%s*[Ff][Ww][Dd]?%s*:") and msg:header_count("In-Reply-To") == 0
      and msg:header_count("References") == 0 then
      hits = hits or {}
      hits.SUBJ_FW_NO_THREAD = true
    end
    return hits
  end,
}

-- Latin letters mixed with Cyrillic or Greek ones in one word: the look-alike trick
-- ("РаyРаl"). Latin mixed with CJK is ordinary Japanese or Chinese writing, and mojibake is not
-- a disguise: both are left alone.
local LATIN = re.compile("[A-Za-z]")
local CYRILLIC_GREEK = re.compile("[\\x{0370}-\\x{03FF}\\x{0400}-\\x{052F}]")

rule {
  name = "MIXED_SCRIPT_WORDS",
  score = 2.0,
  description = "Words mixing Latin with Cyrillic or Greek look-alikes (homoglyphs: Cyrillic а in PayPal)",
  group = "content",
  check = function(msg)
    local words = msg:mixed_script_words()
    if #words == 0 then return end
    local n, opts = 0, nil
    for i = 1, #words do
      local w = words[i]
      if LATIN:match(w) and CYRILLIC_GREEK:match(w) then
        n = n + 1
        if n <= 3 then
          opts = opts or {}
          opts[n] = w
        end
      end
    end
    if n == 0 then return end
    return n >= 3 and 1.5 or 1, opts
  end,
}
