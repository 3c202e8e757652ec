-- The learned verdict: the online classifier's spam probability (`msg:classify()`), graded into
-- symbols. It weighs the message's words, headers, URLs, reputation and the symbols of every rule
-- that ran before this file, so it runs last. Until the model has learned enough of both classes
-- (`classifier.min_learned`) it has no opinion and no symbol fires.
--
-- Between the confident ends the score follows the evidence: 1.75 points per unit of log-odds
-- (p = 0.6 adds 0.7, 0.9 adds 3.8, 0.98 adds 6.8, 0.99 adds 8), as a weight on the nominal
-- score, so a probability just under a boundary is not worth a whole grade less. On the ham side
-- only p <= 0.3 counts, and at most 2 points: a doubtful model does not pull a message down, and
-- what a spammer can copy of ham (list tags, a newsletter's words) buys little.
--
-- The probability is one learned verdict: the FTRL model and naive Bayes over the same features,
-- combined by a stack fitted on what each said of messages before learning them (the classifier's
-- `stack.rs`). Two symbol families would count the same evidence twice; the stack's answer never
-- goes past the surer of the two models.

local format = string.format
local log = math.log

local PER_LOGIT = 1.75

local function logit(p)
  return log(p / (1 - p))
end

rule {
  name = "CLASSIFIER",
  scores = {
    CLF_SPAM_HIGH = 8.0,   -- p >= 0.995
    CLF_SPAM = 8.0,        -- 0.5 < p < 0.995, weighted by the log-odds (at most 1)
    CLF_HAM = -2.0,        -- 0.01 < p <= 0.3, weighted by the log-odds (at most 1)
    CLF_HAM_HIGH = -2.0,   -- p <= 0.01
  },
  description = "The learned verdict: FTRL logistic regression and naive Bayes over tokens, headers, rule hits and reputation, stacked into one probability",
  group = "classifier",
  check = function(msg)
    local p = msg:classify()
    if not p then return end
    local opt = format("%.4f", p)
    if p >= 0.995 then
      return { CLF_SPAM_HIGH = { opt } }
    elseif p > 0.5 then
      return { CLF_SPAM = { opt, weight = math.min(1, PER_LOGIT * logit(p) / 8) } }
    elseif p <= 0.01 then
      return { CLF_HAM_HIGH = { opt } }
    elseif p <= 0.3 then
      return { CLF_HAM = { opt, weight = math.min(1, -PER_LOGIT * logit(p) / 2) } }
    end
  end,
}
