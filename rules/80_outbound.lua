-- Outbound mail and our users' own correspondence. msg:direction() is "outbound" when the
-- client authenticated (milter {auth_authen}, HTTP User, spamd User with [spamd]
-- user_is_sender) or comes from [outbound] networks; such mail is judged by [outbound.actions]
-- and feeds no inbound reputation (docs/rules.md, "Outbound mail").
--
-- The negative scores here are evidence a sender cannot forge (docs/rules.md, "No free ham
-- points"): REPLY needs an id that an outbound scan stored (a guessed or random In-Reply-To
-- finds nothing), KNOWN_CORRESPONDENT a sender that authenticated its From domain (the count
-- is 0 otherwise, whatever the From header says).

local find, lower, sub = string.find, string.lower, string.sub

rule {
  name = "OUTBOUND",
  score = 0.0,
  description = "Outbound: the client authenticated or comes from [outbound] networks",
  group = "outbound",
  check = function(msg)
    return msg:direction() == "outbound"
  end,
}

-- A login of the form user@domain sending as another domain: a stolen account sending as a
-- bank, or a form that lets visitors set the From. (Mail of a login without a domain, or of a
-- trusted network without a login, is not judged here.)
local function same_org(a, b)
  if a == b then return true end
  local n, m = #a, #b
  -- a subdomain of the login's domain, or the login's domain a subdomain of the From's
  if n > m then return sub(a, n - m) == "." .. b end
  if m > n then return sub(b, m - n) == "." .. a end
  return false
end

rule {
  name = "OUTBOUND_FROM_FOREIGN",
  score = 3.0,
  description = "Outbound mail of a login user@domain whose From is in an unrelated domain",
  group = "outbound",
  check = function(msg)
    if msg:direction() ~= "outbound" then return end
    local user = msg:user()
    if not user then return end
    local at = find(user, "@", 1, true)
    if not at then return end
    local login_domain = lower(sub(user, at + 1))
    local _, from_domain = msg:from()
    if not from_domain or login_domain == "" then return end
    if not same_org(from_domain, login_domain) then
      return true, from_domain
    end
  end,
}

-- Outbound mail to many recipients at once: what a stolen account's first blast looks like
-- (the per-user limits of [outbound.limits] stop the volume; this judges one message).
local MANY_RCPT = 50

rule {
  name = "OUTBOUND_MANY_RCPT",
  score = 2.0,
  description = "Outbound mail to more than 50 recipients in one message",
  group = "outbound",
  check = function(msg)
    if msg:direction() ~= "outbound" then return end
    return #msg:recipients() > MANY_RCPT
  end,
}

rule {
  name = "REPLY",
  score = -4.0,
  description = "A reply to a message our user sent (its In-Reply-To or References names a Message-ID an outbound scan stored)",
  group = "outbound",
  check = function(msg)
    if msg:direction() ~= "inbound" then return end
    return msg:reply() > 0
  end,
}

rule {
  name = "KNOWN_CORRESPONDENT",
  score = -2.0,
  description = "The recipient has written to this sender, and the sender authenticated its From domain (aligned DKIM or SPF pass)",
  group = "outbound",
  check = function(msg)
    if msg:direction() ~= "inbound" then return end
    local n = msg:known_correspondent()
    if n > 0 then return true, tostring(n) end
  end,
}
