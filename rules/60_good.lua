-- Signs of ordinary correspondence. A negative score may only come from evidence the sender
-- cannot fabricate (docs/rules.md, "No free ham points"): REPLY_THREAD and SIGNED are headers and
-- parts anyone can add, so they score 0 (kept as signs other rules and the history can read;
-- REPLY in 80_outbound.lua checks a reply against the Message-IDs our users sent); LINKS_OWN_DOMAIN counts
-- only for a From domain the sender authenticated.

local util = require("shrike.util")

local find, lower, sub = string.find, string.lower, string.sub

local SIGNATURE_TYPES = {
  ["application/pgp-signature"] = true,
  ["application/pkcs7-signature"] = true,
  ["application/x-pkcs7-signature"] = true,
}

rule {
  name = "REPLY_THREAD",
  score = 0.0,
  description = "A reply in a thread: Re: subject with In-Reply-To or References",
  group = "good",
  check = function(msg)
    if msg:header_count("In-Reply-To") == 0 and msg:header_count("References") == 0 then return end
    return find(msg:subject(), "^%s*[Rr][Ee]%s*:") ~= nil
  end,
}

rule {
  name = "SIGNED",
  score = 0.0,
  description = "Signed with PGP/MIME or S/MIME (not verified: no score)",
  group = "good",
  check = function(msg)
    local types = msg:part_types()
    for i = 1, #types do
      if SIGNATURE_TYPES[types[i]] then return true end
    end
  end,
}

-- Links to the sender's own domain: a newsletter, a shop's notice or a list digest links the
-- site of the domain it comes from; spam links elsewhere (its From is forged or throwaway) far
-- more often. Free mailbox domains are left out: anyone can write from them and their footers
-- link them. Nor does it count for mail with the marks of a blast to strangers, which a
-- subscription never has: hidden recipients, a reader greeted as nobody in particular, a link
-- whose "host" is a user name.
local GREETING_TEXT = 4096

local function blast_marks(msg)
  local to = msg:header("To")
  if to and find(lower(to), "undisclosed", 1, true) then return true end
  if msg:first_url("userinfo") then return true end
  local t = msg:text_normalized()
  if #t > GREETING_TEXT then t = sub(t, 1, GREETING_TEXT) end
  return (util.find_phrases(t, util.sets.greeting, 1)) > 0
end

-- A sender with complaints behind it vouches for nothing by linking its own domain: the sign
-- is for a sender seen without complaints, or not seen yet. Its From address drew more
-- complaints than rescues, a fifth of its traffic or more (REP_FROM_COMPLAINTS and
-- REP_FROM_REPORTED in 50_reputation.lua fire on a part of these), or its sending IP drew
-- complaints as REP_IP_COMPLAINTS counts them.
local function sender_reported(msg)
  local ip = msg:sender_ip()
  if ip and not util.is_private_ip(ip) then
    local seen, _, _, complaints, rescues = msg:stat("sender_ip", "7d")
    if complaints >= 3 and complaints > rescues and complaints * 5 >= seen then return true end
  end
  local seen, _, _, complaints, rescues = msg:stat("from", "7d")
  return complaints > rescues and complaints * 5 >= seen
end

rule {
  name = "LINKS_OWN_DOMAIN",
  score = -2.4,
  description = "A link goes to the registrable domain of the authenticated From address (DMARC, aligned DKIM or SPF; not a free mailbox), in mail not sent to hidden or unnamed recipients, from a sender that drew no complaints",
  group = "good",
  check = function(msg)
    local domain = util.authenticated_from(msg)
    if not domain then return end
    local domains = msg:domains()
    for i = 1, #domains do
      local d = domains[i]
      if not util.freemail[d] and (domain == d or sub(domain, -#d - 1) == "." .. d) then
        if blast_marks(msg) or sender_reported(msg) then return end
        return 1, { d }
      end
    end
  end,
}
