// The idem console. Plain JavaScript, no framework. Everything taken from a message or
// the server is put on the page as text (textContent / createTextNode), never as HTML:
// payloads, keys, headers and error messages are attacker-controlled.
"use strict";

const $ = (id) => document.getElementById(id);

// el("td", {class: "num"}, "text", child): children that are strings become text nodes.
function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "class") node.className = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, String(v));
  }
  for (const c of children) {
    if (c === undefined || c === null) continue;
    node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return node;
}
function clear(node) { while (node.firstChild) node.removeChild(node.firstChild); return node; }
function fill(tbody, rows) { clear(tbody); for (const r of rows) tbody.append(r); }

const nf = new Intl.NumberFormat();
function num(v) { return v === null || v === undefined ? "–" : nf.format(v); }
function rate(v) { return v === null || v === undefined ? "–" : (v >= 10 ? v.toFixed(0) : v.toFixed(1)); }
function age(ms) {
  if (ms === null || ms === undefined) return "–";
  const s = Math.round(ms / 1000);
  if (s < 0) return "in the future";
  if (s < 120) return s + " s";
  if (s < 7200) return Math.round(s / 60) + " min";
  if (s < 172800) return (s / 3600).toFixed(1) + " h";
  return (s / 86400).toFixed(1) + " d";
}
function when(ms) { return ms ? new Date(ms).toLocaleString() : "–"; }
function duration(ms) { return ms % 86400000 === 0 ? ms / 86400000 + " d" : ms % 3600000 === 0 ? ms / 3600000 + " h" : age(ms); }

function status(text) { $("status").textContent = text || ""; }

async function api(path, options) {
  const res = await fetch(path, Object.assign({ cache: "no-store" }, options || {}));
  let body = null;
  try { body = await res.json(); } catch (e) { body = { error: "not JSON (" + res.status + ")" }; }
  if (!res.ok) throw new Error((body && body.error) || ("HTTP " + res.status));
  return body;
}

// ---- pages -------------------------------------------------------------------------
const pages = ["groups", "dlq", "dedup", "audit"];
let current = null;
let timer = null;

function show() {
  const name = pages.includes(location.hash.slice(1)) ? location.hash.slice(1) : "groups";
  current = name;
  for (const p of pages) {
    $("page-" + p).hidden = p !== name;
    $("nav-" + p).classList.toggle("active", p === name);
  }
  status("");
  clearTimeout(timer);
  if (name === "groups") refreshGroups();
  if (name === "dlq") loadTopics();
  if (name === "dedup") refreshDedup();
  if (name === "audit") refreshAudit();
}

// Polls only the page on screen, and only while the tab is visible: the server samples
// only while someone looks.
function again(fn, ms) {
  clearTimeout(timer);
  timer = setTimeout(() => { if (document.visibilityState === "visible") fn(); else again(fn, ms); }, ms);
}

// ---- groups and lag ----------------------------------------------------------------
const svgNS = "http://www.w3.org/2000/svg";
function svg(tag, attrs) {
  const n = document.createElementNS(svgNS, tag);
  for (const [k, v] of Object.entries(attrs)) n.setAttribute(k, String(v));
  return n;
}

// A line chart of `series` [{name, values: [[t, v|null], ...]}] over the last window.
function chart(title, series, unit) {
  const W = 600, H = 110, pad = 4;
  const all = series.flatMap((s) => s.values.map((p) => p[1]).filter((v) => v !== null));
  const max = Math.max(1, ...all);
  const ts = series.flatMap((s) => s.values.map((p) => p[0]));
  const t0 = Math.min(...ts), t1 = Math.max(...ts, t0 + 1);
  const root = svg("svg", { viewBox: `0 0 ${W} ${H}`, preserveAspectRatio: "none", role: "img" });
  root.append(svg("line", { x1: 0, y1: H - pad, x2: W, y2: H - pad, class: "axis" }));
  for (const s of series) {
    const pts = s.values.filter((p) => p[1] !== null)
      .map((p) => `${((p[0] - t0) / (t1 - t0) * W).toFixed(1)},${(H - pad - p[1] / max * (H - 2 * pad)).toFixed(1)}`);
    if (pts.length) root.append(svg("polyline", { points: pts.join(" "), class: "series-" + s.name }));
  }
  const label = svg("text", { x: 4, y: 12 });
  label.textContent = "max " + (unit === "/s" ? rate(max) + "/s" : num(max));
  root.append(label);
  const keys = series.map((s) => el("span", { class: "key series-" + s.name }, s.label));
  const span = ts.length ? age(t1 - t0) : "";
  return el("div", { class: "chart" },
    el("div", { class: "chart-title" }, el("b", {}, title), ...keys, el("span", { class: "muted" }, span ? "last " + span : "")),
    root);
}

function groupCard(g, metricsSources) {
  const last = g.history.length ? g.history[g.history.length - 1] : null;
  const lagSeries = [{ name: "lag", label: "lag", values: g.history.map((p) => [p[0], p[1]]) }];
  const tput = [["processed", 2], ["duplicates", 3], ["dead_lettered", 4]].map(([name, i]) => ({
    name, label: name.replace("_", "-") + "/s", values: g.history.map((p) => [p[0], p[i]]) }));
  const rows = g.partitions.map((p) => el("tr", { "data-topic": p.topic, "data-partition": p.partition },
    el("td", {}, p.topic), el("td", { class: "num" }, p.partition),
    el("td", { class: "num" }, p.committed < 0 ? "none" : num(p.committed)),
    el("td", { class: "num" }, num(p.end)),
    el("td", { class: "num lag " + (p.lag === 0 ? "lag-zero" : "lag-some"), "data-lag": p.lag }, num(p.lag)),
    el("td", { class: "num" }, age(p.oldest_unprocessed_age_ms))));
  const noRates = metricsSources === 0 ? "no metrics source: pass --scrape host:port of the consumer's admin server" : null;
  // Routes of sinks declared in a file (idem_route_* metrics): one row each.
  const routes = (g.routes || []).map((r) => el("tr", { "data-route": r.route, class: r.paused ? "paused" : null },
    el("td", {}, r.route),
    el("td", { class: "num rate-applied" }, rate(r.applied_rate)),
    el("td", { class: "num" }, rate(r.duplicate_rate)),
    el("td", { class: "num" }, rate(r.dead_letter_rate)),
    el("td", { class: "num" }, r.call_latency_ms === null ? "–" : r.call_latency_ms.toFixed(1) + " ms"),
    el("td", { class: "num applied-total" }, num(r.applied)),
    el("td", { class: "num" }, num(r.dead_lettered)),
    el("td", { class: "route-state" }, r.paused ? "paused" : "running")));
  return el("div", { class: "group", "data-group": g.group },
    el("div", { class: "group-head" },
      el("h3", {}, g.group),
      el("span", { class: "badge " + g.state }, g.state),
      el("span", { class: "muted" }, g.members ? g.members + " member(s)" : ""),
      el("span", { class: "muted" }, g.topics.join(", "))),
    g.error ? el("p", { class: "status" }, g.error) : null,
    el("div", { class: "stats" },
      el("div", { class: "stat" }, el("b", { class: "lag-total", "data-lag": g.lag }, num(g.lag)), el("span", {}, "records behind")),
      el("div", { class: "stat" }, el("b", {}, age(g.oldest_unprocessed_age_ms)), el("span", {}, "oldest unprocessed event")),
      el("div", { class: "stat" }, el("b", { class: "rate-processed" }, rate(last && last[2])), el("span", {}, "processed/s")),
      el("div", { class: "stat" }, el("b", {}, rate(last && last[3])), el("span", {}, "duplicates/s")),
      el("div", { class: "stat" }, el("b", {}, rate(last && last[4])), el("span", {}, "dead-lettered/s")),
      g.counters ? el("div", { class: "stat" }, el("b", {}, num(g.counters.processed)), el("span", {}, "processed in total")) : null),
    el("div", { class: "charts" }, chart("Lag", lagSeries, ""), chart("Throughput", tput, "/s")),
    noRates ? el("p", { class: "muted" }, noRates) : null,
    routes.length ? el("table", { class: "grid small routes" },
      el("thead", {}, el("tr", {}, ...["Route", "Applied/s", "Duplicates/s", "Dead-lettered/s", "Call latency", "Applied", "Dead-lettered", "State"].map((h, i) => el("th", { class: i && i < 7 ? "num" : "" }, h)))),
      el("tbody", {}, ...routes)) : null,
    el("table", { class: "grid partitions" },
      el("thead", {}, el("tr", {}, ...["Topic", "Partition", "Committed", "End", "Lag", "Oldest unprocessed"].map((h, i) => el("th", { class: i ? "num" : "" }, h)))),
      el("tbody", {}, ...rows)));
}

async function refreshGroups() {
  let refresh = 2000;
  try {
    const o = await api("/api/overview");
    refresh = o.refresh_ms || refresh;
    const box = clear($("groups"));
    for (const g of o.groups) box.append(groupCard(g, o.metrics_sources));
    $("groups-empty").hidden = o.groups.length > 0;
    $("groups-sampled").textContent = "sampled " + new Date(o.sampled_at_ms).toLocaleTimeString() + ", every " + age(refresh);
    status(o.error || "");
  } catch (e) { status("overview: " + e.message); }
  if (current === "groups") again(refreshGroups, refresh);
}

// ---- dead letters --------------------------------------------------------------------
let replayEnabled = false;
let selected = null;      // {topic, partition, offset}
let dryRunDone = null;    // the letter the last successful dry run was for

async function loadTopics() {
  try {
    const t = await api("/api/dlq/topics");
    replayEnabled = t.replay_enabled;
    const sel = $("dlq-topic");
    const keep = sel.value;
    clear(sel);
    for (const name of t.topics) sel.append(el("option", { value: name }, name));
    if (t.topics.includes(keep)) sel.value = keep;
    if (!t.topics.length) { status("no dead-letter topic (no topic ends with " + t.suffix + ")"); return; }
    searchLetters();
  } catch (e) { status("dead-letter topics: " + e.message); }
}

function localMs(input) { return input.value ? String(new Date(input.value).getTime()) : ""; }

async function searchLetters() {
  const q = new URLSearchParams({ topic: $("dlq-topic").value });
  const add = (k, v) => { if (v) q.set(k, v); };
  add("reason", $("dlq-reason").value.trim());
  add("original_partition", $("dlq-partition").value);
  add("since_ms", localMs($("dlq-since")));
  add("until_ms", localMs($("dlq-until")));
  add("q", $("dlq-q").value.trim());
  try {
    const r = await api("/api/dlq/letters?" + q);
    $("dlq-count").textContent = num(r.matched) + " matching of " + num(r.read) + (r.truncated ? " (first " + r.letters.length + " shown)" : "");
    fill($("dlq-table").tBodies[0], r.letters.map((l) => {
      const row = el("tr", { "data-partition": l.partition, "data-offset": l.offset },
        el("td", { class: "mono" }, l.partition + "/" + l.offset),
        el("td", {}, when(l.dead_lettered_at_ms)),
        el("td", {}, l.reason || "–"),
        el("td", {}, l.group || "–"),
        el("td", { class: "mono" }, l.original.topic ? `${l.original.topic}[${l.original.partition}] offset ${l.original.offset}` : "–"),
        el("td", { class: "err" }, l.message),
        el("td", {}, el("button", { class: "link open", type: "button", onclick: () => openLetter(r.topic, l.partition, l.offset) }, "Open")));
      if (selected && selected.partition === l.partition && selected.offset === l.offset) row.classList.add("selected");
      return row;
    }));
    status("");
  } catch (e) { status("dead letters: " + e.message); }
}

function pretty(payload) {
  try { return JSON.stringify(JSON.parse(payload), null, 2); } catch (e) { return payload; }
}

async function openLetter(topic, partition, offset) {
  selected = { topic, partition, offset };
  dryRunDone = null;
  $("replay").disabled = true;
  $("dry-run-result").textContent = "";
  $("replay-result").textContent = "";
  for (const tr of $("dlq-table").tBodies[0].rows)
    tr.classList.toggle("selected", tr.dataset.partition === String(partition) && tr.dataset.offset === String(offset));
  try {
    const l = await api("/api/dlq/letter?" + new URLSearchParams({ topic, partition, offset }));
    $("letter").hidden = false;
    $("letter-title").textContent = `${topic} ${partition}/${offset}`;
    const meta = clear($("letter-meta"));
    const pair = (k, v) => meta.append(el("dt", {}, k), el("dd", {}, v));
    pair("Dead-lettered", when(l.dead_lettered_at_ms));
    pair("Reason", l.reason || "–");
    pair("Group", l.group || "–");
    pair("Original", l.original.topic ? `${l.original.topic} [${l.original.partition}] offset ${l.original.offset}` : "–");
    pair("Attempts", l.attempts === null ? "–" : l.attempts);
    pair("Event id", l.event_id || "none");
    pair("Event age", age(l.event_age_ms));
    pair("Key", l.key || "–");
    if (l.copies > 1) pair("Copies", l.copies);
    $("letter-message").textContent = l.message;
    fill($("letter-headers").tBodies[0], l.headers.map((h) => el("tr", {}, el("td", { class: "mono" }, h[0]), el("td", { class: "mono err" }, h[1]))));
    $("letter-payload").textContent = pretty(l.payload);
    $("letter-payload-size").textContent = num(l.payload_bytes) + " bytes" + (l.payload_truncated ? ", first 64 KiB shown" : "");
    $("dry-run").disabled = false;
  } catch (e) { status("dead letter: " + e.message); }
}

function replayBody(dryRun) {
  return JSON.stringify({ topic: selected.topic, partition: selected.partition, offset: selected.offset,
    dry_run: dryRun, operator: $("operator").value.trim() });
}

async function dryRun() {
  if (!selected) return;
  const out = $("dry-run-result");
  out.className = "result";
  out.textContent = "dry run…";
  try {
    const r = await api("/api/dlq/replay", { method: "POST", headers: { "Content-Type": "application/json" }, body: replayBody(true) });
    const ok = r.action === "replayed";
    out.className = "result " + (ok ? "ok" : "bad");
    out.textContent = ok
      ? `Dry run: would re-send 1 record to ${r.target_topic} (key ${r.key || "none"}, event ${r.event_id || "none"}, ${num(r.payload_bytes)} bytes, ${r.headers_kept} header(s) kept). Nothing was sent.`
      : `Dry run: would not replay (${r.action}): ${r.detail}`;
    dryRunDone = ok ? Object.assign({ target: r.target_topic, event: r.event_id }, selected) : null;
    $("replay").disabled = !ok || !replayEnabled;
    if (ok && !replayEnabled) out.textContent += " Replay is off: the console has no console.token.";
  } catch (e) { out.className = "result bad"; out.textContent = "dry run refused: " + e.message; }
}

function askReplay() {
  if (!dryRunDone) return;
  $("confirm-text").textContent = `Re-send ${dryRunDone.topic} ${dryRunDone.partition}/${dryRunDone.offset} (event ${dryRunDone.event || "none"}) to ${dryRunDone.target}, as ${$("operator").value.trim() || "(no operator name)"}.`;
  $("confirm-dialog").showModal();
}

async function doReplay() {
  const out = $("replay-result");
  out.className = "result";
  out.textContent = "replaying…";
  try {
    const r = await api("/api/dlq/replay", { method: "POST",
      headers: { "Content-Type": "application/json", "X-Idem-Token": $("token").value },
      body: replayBody(false) });
    const ok = r.action === "replayed";
    out.className = "result " + (ok ? "ok" : "bad");
    out.textContent = ok ? `Replayed to ${r.target_topic} (audit #${r.audit_id}).` : `Not replayed (${r.action}): ${r.detail} (audit #${r.audit_id})`;
  } catch (e) { out.className = "result bad"; out.textContent = "replay refused: " + e.message; }
}

// ---- dedup store -------------------------------------------------------------------
function metaList(node, pairs) {
  clear(node);
  for (const [k, v] of pairs) node.append(el("dt", {}, k), el("dd", {}, v));
}

async function refreshDedup() {
  try {
    const d = await api("/api/dedup");
    metaList($("dedup-horizon"), [["Retention", duration(d.horizon.retention_ms)], ["Safety margin", duration(d.horizon.safety_margin_ms)],
      ["Stale after", duration(d.horizon.stale_age_ms)], ["Stale before", when(d.now_ms - d.horizon.stale_age_ms)]]);
    const r = d.retention;
    if (r.error) metaList($("dedup-dropped"), [["Error", r.error]]);
    else metaList($("dedup-dropped"), r.dropped.dropped_at_ms ? [["Pass at", when(r.dropped.dropped_at_ms)],
      ["Dropped marks born before", when(r.dropped.born_before_ms)], ["Retention kept", duration(r.dropped.retention_ms)]] : [["Dropped", "nothing recorded yet"]]);
    const o = d.outbox;
    metaList($("dedup-outbox"), o.error ? [["Error", o.error]] : [["Backlog", num(o.backlog) + " row(s)"],
      ["Relay lag", o.oldest_unpublished_age_ms === null ? "none (all published)" : age(o.oldest_unpublished_age_ms)], ["Rejected", num(o.rejected)]]);
    const g = d.groups;
    fill($("dedup-groups").tBodies[0], g.error ? [el("tr", {}, el("td", { colspan: 5 }, g.error))] : g.rows.map((x) => el("tr", { "data-group": x.group },
      el("td", {}, x.group), el("td", { class: "num" }, num(x.rows)), el("td", {}, when(x.oldest_event_born_ms)),
      el("td", {}, when(x.newest_event_born_ms)), el("td", {}, when(x.last_processed_ms)))));
    fill($("dedup-declarations").tBodies[0], r.error ? [] : r.declarations.map((x) => el("tr", {},
      el("td", {}, x.group), el("td", {}, duration(x.retention_ms)), el("td", {}, when(x.renewed_at_ms)),
      el("td", {}, when(x.expires_at_ms)), el("td", {}, x.live ? "live" : "expired"), el("td", { class: "mono" }, x.declared_by))));
    const p = d.partitions;
    $("dedup-partitions-note").textContent = p.error ? p.error : p.partitioned ? "" : "processed_event is not partitioned (expired rows are deleted in batches).";
    fill($("dedup-partitions").tBodies[0], p.error ? [] : p.list.map((x) => el("tr", {}, el("td", { class: "mono" }, x.name),
      el("td", {}, x.is_default ? "DEFAULT" : when(x.from_ms)), el("td", {}, x.is_default ? "" : when(x.to_ms)))));
    $("dedup-sampled").textContent = "as of " + new Date(d.now_ms).toLocaleTimeString();
    status("");
  } catch (e) { status("dedup store: " + e.message); }
  if (current === "dedup") again(refreshDedup, 10000);
}

// ---- audit ---------------------------------------------------------------------------
async function refreshAudit() {
  try {
    const a = await api("/api/audit");
    fill($("audit-table").tBodies[0], a.entries.map((e) => el("tr", { "data-id": e.id, "data-outcome": e.outcome },
      el("td", { class: "num" }, e.id), el("td", {}, when(e.started_at_ms)), el("td", {}, e.operator),
      el("td", { class: "mono" }, e.remote_addr), el("td", { class: "mono" }, `${e.dlq_topic} ${e.dlq_partition}/${e.dlq_offset}`),
      el("td", { class: "mono" }, e.event_id || "–"), el("td", {}, e.target_topic), el("td", { class: "outcome" }, e.outcome),
      el("td", { class: "err" }, e.detail))));
    status("");
  } catch (e) { status("audit: " + e.message); }
  if (current === "audit") again(refreshAudit, 5000);
}

// ---- wiring --------------------------------------------------------------------------
document.addEventListener("DOMContentLoaded", () => {
  // The token stays in this tab only (sessionStorage), and goes out only as a header.
  $("token").value = sessionStorage.getItem("idem-token") || "";
  $("operator").value = localStorage.getItem("idem-operator") || "";
  $("token").addEventListener("change", () => sessionStorage.setItem("idem-token", $("token").value));
  $("operator").addEventListener("change", () => localStorage.setItem("idem-operator", $("operator").value));
  $("dlq-filters").addEventListener("submit", (ev) => { ev.preventDefault(); searchLetters(); });
  $("dlq-topic").addEventListener("change", searchLetters);
  $("dry-run").addEventListener("click", dryRun);
  $("replay").addEventListener("click", askReplay);
  $("confirm-dialog").addEventListener("close", () => { if ($("confirm-dialog").returnValue === "replay") doReplay(); });
  document.addEventListener("visibilitychange", () => { if (document.visibilityState === "visible") show(); });
  window.addEventListener("hashchange", show);
  show();
});
