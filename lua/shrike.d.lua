---@meta shrike
-- Type annotations of shrike's rule API for lua-language-server (LuaLS): VS Code's "Lua"
-- extension (sumneko) and Neovim's lua_ls complete and type-check rule files with them.
-- Point the editor at this file's directory (docs/rules.md, "Editor support"). The engine
-- never loads it: files ending in `.d.lua` are not modules. A test compares the `msg` methods
-- and globals annotated here with the engine's (no drift).

-- Records ---------------------------------------------------------------------------------

---@class shrike.Email
---@field address string lower-case; the domain in punycode
---@field domain string
---@field name string|nil display name
---@field role "from"|"sender"|"reply_to"|"return_path"|"to"|"cc"|"envelope_from"|"envelope_rcpt"|"body"|"mailto"

---@class shrike.Part
---@field content_type string
---@field size integer
---@field encoding string|nil lower-case Content-Transfer-Encoding
---@field attachment boolean the part names a file

---@class shrike.Url
---@field url string canonical URL
---@field host string
---@field domain string registrable domain
---@field is_ip boolean
---@field source "text"|"html_href"|"html_src"|"html_action"|"html_background"|"html_text"|"header"
---@field text string|nil anchor text
---@field userinfo boolean the authority carries a user name

---@class shrike.Anchor
---@field text string
---@field text_domain string
---@field target_domain string
---@field mismatch boolean

---@class shrike.Ip
---@field ip string
---@field source "client"|"received"
---@field hop integer|nil 0-based place of the Received header from the top (nil for the client)
---@field host string|nil the name the sender greeted with
---@field domain string|nil registrable domain of `host`
---@field private boolean
---@field helo_ip boolean the hop greeted with its bare address

---@class shrike.Attachment
---@field name string
---@field ext string
---@field content_type string
---@field size integer
---@field hash string lower-case SHA-256 hex
---@field executable boolean
---@field double_extension boolean

---@class shrike.Envelope
---@field ip string|nil
---@field helo string|nil
---@field hostname string|nil
---@field user string|nil
---@field mail_from string|nil
---@field rcpt string[]
---@field queue_id string|nil
---@field deliver_to string|nil

---@class shrike.AuthMethod
---@field result "pass"|"fail"|"softfail"|"neutral"|"temperror"|"permerror"|"none"
---@field domain string|nil
---@field selector string|nil
---@field policy string|nil
---@field reason string|nil
---@field aligned boolean|nil

---@class shrike.Auth
---@field ran boolean false offline: every method is then `{ result = "none" }`
---@field spf shrike.AuthMethod
---@field helo shrike.AuthMethod
---@field dkim shrike.AuthMethod[]
---@field dmarc shrike.AuthMethod
---@field arc shrike.AuthMethod
---@field from_domain string|nil
---@field aligned_dkim_domain string|nil
---@field list_failures string[]

---@class shrike.DnsblHit
---@field symbol string
---@field zone string
---@field name string
---@field check string
---@field code string
---@field blocked boolean

---@class shrike.WindowStat
---@field seen integer
---@field spam integer
---@field ham integer
---@field complaints integer
---@field rescues integer
---@field spam_ratio number

---@class shrike.KeyStats: shrike.WindowStat
---@field hash string

---@alias shrike.Window "10m"|"1h"|"24h"|"7d"|"14d"|string
---@alias shrike.Combine "max"|"sum"|"min"|"median"

-- The message -----------------------------------------------------------------------------

---A read-only view of the message being scanned, valid only during its scan.
---@class shrike.Msg
local Msg = {}

---@return string subject as displayed ("" when none)
function Msg:subject() end
---@return string subject normalized (case-folded, NFKC, look-alikes folded)
function Msg:subject_normalized() end
---@return string|nil address, string|nil domain, string|nil display_name
function Msg:from() end
---@return string|nil address, string|nil domain
function Msg:reply_to() end
---@return string[] envelope RCPT TO, else To and Cc
function Msg:recipients() end
---@return string|nil client IP
function Msg:ip() end
---@return string|nil
function Msg:helo() end
---@return string|nil MAIL FROM
function Msg:mail_from() end
---@return string[] RCPT TO
function Msg:rcpt() end
---@return string|nil the client's reverse DNS name as the MTA resolved it
function Msg:hostname() end
---@return string|nil the authenticated sender
function Msg:user() end
---@return string|nil
function Msg:queue_id() end
---@return string|nil
function Msg:deliver_to() end
---@return shrike.Envelope
function Msg:envelope() end
---@return "inbound"|"outbound" outbound: an authenticated client or one of `[outbound] networks`
function Msg:direction() end
---@return integer ids of In-Reply-To/References that our users' outbound mail carried (0: none)
function Msg:reply() end
---@return integer messages the recipient sent to this sender, only when the sender authenticated its From domain (aligned DKIM or SPF pass); 0 otherwise
function Msg:known_correspondent() end
---@return string body text as displayed
function Msg:text() end
---@return string body text normalized
function Msg:text_normalized() end
---@return string visible text of the HTML parts ("" when none)
function Msg:html_text() end
---@return string decoded HTML source ("" when none)
function Msg:html() end
---@return shrike.Part[]
function Msg:parts() end
---@return string[]
function Msg:part_types() end
---@return (string|false)[]
function Msg:part_encodings() end
---@return shrike.Url[]
function Msg:urls() end
---@return string[] distinct URL hosts
function Msg:hosts() end
---@return string[] distinct registrable domains of the URLs
function Msg:domains() end
---@param flag "is_ip"|"userinfo"
---@return string|nil url of the first URL record with the flag
function Msg:first_url(flag) end
---@return shrike.Anchor[]
function Msg:anchors() end
---@return shrike.Ip[]
function Msg:ips() end
---@return string|nil
function Msg:sender_ip() end
---@return string|nil
function Msg:bare_helo_ip() end
---@return string[]
function Msg:hop_domains() end
---@return integer
function Msg:received_count() end
---@return shrike.Attachment[]
function Msg:attachments() end
---@return table<string, boolean> set of anomaly names
function Msg:anomalies() end
---@param name string
---@return boolean
function Msg:has_anomaly(name) end
---@return string[] words mixing scripts
function Msg:mixed_script_words() end
---@return integer|nil the Date header as Unix time
function Msg:date() end
---@return "bad_offset"|"malformed"|nil what, string|nil zone
function Msg:date_zone() end
---@param n? integer|"public" 1 (default) is the topmost Received header
---@return integer|nil unix_time
function Msg:received_time(n) end
---@return integer the scan's clock, Unix seconds
function Msg:now() end
---@return string|nil
function Msg:message_id() end
---@return string|nil
function Msg:message_id_domain() end
---@return string|nil
function Msg:mailer() end
---@return integer raw size in bytes
function Msg:size() end
---@param role? string one of shrike.Email's roles; all when nil
---@return shrike.Email[]
function Msg:emails(role) end
---@param role? string
---@return integer
function Msg:email_count(role) end
---@param name string
---@return string|nil the first header of that name, decoded
function Msg:header(name) end
---@param name string
---@return string[] every header of that name, decoded
function Msg:headers(name) end
---@param name string
---@return string|nil the first header of that name as sent
function Msg:raw_header(name) end
---@param name string
---@return integer
function Msg:header_count(name) end
---@param kind string|integer shingle type name or number
---@return string[] hex hashes
function Msg:shingles(kind) end
---@param kind string|integer shingle type
---@param window shrike.Window
---@param how? shrike.Combine default "max"
---@param min_seen? integer only keys seen at least this often
---@return integer seen, integer spam, integer ham, integer complaints, integer rescues, integer combined, integer keys
function Msg:stat(kind, window, how, min_seen) end
---@param kind string|integer shingle type
---@param window? shrike.Window one window's counts per key; all windows when nil
---@return shrike.KeyStats[]|table[]
function Msg:stats(kind, window) end
---@return number|nil the learned verdict: FTRL and naive Bayes stacked into one spam probability (0..1), nil during the classifier's cold start
function Msg:classify() end
---@return number|nil naive Bayes' spam probability over the same features (0..1; near 0.5 when
---the evidence points both ways), nil until it has learned enough of both classes
function Msg:bayes() end
---@return shrike.Auth
function Msg:auth() end
---@return shrike.DnsblHit[]
function Msg:dnsbl() end
---The value of a declared `feature{}` over its window, from the state before this message.
---@param name string
---@return number|nil value nil when the feature has no key for this message
---@return boolean saturated a distinct count reached its `max_distinct`
function Msg:feature(name) end

-- Declarations ----------------------------------------------------------------------------

---@alias shrike.Action "reject"|"soft reject"|"greylist"|"add header"|"rewrite subject"|"discard"|"quarantine"

---@alias shrike.Hit nil|boolean|number|string|table<string, boolean|number|table>

---@class shrike.Rule
---@field name string symbol: A-Z, 0-9, _, at most 64
---@field score? number one symbol's score (or `scores`)
---@field scores? table<string, number> several symbols and their scores
---@field description? string
---@field group? string
---@field check fun(msg: shrike.Msg): shrike.Hit, ...
---@field action? shrike.Action
---@field actions? table<string, shrike.Action>
---@field shadow? boolean counted, not applied
---@field share? number test mode: the share of messages it applies to, (0, 1]

---Declares a rule.
---@param def shrike.Rule
function rule(def) end

---@class shrike.Feature
---@field name string
---@field key fun(msg: shrike.Msg): string|number|nil what the feature is counted per (nil: none)
---@field value? fun(msg: shrike.Msg): any the value added (sum, ratio: a number or boolean; distinct: a string)
---@field kind "count"|"sum"|"distinct"|"ratio"
---@field window string "10m", "1h", "24h", "7d"…
---@field max_distinct? integer distinct: values counted exactly, then saturated (default 1000)

---Declares a windowed feature, read with `msg:feature(name)`.
---@param def shrike.Feature
function feature(def) end

-- Helpers ---------------------------------------------------------------------------------

---@class shrike.Regex
local Regex = {}
---@param text string
---@return boolean
function Regex:match(text) end
---@param text string
---@param init? integer
---@return integer|nil start, integer|nil finish
function Regex:find(text, init) end
---@param text string
---@return (string|false)[]|nil
function Regex:captures(text) end
---@param text string
---@return integer
function Regex:count(text) end
---@param text string
---@param max? integer default 3
---@return integer n, string[] list
function Regex:matches(text, max) end
---@param text string
---@param max? integer default 100
---@return string[]
function Regex:all(text, max) end

---@class shrike.Phrases
local Phrases = {}
---@param text string
---@param max? integer
---@return integer[] counts, (string[]|false)[] found
function Phrases:search(text, max) end
---@param text string
---@param max? integer
---@return integer n, string[]|nil found
function Phrases:count(text, max) end

---Rust regular expressions, compiled once per state and cached.
re = {}
---@param pattern string
---@param text string
---@return boolean
function re.match(pattern, text) end
---@param pattern string
---@param text string
---@return integer|nil start, integer|nil finish
function re.find(pattern, text) end
---@param pattern string
---@param text string
---@return (string|false)[]|nil
function re.captures(pattern, text) end
---@param pattern string
---@param text string
---@return integer
function re.count(pattern, text) end
---@param pattern string
---@return shrike.Regex
function re.compile(pattern) end
---@param lists string[][]
---@return shrike.Phrases
function re.phrases(lists) end

---Logging through the daemon's log, tagged with the rule; rate-limited.
log = {}
---@param fmt string
---@param ... any
function log.error(fmt, ...) end
---@param fmt string
---@param ... any
function log.warn(fmt, ...) end
---@param fmt string
---@param ... any
function log.info(fmt, ...) end
---@param fmt string
---@param ... any
function log.debug(fmt, ...) end

---@class shrike.List
local List = {}
---@param value string
---@return boolean
function List:contains(value) end

---A list of the rule set's `lists/` directory.
---@param name string
---@return shrike.List
function list(name) end

---A sliding-window counter of `(name, value)`, hit once per call.
---@param name string
---@param value string
---@param limit integer
---@param window_secs integer
---@return integer count, boolean over
function ratelimit(name, value, limit, window_secs) end

---ASCII class byte counts of `text` (of its first `max` bytes).
---@param text string
---@param max? integer
---@return integer upper, integer lower, integer digits, integer spaces, integer other
function char_counts(text, max) end

---@param ip string|nil
---@return boolean
function is_private_ip(ip) end
