-- Signs of ordinary correspondence. Small negative scores: each can be forged, none alone
-- clears a message, but together they keep real conversations away from the thresholds.

local find = string.find

local SIGNATURE_TYPES = {
  ["application/pgp-signature"] = true,
  ["application/pkcs7-signature"] = true,
  ["application/x-pkcs7-signature"] = true,
}

rule {
  name = "REPLY_THREAD",
  score = -1.0,
  description = "A reply in a thread: Re: subject with In-Reply-To or References",
  group = "good",
  check = function(msg)
    if msg:header_count("In-Reply-To") == 0 and msg:header_count("References") == 0 then return end
    return find(msg:subject(), "^%s*[Rr][Ee]%s*:") ~= nil
  end,
}

rule {
  name = "SIGNED",
  score = -1.0,
  description = "Signed with PGP/MIME or S/MIME",
  group = "good",
  check = function(msg)
    local types = msg:part_types()
    for i = 1, #types do
      if SIGNATURE_TYPES[types[i]] then return true end
    end
  end,
}
