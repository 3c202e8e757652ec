-- The learned verdict: the online classifier's spam probability (`msg:classify()`), graded into
-- symbols. It weighs the message's words, headers, URLs, reputation and the symbols of every rule
-- that ran before this file, so it runs last. Until the model has learned enough of both classes
-- (`classifier.min_learned`) it has no opinion and no symbol fires.
--
-- Between the confident ends the score follows the evidence: 1.5 points per unit of log-odds
-- (p = 0.6 adds 0.6, 0.9 adds 3.3, 0.98 adds 5.8, 0.99 adds 6.9), as a weight on the nominal
-- score, so a probability just under a boundary is not worth a whole grade less. On the ham side
-- only p <= 0.3 counts: a doubtful model does not pull a message down. Replay measured this
-- against fixed steps (BENCHMARKS.md, "Detection on the dev corpus").

local format = string.format
local log = math.log

local PER_LOGIT = 1.5

local function logit(p)
  return log(p / (1 - p))
end

rule {
  name = "CLASSIFIER",
  scores = {
    CLF_SPAM_HIGH = 8.0, -- p >= 0.995
    CLF_SPAM = 8.0,      -- 0.5 < p < 0.995, weighted by the log-odds (at most 1)
    CLF_HAM = -4.0,      -- 0.01 < p <= 0.3, weighted by the log-odds (at most 1)
    CLF_HAM_HIGH = -4.0, -- p <= 0.01
  },
  description = "The online classifier (FTRL logistic regression over tokens, headers, rule hits and reputation)",
  group = "classifier",
  check = function(msg)
    local p = msg:classify()
    if not p then return end
    local opt = format("%.4f", p)
    if p >= 0.995 then return { CLF_SPAM_HIGH = { opt } } end
    if p > 0.5 then
      return { CLF_SPAM = { opt, weight = math.min(1, PER_LOGIT * logit(p) / 8) } }
    end
    if p <= 0.01 then return { CLF_HAM_HIGH = { opt } } end
    if p <= 0.3 then
      return { CLF_HAM = { opt, weight = math.min(1, -PER_LOGIT * logit(p) / 4) } }
    end
  end,
}
