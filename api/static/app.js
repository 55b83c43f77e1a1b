// pulsegraph dashboard: live from /v1/stream (or polling when reads need a token), charts in hand-written SVG.
"use strict";

const HISTORY_EPOCHS = 300;  // epochs kept for the charts: five minutes at the default 1 s interval
const TOP_K = 20;
const POLL_MS = 1000;
const STALE_MS = 10000;      // no epoch for this long while connected: check the API is still there

const state = {
  epochs: [],                // epoch objects, oldest first
  token: sessionStorage.getItem("pulsegraph-token") || "",
  vertex: null,              // the open vertex
  stream: null,
  lastSeen: 0,
  failing: false,
};

const $ = (id) => document.getElementById(id);
const SVG = "http://www.w3.org/2000/svg";
const fmt = new Intl.NumberFormat("en-US");
const fmt1 = new Intl.NumberFormat("en-US", { maximumFractionDigits: 1 });

class HttpError extends Error {
  constructor(status, code, message) { super(message); this.status = status; this.code = code; }
}

async function api(path) {
  const headers = state.token ? { Authorization: "Bearer " + state.token } : {};
  let r;
  try {
    r = await fetch(path, { headers, cache: "no-store" });
  } catch (e) {
    throw new HttpError(0, "unreachable", "the API does not answer");
  }
  if (!r.ok) {
    let code = "http_" + r.status, message = r.statusText;
    try { const b = await r.json(); code = b.error.code; message = b.error.message; } catch (_) { /* not our error body */ }
    throw new HttpError(r.status, code, message);
  }
  return r.json();
}

// ---- banner ---------------------------------------------------------------------------------
function showError(err) {
  state.failing = true;
  $("live-dot").className = "pulse down";
  const needsToken = err.status === 401 || err.status === 403;
  $("banner-text").textContent = needsToken
    ? "This server needs an API token for reads."
    : err.status === 0 ? "The API is down or unreachable — retrying…" : `API error ${err.status}: ${err.message}`;
  $("token-form").hidden = !needsToken;
  $("banner").hidden = false;
}

function clearError() {
  if (!state.failing) return;
  state.failing = false;
  $("banner").hidden = true;
}

// ---- charts ---------------------------------------------------------------------------------
function el(name, attrs, parent) {
  const e = document.createElementNS(SVG, name);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  if (parent) parent.appendChild(e);
  return e;
}

function niceMax(v) {
  if (!(v > 0)) return 1;
  const p = Math.pow(10, Math.floor(Math.log10(v)));
  for (const m of [1, 2, 2.5, 5, 10]) if (m * p >= v) return m * p;
  return 10 * p;
}

function shortNum(v) {
  if (Math.abs(v) >= 1e6) return fmt1.format(v / 1e6) + "M";
  if (Math.abs(v) >= 1e4) return fmt1.format(v / 1e3) + "k";
  return fmt1.format(v);
}

// series: [{points: [[x, y]...]}]; opts: {invert: lower y drawn higher (ranks), area: fill under the first line}
function lineChart(svg, series, opts = {}) {
  const w = Math.max(svg.clientWidth, 200), h = Math.max(svg.clientHeight, 100);
  svg.setAttribute("viewBox", `0 0 ${w} ${h}`);
  svg.replaceChildren();
  const pad = { l: 52, r: 12, t: 10, b: 22 };
  const pts = series.flatMap((s) => s.points);
  if (pts.length < 2) {
    el("text", { x: w / 2, y: h / 2, "text-anchor": "middle", class: "empty" }, svg).textContent = opts.empty || "collecting data…";
    return;
  }
  let x0 = Math.min(...pts.map((p) => p[0])), x1 = Math.max(...pts.map((p) => p[0]));
  if (x1 === x0) x1 = x0 + 1;
  let y0 = 0, y1 = niceMax(Math.max(...pts.map((p) => p[1])));
  if (opts.invert) {
    // Ranks: best at the top, and a little room around the range so a steady rank is not glued to an edge.
    const lo = Math.min(...pts.map((p) => p[1])), hi = Math.max(...pts.map((p) => p[1]));
    const padR = Math.max(2, Math.ceil((hi - lo) * 0.15));
    y0 = Math.max(1, lo - padR);
    y1 = hi + padR;
  }
  const X = (x) => pad.l + ((x - x0) / (x1 - x0)) * (w - pad.l - pad.r);
  const Y = (y) => {
    const f = (y - y0) / (y1 - y0);
    return opts.invert ? pad.t + f * (h - pad.t - pad.b) : h - pad.b - f * (h - pad.t - pad.b);
  };
  const ticks = [];
  for (let i = 0; i <= 4; i++) {
    const v = y0 + ((y1 - y0) * i) / 4;
    const t = opts.invert ? Math.round(v) : v;  // ranks are whole numbers: no tick twice
    if (!ticks.includes(t)) ticks.push(t);
  }
  for (const v of ticks) {
    const y = Y(v);
    el("line", { x1: pad.l, x2: w - pad.r, y1: y, y2: y, class: "grid" }, svg);
    el("text", { x: pad.l - 6, y: y + 4, "text-anchor": "end", class: "axis-label" }, svg).textContent = shortNum(v);
  }
  const xl = opts.xLabel || ((x) => String(x));
  el("text", { x: pad.l, y: h - 6, class: "axis-label" }, svg).textContent = xl(x0);
  el("text", { x: w - pad.r, y: h - 6, "text-anchor": "end", class: "axis-label" }, svg).textContent = xl(x1);
  series.forEach((s, i) => {
    if (!s.points.length) return;
    const d = s.points.map((p, j) => `${j ? "L" : "M"}${X(p[0]).toFixed(1)},${Y(p[1]).toFixed(1)}`).join("");
    if (opts.area && i === 0) {
      const base = h - pad.b;
      el("path", { d: `${d}L${X(s.points.at(-1)[0]).toFixed(1)},${base}L${X(s.points[0][0]).toFixed(1)},${base}Z`, class: "area" }, svg);
    }
    el("path", { d, class: `line l${i}` }, svg);
    if (opts.dots && s.points.length < 60) {
      for (const p of s.points) el("circle", { cx: X(p[0]), cy: Y(p[1]), r: 2.5, class: "dot" }, svg);
    }
  });
}

function ago(seconds) {
  if (seconds < 1) return "now";
  return seconds < 120 ? `-${Math.round(seconds)} s` : `-${fmt1.format(seconds / 60)} min`;
}

// A window's length as the flag would say it (600 -> "10 m").
function duration(seconds) {
  for (const [unit, size] of [["d", 86400], ["h", 3600], ["m", 60], ["s", 1]]) {
    if (seconds >= size && seconds % size === 0) return `${fmt.format(seconds / size)} ${unit}`;
  }
  return seconds >= 1 ? `${fmt1.format(seconds)} s` : `${fmt.format(Math.round(seconds * 1000))} ms`;
}

// The window card: shown only while the newest epoch has one (--window).
function renderWindow(last) {
  const on = last.window !== null && last.window !== undefined;
  $("kpi-window").hidden = !on;
  if (!on) return;
  $("k-window").textContent = duration(last.window);
  const wm = last.watermark === null || last.watermark === undefined
    ? "–" : new Date(last.watermark * 1000).toISOString().replace("T", " ").replace(/\.\d+Z$/, " UTC");
  $("k-watermark").textContent = `watermark ${wm}`;
}

function renderCharts() {
  const es = state.epochs;
  const t = (e) => Date.parse(e.committed_at) / 1000;
  const now = es.length ? t(es.at(-1)) : 0;
  const rate = [];
  for (let i = 1; i < es.length; i++) {
    const dt = t(es[i]) - t(es[i - 1]);
    if (dt > 0 && es[i].epoch === es[i - 1].epoch + 1) rate.push([t(es[i]), (es[i].records - es[i - 1].records) / dt]);
  }
  const xLabel = (x) => ago(now - x);
  lineChart($("chart-rate"), [{ points: rate }], { area: true, xLabel });
  lineChart(
    $("chart-timeliness"),
    [{ points: es.map((e) => [t(e), e.timeliness_ms.p50]) }, { points: es.map((e) => [t(e), e.timeliness_ms.p99]) }],
    { xLabel },
  );
  const last = es.at(-1);
  if (!last) return;
  $("epoch").textContent = fmt.format(last.epoch);
  $("k-records").textContent = fmt.format(last.records);
  $("k-vertices").textContent = fmt.format(last.vertices);
  $("k-edges").textContent = fmt.format(last.edges);
  $("k-rate").textContent = rate.length ? fmt.format(Math.round(rate.at(-1)[1])) : "–";
  $("k-timeliness").textContent = `${fmt.format(Math.round(last.timeliness_ms.p50))} / ${fmt.format(Math.round(last.timeliness_ms.p99))}`;
  renderWindow(last);
}

// ---- top 20 ---------------------------------------------------------------------------------
function vertexLink(name) {
  const span = document.createElement("span");
  span.className = "vname";
  span.textContent = name;
  return span;
}

function cell(row, content, cls) {
  const td = row.insertCell();
  if (cls) td.className = cls;
  if (content instanceof Node) td.appendChild(content); else td.textContent = content;
  return td;
}

async function refreshTop() {
  const body = await api(`/v1/rank/top?k=${TOP_K}`);
  $("top-epoch").textContent = `epoch ${fmt.format(body.epoch)}`;
  const tbody = $("top-body");
  const rows = [];
  for (const item of body.items) {
    const tr = document.createElement("tr");
    tr.dataset.vertex = item.vertex;
    cell(tr, String(item.rank));
    cell(tr, vertexLink(item.vertex));
    cell(tr, item.score.toExponential(3), "num");
    const move = document.createElement("span");
    if (item.previous_rank == null) { move.textContent = "new"; move.className = "new"; }
    else if (item.previous_rank > item.rank) { move.textContent = `▲ ${item.previous_rank - item.rank}`; move.className = "up"; }
    else if (item.previous_rank < item.rank) { move.textContent = `▼ ${item.rank - item.previous_rank}`; move.className = "down"; }
    else { move.textContent = "–"; move.className = "muted"; }
    cell(tr, move, "num");
    tr.addEventListener("click", () => openVertex(item.vertex));
    rows.push(tr);
  }
  tbody.replaceChildren(...rows);
}

// ---- controversial topics ----------------------------------------------------------------------
function sparkline(curve) {
  // p(1..8) as a small line scaled to its peak (persistence compares the curve with its peak); gaps: nobody reached k.
  const w = 120, h = 28, svg = el("svg", { class: "spark", width: w, height: h, viewBox: `0 0 ${w} ${h}` });
  const peak = Math.max(1e-9, ...curve.filter((p) => p != null));
  el("title", {}, svg).textContent = "p(1..8): " + curve.map((p) => (p == null ? "–" : p.toFixed(3))).join(" ");
  el("line", { class: "base", x1: 0, y1: h - 1, x2: w, y2: h - 1 }, svg);
  let d = "", pen = false;
  curve.forEach((p, i) => {
    const x = 4 + i * ((w - 8) / 7);
    if (p == null) { pen = false; return; }
    const y = h - 2 - (p / peak) * (h - 4);
    d += `${pen ? "L" : "M"}${x.toFixed(1)},${y.toFixed(1)}`;
    pen = true;
    el("circle", { cx: x.toFixed(1), cy: y.toFixed(1), r: 1.8 }, svg);
  });
  if (d) el("path", { class: "line", d }, svg);
  return svg;
}

async function refreshTopics() {
  let body;
  try { body = await api("/v1/topics?sort=controversy&k=10"); }
  catch (err) { if (err.status === 404) return; throw err; }
  const rows = body.items.map((t) => {
    const tr = document.createElement("tr");
    tr.dataset.hashtag = t.hashtag;
    cell(tr, vertexLink(t.hashtag));
    cell(tr, fmt.format(t.usage), "num");
    cell(tr, fmt.format(t.users), "num");
    cell(tr, t.persistence.toFixed(3), "num");
    cell(tr, sparkline(t.curve));
    tr.addEventListener("click", () => openVertex(t.hashtag));
    return tr;
  });
  if (rows.length) $("topics-body").replaceChildren(...rows);
}

// ---- alerts --------------------------------------------------------------------------------------
const ALERTS_SHOWN = 20;
const ALERT_CLASS = { entered: "up", rose: "up", reached: "up", rose_above: "up", left: "down", fell: "down", fell_below: "down" };

async function refreshAlerts() {
  const [page, rules] = await Promise.all([api(`/v1/alerts?limit=${ALERTS_SHOWN}`), api("/v1/alerts/rules")]);
  $("alerts-info").textContent = `${rules.items.length} rule${rules.items.length === 1 ? "" : "s"}` +
    (rules.items.length ? "" : " — add one with POST /v1/alerts/rules (see the API docs)");
  // A page is oldest first and one epoch's alerts come whole, most notable first: newest epoch first, each
  // epoch's own order kept (the sort is stable).
  const newest = page.items.slice().sort((a, b) => b.epoch - a.epoch).slice(0, ALERTS_SHOWN);
  if (!newest.length) return;
  $("alerts-body").replaceChildren(...newest.map((a) => {
    const tr = document.createElement("tr");
    tr.dataset.rule = String(a.rule);
    tr.dataset.epoch = String(a.epoch);
    cell(tr, fmt.format(a.epoch), "num");
    const kind = document.createElement("span");
    kind.textContent = `#${a.rule} ${a.kind}`;
    kind.className = "muted";
    cell(tr, kind);
    const what = document.createElement("span");
    what.textContent = a.message;
    what.className = ALERT_CLASS[a.event] || "";
    cell(tr, what, "alert");
    tr.addEventListener("click", () => openVertex(a.subject));  // a vertex, a component's representative, or a hashtag: all vertices
    return tr;
  }));
}

// ---- path finder -------------------------------------------------------------------------------
function drawChain(path, via) {
  const svg = $("path-chain");
  svg.replaceChildren();
  const n = path.length, w = 600, y = 40;
  const step = n > 1 ? (w - 60) / (n - 1) : 0;
  const xs = path.map((_, i) => (n > 1 ? 30 + i * step : w / 2));
  for (let i = 1; i < n; i++) el("line", { x1: xs[i - 1], y1: y, x2: xs[i], y2: y }, svg);
  path.forEach((name, i) => {
    const g = el("g", { "data-vertex": name }, svg);
    el("circle", { cx: xs[i], cy: y, r: 9, class: name === via ? "via" : "" }, g);
    const t = el("text", { x: xs[i], y: i % 2 ? y + 30 : y - 16 }, g);
    t.textContent = name.length > 14 ? name.slice(0, 13) + "…" : name;
    g.addEventListener("click", () => openVertex(name));
  });
  svg.toggleAttribute("hidden", false);  // an SVG element has no `hidden` property, only the attribute
}

async function findPath(ev) {
  if (ev) ev.preventDefault();
  const src = $("path-src").value.trim(), dst = $("path-dst").value.trim();
  if (!src || !dst) return;
  const info = $("path-info");
  try {
    const b = await api(`/v1/paths?src=${encodeURIComponent(src)}&dst=${encodeURIComponent(dst)}`);
    if (b.estimate == null) {
      $("path-chain").toggleAttribute("hidden", true);
      info.textContent = `No landmark connects ${src} to ${dst} in epoch ${fmt.format(b.epoch)}` +
        (b.distance != null ? ` (a direct search found ${b.distance} hops).` : ".");
      return;
    }
    drawChain(b.path, b.via);
    info.textContent = `${b.estimate} hop${b.estimate === 1 ? "" : "s"}` + (b.via ? ` via ${b.via}` : "") +
      (b.exact ? " — exact (confirmed by BFS)" : b.distance != null ? ` — the true distance is ${b.distance}` : " — an upper bound") +
      `, epoch ${fmt.format(b.epoch)}`;
  } catch (err) {
    $("path-chain").toggleAttribute("hidden", true);
    info.textContent = err.status === 404 ? err.message : `path finder: ${err.message}`;
  }
}

// ---- vertex panel ---------------------------------------------------------------------------
function neighborRows(tbody, items) {
  if (!items.length) {
    const tr = document.createElement("tr");
    cell(tr, "none", "muted");
    tbody.replaceChildren(tr);
    return;
  }
  tbody.replaceChildren(...items.map((n) => {
    const tr = document.createElement("tr");
    cell(tr, vertexLink(n.vertex));
    cell(tr, n.type, "muted");
    cell(tr, `×${n.multiplicity}`, "num");
    cell(tr, fmt1.format(n.weight), "num");
    tr.addEventListener("click", () => openVertex(n.vertex));
    return tr;
  }));
}

async function refreshVertex() {
  const name = state.vertex;
  if (!name) return;
  const id = encodeURIComponent(name);
  const [v, hist, out, inn] = await Promise.all([
    api(`/v1/vertices/${id}`),
    api(`/v1/vertices/${id}/history?limit=${HISTORY_EPOCHS}`),
    api(`/v1/vertices/${id}/neighbors?direction=out&limit=10`),
    api(`/v1/vertices/${id}/neighbors?direction=in&limit=10`),
  ]);
  if (name !== state.vertex) return;  // another vertex was opened meanwhile
  $("vertex-title").textContent = name;
  const last = hist.items.at(-1);
  const facts = [
    ["rank", last ? fmt.format(last.rank) : "–"],
    ["pagerank", v.scores.pagerank != null ? v.scores.pagerank.toExponential(3) : "–"],
    ["in-degree", fmt.format(v.in_degree)],
    ["out-degree", fmt.format(v.out_degree)],
    ["epochs seen", fmt.format(hist.items.length)],
  ];
  $("vertex-facts").replaceChildren(...facts.map(([k, val]) => {
    const d = document.createElement("div");
    const b = document.createElement("b");
    b.textContent = val;
    d.append(b, k);
    return d;
  }));
  lineChart($("chart-history"), [{ points: hist.items.map((p) => [p.epoch, p.rank]) }], {
    invert: true, area: true, dots: true, xLabel: (x) => `epoch ${Math.round(x)}`, empty: "one epoch so far",
  });
  neighborRows($("nb-out"), out.items);
  neighborRows($("nb-in"), inn.items);
  $("vertex-hint").hidden = true;
  $("vertex-body").hidden = false;
}

async function openVertex(name) {
  state.vertex = name;
  $("suggestions").hidden = true;
  $("search").value = name;
  try {
    await refreshVertex();
  } catch (err) {
    if (err.status === 404) {
      $("vertex-title").textContent = name;
      $("vertex-hint").textContent = err.message;
      $("vertex-hint").hidden = false;
      $("vertex-body").hidden = true;
    } else showError(err);
  }
}

// ---- search ---------------------------------------------------------------------------------
let searchTimer = null;
let active = -1;

function setupSearch() {
  const input = $("search"), list = $("suggestions");
  input.addEventListener("input", () => {
    clearTimeout(searchTimer);
    const prefix = input.value.trim();
    if (!prefix) { list.hidden = true; return; }
    searchTimer = setTimeout(async () => {
      try {
        const r = await api(`/v1/search?prefix=${encodeURIComponent(prefix)}&limit=12`);
        active = -1;
        list.replaceChildren(...r.items.map((name) => {
          const li = document.createElement("li");
          li.textContent = name;
          li.addEventListener("mousedown", (e) => { e.preventDefault(); openVertex(name); });
          return li;
        }));
        list.hidden = r.items.length === 0;
      } catch (err) { if (err.status !== 404) showError(err); }
    }, 120);
  });
  input.addEventListener("keydown", (e) => {
    const items = [...list.children];
    if (e.key === "ArrowDown" || e.key === "ArrowUp") {
      e.preventDefault();
      active = Math.max(0, Math.min(items.length - 1, active + (e.key === "ArrowDown" ? 1 : -1)));
      items.forEach((li, i) => li.classList.toggle("active", i === active));
    } else if (e.key === "Enter") {
      e.preventDefault();
      const pick = items[active] || items.find((li) => li.textContent === input.value.trim()) || items[0];
      openVertex(pick ? pick.textContent : input.value.trim());
    } else if (e.key === "Escape") list.hidden = true;
  });
  input.addEventListener("blur", () => setTimeout(() => { list.hidden = true; }, 150));
}

// ---- live updates ---------------------------------------------------------------------------
function addEpoch(e) {
  const last = state.epochs.at(-1);
  if (last && e.epoch <= last.epoch) return false;
  state.epochs.push(e);
  if (state.epochs.length > HISTORY_EPOCHS) state.epochs.shift();
  return true;
}

let refreshing = false;
async function onEpoch(e) {
  state.lastSeen = Date.now();
  clearError();
  $("live-dot").className = "pulse live";
  if (!addEpoch(e)) return;
  renderCharts();
  if (refreshing) return;  // a slow refresh is never stacked: the next epoch catches up
  refreshing = true;
  try {
    await Promise.all([refreshTop(), refreshVertex(), refreshTopics(), refreshAlerts()]);
  } catch (err) { showError(err); }
  finally { refreshing = false; }
}

function openStream() {
  if (state.stream) state.stream.close();
  const es = new EventSource("/v1/stream");
  es.onmessage = (m) => onEpoch(JSON.parse(m.data));
  es.onerror = () => {
    // EventSource reconnects by itself; check why it dropped so the banner says something useful.
    api("/health").catch(showError).then(() => api("/v1/epochs/latest").catch((err) => {
      if (err.status === 401 || err.status === 403) { es.close(); state.stream = null; showError(err); }
      else if (err.code !== "no_epoch") showError(err);
    }));
  };
  state.stream = es;
}

async function poll() {
  try {
    onEpoch(await api("/v1/epochs/latest"));
  } catch (err) {
    if (err.code === "no_epoch") { clearError(); return; }
    showError(err);
  }
}

async function load() {
  try {
    const page = await api(`/v1/epochs?limit=${HISTORY_EPOCHS}`);
    state.epochs = [];
    page.items.reverse().forEach(addEpoch);
    renderCharts();
    if (state.epochs.length) await Promise.all([refreshTop(), refreshAlerts()]);
    clearError();
  } catch (err) {
    showError(err);
  }
}

async function start() {
  setupSearch();
  $("path-form").addEventListener("submit", findPath);
  $("token-form").addEventListener("submit", (e) => {
    e.preventDefault();
    state.token = $("token").value.trim();
    sessionStorage.setItem("pulsegraph-token", state.token);
    if (state.stream) { state.stream.close(); state.stream = null; }
    clearError();
    load();
  });
  await load();
  if (!state.token) openStream();  // EventSource cannot send a token: with one, poll instead
  setInterval(() => {
    if (state.token || !state.stream || Date.now() - state.lastSeen > STALE_MS) poll();
  }, POLL_MS);
  window.addEventListener("resize", () => { renderCharts(); refreshVertex().catch(() => {}); });
}

let started = false;
document.addEventListener("DOMContentLoaded", () => { if (!started) { started = true; start(); } });
