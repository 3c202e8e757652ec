-- The learned verdict: the online classifier's spam probability (`msg:classify()`), graded into
-- symbols. It weighs the message's words, headers, URLs, reputation and the symbols of every rule
-- that ran before this file, so it runs last. Until the model has learned enough of both classes
-- (`classifier.min_learned`) it has no opinion and no symbol fires.

local format = string.format

rule {
  name = "CLASSIFIER",
  scores = {
    CLF_SPAM_HIGH = 8.0, -- p >= 0.99
    CLF_SPAM = 4.0,      -- p >= 0.9
    CLF_HAM = -2.0,      -- p <= 0.1
    CLF_HAM_HIGH = -4.0, -- p <= 0.01
  },
  description = "The online classifier (FTRL logistic regression over tokens, rule hits and reputation)",
  group = "classifier",
  check = function(msg)
    local p = msg:classify()
    if not p then return end
    local opt = format("%.4f", p)
    if p >= 0.99 then return { CLF_SPAM_HIGH = { opt } } end
    if p >= 0.9 then return { CLF_SPAM = { opt } } end
    if p <= 0.01 then return { CLF_HAM_HIGH = { opt } } end
    if p <= 0.1 then return { CLF_HAM = { opt } } end
  end,
}
