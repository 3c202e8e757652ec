-- GTUBE: the Generic Test for Unsolicited Bulk Email. A message carrying the test string is
-- rejected whatever else it holds, so that operators can check the whole path end to end.
-- The score is 0 (as in rspamd): the forced action does the work, and a test message does not
-- teach the reputation store that its sender is a spammer.

local find = string.find
local GTUBE = "XJS*C4JDBQADN1.NSBN3*2IDNEN*GTUBE-STANDARD-ANTI-UBE-TEST-EMAIL*C.34X"

rule {
  name = "GTUBE",
  score = 0,
  action = "reject",
  description = "GTUBE test string in the body",
  group = "gtube",
  check = function(msg)
    if find(msg:text(), GTUBE, 1, true) or find(msg:html(), GTUBE, 1, true) then
      return true
    end
  end,
}
