// shrike's web UI: one page, six views chosen by the URL's fragment. Plain DOM, no library;
// every value from the daemon goes in as text (never as HTML). State-changing requests are
// POSTs that carry the session's CSRF token in a header.
"use strict";

const $ = (id) => document.getElementById(id);
let csrf = "";
const COLORS = ["#3a7d44", "#9bc53d", "#e8b10c", "#f08a24", "#c8553d", "#8e2c48", "#5d3a9b", "#1f5f8b",
  "#58a4b0", "#777"];
const SVGNS = "http://www.w3.org/2000/svg";

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v;
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v);
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined) continue;
    e.append(c instanceof Node ? c : String(c));
  }
  return e;
}

function svg(tag, attrs) {
  const e = document.createElementNS(SVGNS, tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  return e;
}

function showError(message) {
  const p = $("error");
  p.textContent = message || "";
  p.hidden = !message;
}

async function api(path, options) {
  const o = options || {};
  const headers = Object.assign({}, o.headers || {});
  if (o.method === "POST") headers["X-CSRF-Token"] = csrf;
  const r = await fetch(path, { method: o.method || "GET", headers, body: o.body, credentials: "same-origin" });
  const text = await r.text();
  let body;
  try { body = JSON.parse(text); } catch (_) { body = { error: text }; }
  if (!r.ok) throw new Error(body.error || ("HTTP " + r.status));
  return body;
}

function fmt(n, digits) {
  if (n === null || n === undefined) return "–";
  if (typeof n !== "number") return String(n);
  return Number.isInteger(n) && digits === undefined ? n.toLocaleString("en") : n.toFixed(digits === undefined ? 2 : digits);
}

function duration(secs) {
  const d = Math.floor(secs / 86400), h = Math.floor(secs % 86400 / 3600), m = Math.floor(secs % 3600 / 60);
  return (d ? d + "d " : "") + (d || h ? h + "h " : "") + m + "m " + (secs % 60) + "s";
}

function bytes(n) {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return n.toFixed(i ? 1 : 0) + " " + units[i];
}

// A stacked bar chart: rows[slot][series], one bar per slot; labels[slot] for the x axis ticks.
function barChart(container, names, rows, labels) {
  container.replaceChildren();
  const W = 900, H = 200, L = 44, B = 22, T = 8;
  // A ceiling that divides into 4 whole grid steps.
  const max = Math.ceil(Math.max(4, ...rows.map((r) => r.reduce((a, b) => a + b, 0))) / 4) * 4;
  const s = svg("svg", { viewBox: `0 0 ${W} ${H}`, width: W, height: H, role: "img" });
  const bw = (W - L - 4) / Math.max(1, rows.length);
  for (let g = 0; g <= 4; g++) {
    const y = T + (H - T - B) * (1 - g / 4);
    s.append(svg("line", { x1: L, x2: W, y1: y, y2: y, stroke: "#e4e7ec" }));
    const t = svg("text", { x: L - 4, y: y + 4, "text-anchor": "end", "font-size": 10, fill: "#5b6575" });
    t.textContent = fmt(Math.round(max * g / 4));
    s.append(t);
  }
  rows.forEach((r, i) => {
    let y = H - B;
    r.forEach((v, k) => {
      if (!v) return;
      const h = (H - T - B) * v / max;
      y -= h;
      const rect = svg("rect", { x: L + i * bw, y, width: Math.max(1, bw - 1), height: h, fill: COLORS[k % COLORS.length] });
      const title = svg("title");
      title.textContent = `${labels[i]}: ${names[k]} ${v}`;
      rect.append(title);
      s.append(rect);
    });
  });
  const every = Math.max(1, Math.ceil(rows.length / 8));
  labels.forEach((lab, i) => {
    if (i % every) return;
    const t = svg("text", { x: L + i * bw, y: H - 6, "font-size": 10, fill: "#5b6575" });
    t.textContent = lab;
    s.append(t);
  });
  const legend = el("div", { class: "legend" });
  names.forEach((n, k) => {
    const sw = el("i");
    sw.style.background = COLORS[k % COLORS.length];
    legend.append(el("span", {}, sw, n));
  });
  container.append(s, legend);
}

function clock(ms) {
  const d = new Date(ms);
  return d.toISOString().slice(11, 16);
}

function card(k, v) {
  return el("div", { class: "card" }, el("div", { class: "k" }, k), el("div", { class: "v" }, v));
}

function table(t, head, rows) {
  t.replaceChildren(el("tr", {}, head.map((h) => el("th", {}, h))), ...rows);
}

// ---- Status ----

async function status() {
  const s = await api("/ui/api/status");
  const st = s.store || {};
  $("status-cards").replaceChildren(
    card("uptime", duration(s.uptime)),
    card("scanned", fmt(s.scanned)),
    card("scans/s (last minute)", fmt(s.throughput_1m)),
    card("scans/s (last 5 minutes)", fmt(s.throughput_5m)),
    card("queue", `${s.queue} / ${s.queue_capacity} (${s.workers} workers)`),
    card("rule generation", `${s.generation} (${s.rules} rules)`),
    card("last reload error", s.last_reload_error || "none"),
    card("store", `${fmt(st.keys)} keys, ${bytes(st.approx_bytes || 0)}`),
    card("learned", `${s.learned_spam} spam, ${s.learned_ham} ham` +
      (s.duplicate_spam + s.duplicate_ham ? ` (+${s.duplicate_spam + s.duplicate_ham} duplicates)` : "")),
    card("history", s.history.enabled ? `${fmt(s.history.written)} records, ${bytes(s.history.bytes)}` : "off"),
  );
  const minute = s.now_minute * 60000;
  barChart($("chart-hour"), s.actions, s.hour, s.hour.map((_, i) => clock(minute - (s.hour.length - 1 - i) * 60000)));
  const dayStart = minute - (s.day.length * 10 - 1) * 60000;
  barChart($("chart-day"), s.actions, s.day, s.day.map((_, i) => clock(dayStart + i * 600000)));
  const rows = Object.entries(s.latency).map(([stage, l]) =>
    el("tr", {}, el("td", {}, stage), el("td", { class: "num" }, fmt(l.count)),
      ["p50", "p90", "p99"].map((p) => el("td", { class: "num" }, l[p] === null ? "–" : l[p]))));
  table($("latency"), ["stage", "scans", "p50 ≤", "p90 ≤", "p99 ≤"], rows);
  const limited = (s.outbound_limited || []).map((u) =>
    el("tr", {}, el("td", {}, u.user), el("td", {}, new Date(u.last * 1000).toISOString().replace("T", " ").slice(0, 19)),
      el("td", {}, u.reason), el("td", { class: "num" }, fmt(u.messages))));
  table($("outbound-limited"), ["user", "last (UTC)", "limit", "messages held"], limited);
  if (!limited.length) $("outbound-limited").append(el("tr", {}, el("td", { colspan: 4 }, "None.")));
  shingleTypes = s.shingle_types || shingleTypes;
}

// ---- History ----

let historyCursor = null;
let symbolInfo = null;

async function symbols() {
  if (!symbolInfo) {
    const r = await api("/ui/api/rules");
    symbolInfo = {};
    for (const rule of r.rules) for (const sym of rule.symbols) symbolInfo[sym.name] = sym;
  }
  return symbolInfo;
}

function historyQuery() {
  const p = new URLSearchParams();
  for (const [k, v] of new FormData($("history-form"))) if (String(v).trim()) p.set(k, String(v).trim());
  return p;
}

// Each query is numbered: a reply that arrives after a newer query was sent (the page's first
// load racing a search) is dropped, so it cannot overwrite the newer results.
let historySeq = 0;

async function history(more) {
  const seq = ++historySeq;
  const p = historyQuery();
  if (more && historyCursor) p.set("cursor", historyCursor);
  const page = await api("/ui/api/history?" + p);
  if (seq !== historySeq) return;
  const t = $("history-table");
  if (!more) table(t, ["time (UTC)", "action", "score", "via", "queue id", "IP", "sender", "recipients", "subject"], []);
  for (const r of page.records) {
    const tr = el("tr", { class: "clickable", "data-queue-id": r.queue_id || "" },
      el("td", {}, (r.time || "").replace("T", " ").slice(0, 19)), el("td", {}, r.action),
      el("td", { class: "num" }, r.score === undefined ? "–" : fmt(r.score)), el("td", {}, r.listener || ""),
      el("td", {}, r.queue_id || ""), el("td", {}, r.ip || ""), el("td", {}, r.sender || ""),
      el("td", {}, (r.rcpt || []).join(", ")), el("td", {}, r.subject || ""));
    tr.addEventListener("click", () => openRecord(r).catch((e) => showError(e.message)));
    t.append(tr);
  }
  if (!page.records.length && !more) t.append(el("tr", {}, el("td", { colspan: 9 }, "No records match.")));
  historyCursor = page.cursor;
  $("history-more").hidden = !page.cursor;
}

async function openRecord(r) {
  const info = await symbols();
  const box = $("history-record");
  const env = [["time", r.time], ["action", r.action], ["score", r.score !== undefined ? `${fmt(r.score)} / ${fmt(r.required_score)}` : undefined],
    ["listener", r.listener], ["queue id", r.queue_id], ["Message-ID", r.message_id], ["client IP", r.ip],
    ["HELO", r.helo], ["rDNS", r.rdns], ["user", r.user], ["envelope sender", r.sender],
    ["recipients", (r.rcpt || []).join(", ")], ["From", r.from], ["subject", r.subject], ["size", r.size],
    ["rule generation", r.generation], ["scan time (ms)", r.scan_ms]]
    .filter(([, v]) => v !== undefined && v !== null && v !== "")
    .map(([k, v]) => el("tr", {}, el("th", {}, k), el("td", {}, v)));
  const syms = normalizeSymbols(r.symbols).map((s) => el("tr", {},
    el("td", {}, s.name), el("td", { class: "num" }, fmt(s.score)),
    el("td", {}, (info[s.name] || {}).description || ""), el("td", {}, (s.options || []).join(", "))));
  const symTable = el("table", { class: "rows", id: "record-symbols" });
  table(symTable, ["symbol", "score", "description", "options"], syms);
  box.replaceChildren(el("h3", {}, "Record"), el("table", { id: "record-envelope" }, env),
    el("h3", {}, "Symbols"), symTable,
    el("p", { class: "note" }, "Learning needs the message itself, which the history does not keep: ",
      el("a", { href: "#test" }, "paste it on the Test page"), " and learn it there as spam or ham."),
    el("div", { class: "row" },
      el("button", { type: "button", id: "record-learn-spam", onclick: () => learnFromRecord(r, "spam") }, "Learn as spam…"),
      el("button", { type: "button", id: "record-learn-ham", onclick: () => learnFromRecord(r, "ham") }, "Learn as ham…")));
  box.hidden = false;
  box.scrollIntoView();
}

// The history has no message body: the Test page takes it, with the record's envelope filled in.
function learnFromRecord(r, cls) {
  $("test-ip").value = r.ip || "";
  $("test-from").value = r.sender || "";
  $("learn-result").textContent = `Paste the message of ${r.queue_id || r.message_id || "this record"} above, ` +
    `then press "Learn as ${cls}".`;
  location.hash = "#test";
}

function normalizeSymbols(symbols) {
  if (!symbols) return [];
  if (Array.isArray(symbols)) return symbols;
  return Object.entries(symbols).map(([name, s]) => Object.assign({ name }, s));
}

// ---- Test a message ----

let lastMessage = "";

function messageHeaders() {
  const h = { "Content-Type": "message/rfc822" };
  if ($("test-ip").value.trim()) h["IP"] = $("test-ip").value.trim();
  if ($("test-from").value.trim()) h["From"] = $("test-from").value.trim();
  return h;
}

async function testMessage() {
  const msg = $("test-message").value;
  if (!msg.trim()) throw new Error("Paste or upload a message first.");
  const r = await api("/ui/api/test", { method: "POST", body: msg, headers: messageHeaders() });
  lastMessage = msg;
  $("test-action").textContent = r.action;
  $("test-score").textContent = fmt(r.score);
  $("test-required").textContent = r.required_score !== undefined ? `required ${fmt(r.required_score)}` : "no required score";
  const info = await symbols();
  const all = Object.entries(r.symbols || {}).map(([name, s]) => [name, s, false])
    .concat(Object.entries(r.shadow || {}).map(([name, s]) => [name, s, true]));
  table($("test-symbols"), ["symbol", "score", "description", "options"], all.map(([name, s, shadow]) =>
    el("tr", {}, el("td", {}, name, shadow ? el("span", { class: "tag shadow" }, "shadow") : null),
      el("td", { class: "num" }, fmt(s.score)), el("td", {}, s.description || (info[name] || {}).description || ""),
      el("td", {}, (s.options || []).join(", ")))));
  const e = r.entities || {};
  // Each address under the shingle type of its role (a From address is a `from` key, …).
  const roleType = { from: "from", reply_to: "reply_to", return_path: "envelope_from", envelope_from: "envelope_from",
    to: "recipient", cc: "recipient", envelope_rcpt: "recipient", body: "body_email", mailto: "body_email" };
  const addresses = {};
  for (const a of e.addresses || []) {
    const type = roleType[a.role];
    if (!type) continue;
    (addresses[type] = addresses[type] || []).includes(a.address) || addresses[type].push(a.address);
  }
  const lists = [["URLs", e.urls, "url"], ["hosts", e.hosts, "url_host"], ["domains", e.domains, "url_domain"],
    ["From", addresses.from, "from"], ["Reply-To", addresses.reply_to, "reply_to"],
    ["envelope sender", addresses.envelope_from, "envelope_from"], ["recipients", addresses.recipient, "recipient"],
    ["addresses in the body", addresses.body_email, "body_email"], ["IPs", e.ips, "received_ip"],
    ["Message-ID domain", e.message_id_domain ? [e.message_id_domain] : [], "message_id_domain"],
    ["mailer", e.mailer ? [e.mailer] : [], "mailer"]];
  $("test-entities").replaceChildren(...lists.filter(([, v]) => v && v.length).map(([title, values, type]) =>
    el("p", {}, el("b", {}, title + ": "), el("span", { class: "chips" }, values.map((v) =>
      el("a", { href: "#reputation", onclick: () => openReputation(type, v, null) }, v))))));
  if (!$("test-entities").childElementCount) $("test-entities").append(el("p", { class: "note" }, "none"));
  $("test-shingles").replaceChildren(...(r.shingles || []).map((s) =>
    el("a", { href: "#reputation", class: "shingle", onclick: () => openReputation(s.type, null, s.hash) }, `${s.type} ${s.hash}`)));
  $("test-result").hidden = false;
}

async function learnMessage(cls) {
  const msg = $("test-message").value;
  if (!msg.trim()) throw new Error("Paste or upload a message first.");
  const r = await api("/ui/api/learn?class=" + cls, { method: "POST", body: msg, headers: messageHeaders() });
  $("learn-result").textContent = `Learned as ${r.class}: ${r.keys} reputation keys` + (r.trained ? ", classifier trained." : ".");
}

// ---- Reputation ----

let shingleTypes = ["url", "url_host", "url_domain", "subject", "from", "sender_ip", "from_domain", "from_name",
  "reply_to", "envelope_from", "helo", "received_ip", "message_id_domain", "mailer", "body_email", "body_exact",
  "sender_net", "recipient", "attachment_name", "attachment_ext", "attachment_hash", "body_fuzzy",
  "pair_sender_rcpt", "unique_sender"];
let pendingReputation = null;

function fillTypes() {
  const sel = $("rep-type");
  if (sel.options.length) return;
  for (const t of shingleTypes) sel.append(el("option", {}, t));
}

function openReputation(type, value, hash) {
  pendingReputation = { type, value, hash };
}

async function reputation(type, value, hash) {
  fillTypes();
  $("rep-type").value = type;
  $("rep-value").value = value || "";
  $("rep-hash").value = hash || "";
  const p = new URLSearchParams({ type });
  if (hash) p.set("hash", hash); else p.set("value", value);
  const r = await api("/ui/api/reputation?" + p);
  const out = $("rep-result");
  out.replaceChildren(el("p", {}, el("b", {}, `${r.type} ${r.value}`), ` (${r.keys.length} key${r.keys.length === 1 ? "" : "s"})`));
  for (const key of r.keys) {
    out.append(el("h3", {}, `key ${key.hash}` + (key.known ? "" : ": never seen")));
    const wins = Object.entries(key.windows);
    const counters = wins.length ? Object.keys(wins[0][1]) : [];
    const wt = el("table", { class: "rows" });
    table(wt, ["window"].concat(counters), wins.map(([w, c]) =>
      el("tr", {}, el("td", {}, w), counters.map((k) => el("td", { class: "num" }, fmt(c[k]))))));
    out.append(wt);
    const bySize = {};
    for (const b of key.buckets) (bySize[b.seconds] = bySize[b.seconds] || []).push(b);
    const sizes = Object.keys(bySize).map(Number).sort((a, b) => a - b);
    const spans = sizes.length ? [[sizes[0], 86400, "last 24 hours"], [sizes[sizes.length - 1], 14 * 86400, "last 14 days"]] : [];
    if (!spans.length) spans.push([600, 86400, "last 24 hours"], [86400, 14 * 86400, "last 14 days"]);
    for (const [size, span, title] of spans) {
      const n = Math.min(400, Math.ceil(span / size));
      const end = Math.floor(r.now / size) * size;
      const start = end - (n - 1) * size;
      const rows = Array.from({ length: n }, () => counters.map(() => 0));
      for (const b of bySize[size] || []) {
        const i = Math.floor((b.start - start) / size);
        if (i >= 0 && i < n) counters.forEach((k, j) => { rows[i][j] += b[k] || 0; });
      }
      const div = el("div", { class: "chart rep-chart" });
      out.append(el("h4", {}, `${title} (${size >= 3600 ? size / 3600 + " h" : size / 60 + " min"} buckets)`), div);
      barChart(div, counters, rows, rows.map((_, i) => {
        const d = new Date((start + i * size) * 1000).toISOString();
        return size >= 86400 ? d.slice(5, 10) : d.slice(11, 16);
      }));
    }
  }
}

// ---- Rules ----

async function rules() {
  const r = await api("/ui/api/rules");
  $("rules-summary").textContent = `Generation ${r.generation}, built in ${fmt(r.build_ms, 1)} ms; counters since it loaded (flushed every few hundred scans, or after a second idle).`;
  table($("rules-table"), ["rule", "file", "runs", "hits", "hit rate", "mean µs", "errors", "timeouts"], r.rules.map((x) =>
    el("tr", {}, el("td", {}, x.name, x.shadow ? el("span", { class: "tag shadow" }, "shadow: would have fired " + x.hits + "×") : null,
      x.share !== null && x.share !== undefined ? el("span", { class: "tag" }, `test: ${fmt(x.share * 100, 0)}% share`) : null),
      el("td", {}, x.file), el("td", { class: "num" }, fmt(x.runs)), el("td", { class: "num" }, fmt(x.hits)),
      el("td", { class: "num" }, fmt(x.hit_rate * 100, 2) + "%"), el("td", { class: "num" }, fmt(x.mean_us, 1)),
      el("td", { class: "num" }, fmt(x.errors)), el("td", { class: "num" }, fmt(x.timeouts)))));
  const settings = r.settings || [];
  $("settings-summary").textContent = settings.length === 0
    ? "No [[settings]] entries: every recipient gets the global settings."
    : `${settings.length} [[settings]] entries; the most specific match wins (recipient address, recipient domain, user, sender, network).`;
  const list = (x) => (x || []).join(", ");
  const pairs = (o) => Object.entries(o || {}).map(([k, v]) => `${k} ${v}`).join(", ");
  table($("settings-table"), ["name", "matches", "thresholds", "scores", "disabled", "allow senders", "deny senders"], settings.map((s) =>
    el("tr", {}, el("td", {}, s.name),
      el("td", {}, [["recipients", s.rcpts], ["domains", s.rcpt_domains], ["users", s.users], ["senders", s.senders], ["networks", s.networks]]
        .filter(([, v]) => v && v.length).map(([k, v]) => `${k}: ${list(v)}`).join("; ") || "(by Settings-ID only)"),
      el("td", {}, pairs(s.thresholds)), el("td", {}, pairs(s.scores)), el("td", {}, list(s.disabled)),
      el("td", {}, list(s.allow_senders)), el("td", {}, list(s.deny_senders)))));
}

// ---- Routing ----

// The quarantine: kept messages, newest first; one opened shows its header fields and its text
// (the daemon renders HTML as text; it goes in with textContent), with the admin's actions.
let quarantineCursor = null;
let quarantineSeq = 0;

async function quarantine(more) {
  const seq = ++quarantineSeq;
  const p = new URLSearchParams();
  for (const [k, v] of new FormData($("quarantine-form"))) if (String(v).trim()) p.set(k, String(v).trim());
  if (more && quarantineCursor) p.set("cursor", quarantineCursor);
  let page;
  try {
    page = await api("/ui/api/quarantine?" + p);
  } catch (e) {
    if (/quarantine is off/.test(e.message)) { $("quarantine-off").hidden = false; return; }
    throw e;
  }
  if (seq !== quarantineSeq) return;
  const t = $("quarantine-table");
  if (!more) table(t, ["time (UTC)", "action", "score", "sender", "recipients", "subject", ""], []);
  for (const m of page.entries) {
    const tr = el("tr", { class: "clickable q-entry", "data-id": m.id },
      el("td", {}, (m.time || "").replace("T", " ").slice(0, 19)), el("td", {}, m.action),
      el("td", { class: "num" }, fmt(m.score)), el("td", {}, m.sender || m.from || "<>"),
      el("td", {}, (m.rcpt || []).slice(0, 3).join(", ") + ((m.rcpt || []).length > 3 ? ` (+${m.rcpt.length - 3})` : "")),
      el("td", {}, m.subject || ""), el("td", {}, (m.released || []).length ? "released" : ""));
    tr.addEventListener("click", () => openQuarantined(m.id).catch((e) => showError(e.message)));
    t.append(tr);
  }
  if (!page.entries.length && !more) t.append(el("tr", {}, el("td", { colspan: 7 }, "No kept messages match.")));
  quarantineCursor = page.cursor;
  $("quarantine-more").hidden = !page.cursor;
}

let openedId = null;

async function openQuarantined(id) {
  const v = await api("/ui/api/quarantine/" + encodeURIComponent(id));
  openedId = id;
  const e = v.entry;
  const rows = [["time", e.time], ["action", e.action], ["score", fmt(e.score)], ["listener", e.listener],
    ["queue id", e.queue_id], ["Message-ID", e.message_id], ["client IP", e.ip], ["envelope sender", e.sender],
    ["recipients", (e.rcpt || []).join(", ")], ["From", e.from], ["subject", e.subject], ["size", e.size],
    ["symbols", (e.symbols || []).map((s) => `${s.name} (${fmt(s.score)})`).join(", ")],
    ["released", (e.released || []).map((r) => `${r.time} by ${r.by}`).join("; ")]]
    .filter(([, x]) => x !== undefined && x !== null && x !== "")
    .map(([k, x]) => el("tr", {}, el("th", {}, k), el("td", {}, x)));
  $("q-entry").replaceChildren(...rows);
  table($("q-headers"), ["field", "value"], (v.headers || []).map(([n, x]) => el("tr", {}, el("td", {}, n), el("td", {}, x))));
  $("q-text").textContent = v.text || "";
  table($("q-attachments"), ["name", "type", "size"], (v.attachments || []).map((a) =>
    el("tr", {}, el("td", {}, a.name || ""), el("td", {}, a.type || ""), el("td", { class: "num" }, fmt(a.size)))));
  $("q-raw").setAttribute("href", "/ui/api/quarantine/" + encodeURIComponent(id) + "/raw");
  $("q-result").textContent = "";
  $("quarantine-view").hidden = false;
  $("quarantine-view").scrollIntoView();
}

async function quarantineAction(action, query) {
  if (!openedId) return;
  const id = openedId;
  const q = query ? "?" + query : "";
  const r = await api(`/ui/api/quarantine/${encodeURIComponent(id)}/${action}${q}`,
    { method: "POST", headers: { "Content-Type": "application/json" } });
  const said = action === "release" ? `released to ${(r.rcpt || []).join(", ")}: ${r.reply}`
    : action === "learn" ? `learned as ${r.class}${r.duplicate ? " (already learned)" : ""}`
      : "deleted";
  $("q-result").textContent = said;
  if (action === "delete") $("quarantine-view").hidden = true;
  await quarantine(false);
  if (action !== "delete") $("q-result").textContent = said;
}

async function releaseQuarantined() {
  try {
    await quarantineAction("release");
  } catch (e) {
    if (!/already released/.test(e.message) || !confirm(e.message + "\n\nRelease it again?")) throw e;
    await quarantineAction("release", "force=1");
  }
}

const PAGES = ["status", "history", "quarantine", "test", "reputation", "rules"];

async function route() {
  const page = PAGES.includes(location.hash.slice(1)) ? location.hash.slice(1) : "status";
  for (const p of PAGES) {
    $("page-" + p).hidden = p !== page;
    $("nav-" + p).classList.toggle("active", p === page);
  }
  showError("");
  try {
    if (page === "status") await status();
    else if (page === "rules") await rules();
    else if (page === "history" && !$("history-table").childElementCount) await history(false);
    else if (page === "quarantine") await quarantine(false);
    else if (page === "reputation") {
      fillTypes();
      if (pendingReputation) {
        const p = pendingReputation;
        pendingReputation = null;
        await reputation(p.type, p.value, p.hash);
      }
    }
    document.body.dataset.page = page;
  } catch (e) {
    showError(e.message);
    document.body.dataset.page = page;
  }
}

function guard(f) {
  return (ev) => {
    if (ev) ev.preventDefault();
    showError("");
    f().catch((e) => showError(e.message));
  };
}

async function start() {
  const s = await api("/ui/api/session");
  csrf = s.csrf;
  $("logout").hidden = !s.login;
  $("logout").addEventListener("click", guard(async () => {
    await api("/ui/logout", { method: "POST" });
    location.href = "/";
  }));
  $("history-form").addEventListener("submit", guard(() => history(false)));
  $("history-more").addEventListener("click", guard(() => history(true)));
  $("quarantine-form").addEventListener("submit", guard(() => quarantine(false)));
  $("quarantine-more").addEventListener("click", guard(() => quarantine(true)));
  $("q-release").addEventListener("click", guard(releaseQuarantined));
  $("q-ham").addEventListener("click", guard(() => quarantineAction("learn", "class=ham")));
  $("q-spam").addEventListener("click", guard(() => quarantineAction("learn", "class=spam")));
  $("q-delete").addEventListener("click", guard(() => {
    if (!confirm("Delete this message for good?")) return Promise.resolve();
    return quarantineAction("delete");
  }));
  $("test-form").addEventListener("submit", guard(testMessage));
  $("learn-spam").addEventListener("click", guard(() => learnMessage("spam")));
  $("learn-ham").addEventListener("click", guard(() => learnMessage("ham")));
  $("test-file").addEventListener("change", guard(async () => {
    const f = $("test-file").files[0];
    if (f) $("test-message").value = await f.text();
  }));
  $("rep-form").addEventListener("submit", guard(() => {
    const hash = $("rep-hash").value.trim();
    return reputation($("rep-type").value, $("rep-value").value.trim(), hash || null);
  }));
  window.addEventListener("hashchange", route);
  await route();
}

start().catch((e) => showError(e.message));
