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
--
-- A second opinion, naive Bayes over the same features (`msg:bayes()`), adds its own symbols
-- when it is sure of spam, and tempers the first when it is torn: its chi-square combining
-- answers near 0.5 when strong evidence points both ways (a newsletter's bulk-mail words beside
-- the marks of mail people asked for), where the logistic model, having learned spam and plain
-- ham only, sums its way to certainty. Chosen under cross-validation (BENCHMARKS.md).

local format = string.format
local log = math.log

local PER_LOGIT = 1.5
local TORN_LOW, TORN_HIGH = 0.3, 0.7  -- Bayes between these: it sees both classes in the message
local TORN_WEIGHT = 0.6               -- what the classifier's spam grade keeps then

local function logit(p)
  return log(p / (1 - p))
end

rule {
  name = "CLASSIFIER",
  scores = {
    CLF_SPAM_HIGH = 8.0,   -- p >= 0.995
    CLF_SPAM = 8.0,        -- 0.5 < p < 0.995, weighted by the log-odds (at most 1)
    CLF_HAM = -4.0,        -- 0.01 < p <= 0.3, weighted by the log-odds (at most 1)
    CLF_HAM_HIGH = -4.0,   -- p <= 0.01
    BAYES_SPAM_HIGH = 3.5, -- naive Bayes >= 0.99
    BAYES_SPAM = 2.5,      -- naive Bayes >= 0.8
  },
  description = "The online classifier (FTRL logistic regression over tokens, headers, rule hits and reputation), with naive Bayes over the same features as a second opinion",
  group = "classifier",
  check = function(msg)
    local p = msg:classify()
    if not p then return end
    local hits = {}
    local torn = 1
    local nb = msg:bayes()
    if nb then
      local opt = format("%.4f", nb)
      if nb >= 0.99 then
        hits.BAYES_SPAM_HIGH = { opt }
      elseif nb >= 0.8 then
        hits.BAYES_SPAM = { opt }
      elseif nb >= TORN_LOW and nb <= TORN_HIGH then
        torn = TORN_WEIGHT
      end
    end
    local opt = format("%.4f", p)
    -- (a tempered grade names Bayes' doubt as its second option)
    local doubt = torn < 1 and format("bayes %.4f", nb) or nil
    if p >= 0.995 then
      hits.CLF_SPAM_HIGH = { opt, doubt, weight = torn }
    elseif p > 0.5 then
      hits.CLF_SPAM = { opt, doubt, weight = torn * math.min(1, PER_LOGIT * logit(p) / 8) }
    elseif p <= 0.01 then
      hits.CLF_HAM_HIGH = { opt }
    elseif p <= 0.3 then
      hits.CLF_HAM = { opt, weight = math.min(1, -PER_LOGIT * logit(p) / 4) }
    end
    return next(hits) and hits or nil
  end,
}
