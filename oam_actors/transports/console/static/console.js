// The operator's console: one WebSocket (/console/live) brings the whole view, then a message per
// tick; the page redraws from the latest message. Text is always set with textContent (client-chosen
// strings such as method names are never HTML). States carry a symbol and a word, never colour alone.
"use strict";

const KNOWN_MODEL = new Set(["availability", "statistics"]);
const KNOWN_STATISTICS = new Set([
  "devices", "ready", "cooling", "dead", "queued", "inFlight", "stepsOk", "stepsFailed", "rerouted",
  "quotaEventsAbsorbed", "quotaEventsSurfaced", "queueWait", "queuedByPriority", "elapsedSeconds", "coalescing",
]);
const STATES = { ready: "● ready", cooling: "◐ cooling", dead: "✕ dead" };
const PRIORITIES = ["dialogue", "decision", "background"];

let points = [];
let windowSeconds = 600;
let lastUpdate = null;
let retryDelay = 1000;

// --- small DOM helpers ------------------------------------------------------------------------------

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value !== undefined && value !== null) node.setAttribute(name, value);
  }
  for (const child of children) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : String(child));
  }
  return node;
}

function fill(id, ...children) {
  const node = document.getElementById(id);
  node.replaceChildren(...children.filter((c) => c !== null && c !== undefined));
  return node;
}

function table(headers, rows, attrs) {
  const head = el("thead", {}, el("tr", {}, ...headers.map((h) => el("th", { scope: "col" }, h))));
  const body = el("tbody", {}, ...rows);
  return el("table", attrs || {}, head, body);
}

function cell(key, value, text) {
  return el("td", { "data-key": key, "data-value": value === null || value === undefined ? "" : String(value) },
    text === undefined ? show(value) : text);
}

function figure(key, label, value, text) {
  return el("div", { class: "figure", "data-key": key, "data-value": String(value) },
    el("dt", {}, label), el("dd", {}, text === undefined ? show(value) : text));
}

function show(value) {
  if (value === null || value === undefined) return "—";
  if (typeof value === "number") return Number.isInteger(value) ? value.toLocaleString("en") : String(Number(value.toFixed(3)));
  if (typeof value === "boolean") return value ? "yes" : "no";
  return String(value);
}

function ms(value) {
  if (value === null || value === undefined) return "—";
  return value >= 1000 ? (value / 1000).toFixed(1) + " s" : Math.round(value) + " ms";
}

function percent(share) {
  return share === null || share === undefined ? "—" : (100 * share).toFixed(1) + " %";
}

function meter(share, label) {
  // A bar with its number written beside it: the length is a help, the text the value.
  const width = Math.max(0, Math.min(1, share || 0)) * 100;
  return el("span", { class: "meter" },
    el("span", { class: "bar", "aria-hidden": "true" }, el("span", { class: "fill", style: null, "data-width": width.toFixed(1) })),
    el("span", { class: "meter-text" }, label));
}

function sizeMeters(root) {
  // Widths set through CSSOM: the page's Content-Security-Policy forbids inline style attributes.
  for (const fillNode of root.querySelectorAll(".fill[data-width]")) fillNode.style.width = fillNode.dataset.width + "%";
}

function humanize(key) {
  return String(key).replace(/([a-z0-9])([A-Z])/g, "$1 $2").replace(/[_-]+/g, " ").toLowerCase();
}

// --- generic rendering of sections the console does not know ----------------------------------

function generic(value, depth) {
  depth = depth || 0;
  if (value === null || value === undefined || typeof value !== "object") return document.createTextNode(show(value));
  if (Array.isArray(value)) {
    if (value.length && value.every((v) => v && typeof v === "object" && !Array.isArray(v))) {
      const columns = [...new Set(value.flatMap((v) => Object.keys(v)))];
      const rows = value.map((v) => el("tr", {}, ...columns.map((c) => el("td", { "data-key": c }, depth > 2 ? show(JSON.stringify(v[c])) : generic(v[c], depth + 1)))));
      return table(columns.map(humanize), rows, { class: "generic" });
    }
    return document.createTextNode(value.map((v) => (typeof v === "object" ? JSON.stringify(v) : show(v))).join(", ") || "—");
  }
  const rows = Object.entries(value).map(([k, v]) =>
    el("tr", { "data-key": k }, el("th", { scope: "row" }, humanize(k)), el("td", {}, depth > 2 ? JSON.stringify(v) : generic(v, depth + 1))));
  return rows.length ? el("table", { class: "kv generic" }, el("tbody", {}, ...rows)) : document.createTextNode("—");
}

function genericPanel(title, value, key) {
  return el("section", { class: "panel", "data-section": key }, el("h2", {}, title[0].toUpperCase() + title.slice(1)), generic(value));
}

// --- sections ----------------------------------------------------------------------------------------

const PANELS = [
  ["queues", "Queues by priority", "queue-table"],
  ["coalescing", "Coalescing", "coalescing-body"],
  ["connections", "Connections and tenants", "connections-body"],
  ["objects", "Objects by kind", "objects-body"],
];

function makePanels() {
  const extra = document.getElementById("extra");
  for (const [id, title, body] of PANELS) {
    extra.before(el("section", { id, class: "panel", "aria-labelledby": id + "-title" },
      el("h2", { id: id + "-title" }, title), el("div", { id: body })));
  }
}

function renderBackends(model) {
  if (!model) {
    fill("availability", "No backend statistics: the system model reports none (a scripted model, or none).");
    fill("pool"); fill("devices");
    return;
  }
  if (model.error) {
    fill("availability", "✕ " + model.error);
    fill("pool"); fill("devices");
    return;
  }
  const availability = model.availability || {};
  fill("availability", el("span", { "data-key": "available", "data-value": String(!!availability.available) },
    availability.available ? "● available" : "✕ unavailable"), " — ", availability.detail || availability.reason || availability.status || "");
  const stats = model.statistics;
  if (!stats || !Array.isArray(stats.devices)) {
    fill("pool");
    fill("devices", stats ? generic(stats) : "—");
    return;
  }
  fill("pool",
    figure("devices", "devices", stats.devices.length),
    figure("ready", "ready", stats.ready),
    figure("cooling", "cooling", stats.cooling),
    figure("dead", "dead", stats.dead),
    figure("inFlight", "generating", stats.inFlight),
    figure("queued", "queued", stats.queued),
    figure("stepsOk", "steps ok", stats.stepsOk),
    figure("stepsFailed", "steps failed", stats.stepsFailed),
    figure("rerouted", "rerouted", stats.rerouted),
    figure("quotaEventsAbsorbed", "quota refusals absorbed", stats.quotaEventsAbsorbed),
    figure("quotaEventsSurfaced", "steps given up (queue time ran out)", stats.quotaEventsSurfaced));
  const rows = stats.devices.map((d) => {
    const limit = d.requestsLimit;
    const used = d.requestsInWindow;
    const window = limit ? meter(used / limit, `${show(used)} of ${show(limit)}`) : `${show(used)} of —`;
    const cooling = d.state === "cooling" && d.coolingSeconds !== null ? ` ${d.coolingSeconds.toFixed(1)} s` : "";
    const state = el("span", { class: "state state-" + d.state }, (STATES[d.state] || "? " + d.state) + cooling);
    return el("tr", { "data-device": d.name },
      el("th", { scope: "row", title: d.url }, d.name),
      el("td", { "data-key": "state", "data-value": d.state }, state, d.reason ? el("span", { class: "reason" }, " " + d.reason) : null),
      el("td", { "data-key": "window", "data-value": `${used}/${limit}` }, window),
      cell("inFlight", d.inFlight), cell("queued", d.queued), cell("ok", d.ok), cell("busy", d.busy),
      cell("errors", d.errors), cell("rejected", d.rejected),
      el("td", { "data-key": "utilisation", "data-value": d.utilisation }, meter(d.utilisation, percent(d.utilisation))));
  });
  sizeMeters(fill("devices", table(
    ["device", "state", "quota window (used of learned)", "in flight", "queued", "ok", "busy", "errors", "rejected", "generating"],
    rows, { id: "device-table" })));
}

function renderQueues(stats) {
  if (!stats || !stats.queueWait) {
    fill("queue-table", "—");
    return;
  }
  const queued = stats.queuedByPriority || {};
  const names = [...new Set([...PRIORITIES.filter((p) => p in stats.queueWait || p in queued), ...Object.keys(stats.queueWait)])];
  const rows = names.map((p) => {
    const w = stats.queueWait[p] || {};
    return el("tr", { "data-priority": p }, el("th", { scope: "row" }, p), cell("queued", queued[p]),
      cell("admitted", w.count), el("td", {}, ms(w.p50Ms)), el("td", {}, ms(w.p90Ms)), el("td", {}, ms(w.p99Ms)), el("td", {}, ms(w.maxMs)));
  });
  fill("queue-table", table(["priority", "waiting", "admitted", "p50", "p90", "p99", "max"], rows, { class: "compact" }),
    el("p", { class: "note" }, "Waiting: model steps queued now. p50 … max: how long the steps admitted since the start waited."));
}

function renderCoalescing(stats) {
  const c = stats && stats.coalescing;
  if (!c) {
    fill("coalescing-body", "Not coalesced (or no backend statistics).");
    return;
  }
  const first = ["itemsPerGeneration", "items", "generations"];
  const keys = [...first.filter((k) => k in c), ...Object.keys(c).filter((k) => !first.includes(k))];
  fill("coalescing-body",
    el("dl", { class: "figures" }, ...keys.map((k) => figure(k, humanize(k), c[k]))),
    el("p", { class: "note" }, "Items are barks, decisions and talk steps that shared a generation; passthrough went alone."));
}

function renderConnections(server) {
  const transports = Object.entries(server.connections || {});
  const open = transports.reduce((sum, [, n]) => sum + n, 0);
  const tenants = Object.entries(server.tenants || {});
  const refused = Object.entries(server.refused || {});
  fill("connections-body",
    el("dl", { class: "figures" },
      figure("connections", "open", open, `${open} of ${server.maxConnections}`),
      figure("viewers", "console viewers", server.viewers)),
    table(["transport", "open"], transports.length
      ? transports.map(([t, n]) => el("tr", { "data-transport": t }, el("th", { scope: "row" }, t), cell("open", n)))
      : [el("tr", {}, el("td", { colspan: "2" }, "none yet"))]),
    table(["tenant", "connections"], tenants.length
      ? tenants.map(([t, n]) => el("tr", { "data-tenant": t }, el("th", { scope: "row" }, t), cell("open", n)))
      : [el("tr", {}, el("td", { colspan: "2" }, "no protocol connections"))]),
    refused.length ? table(["refused (transport, reason)", "count"], refused.map(([k, n]) => el("tr", {}, el("th", { scope: "row" }, k.replace(",", " · ")), cell("refused", n)))) : null);
}

function renderObjects(server) {
  const kinds = Object.entries(server.objects || {});
  fill("objects-body", kinds.length
    ? table(["kind", "live", "queued operations"], kinds.map(([kind, c]) =>
      el("tr", { "data-kind": kind }, el("th", { scope: "row" }, kind), cell("live", c.live), cell("queued", c.queued))))
    : "No objects yet.");
}

function sparkline(label, key, values, unit) {
  const width = 300, height = 36;
  const numbers = values.map((v) => (v === null || v === undefined ? 0 : v));
  if (numbers.length < 2) numbers.unshift(...Array(2 - numbers.length).fill(0)); // a flat line until there is data
  const peak = Math.max(...numbers);
  const top = Math.max(1, peak);
  const last = numbers[numbers.length - 1];
  const svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
  svg.setAttribute("viewBox", `0 0 ${width} ${height}`);
  svg.setAttribute("preserveAspectRatio", "none");
  svg.setAttribute("role", "img");
  svg.setAttribute("aria-label", `${label}: ${show(last)} ${unit} now, peak ${show(peak)}`);
  const line = document.createElementNS("http://www.w3.org/2000/svg", "polyline");
  const step = width / (numbers.length - 1);
  line.setAttribute("points", numbers.map((v, i) => `${(i * step).toFixed(1)},${(height - 2 - (v / top) * (height - 4)).toFixed(1)}`).join(" "));
  svg.append(line);
  return el("div", { class: "spark", "data-key": key, "data-value": String(last) },
    el("div", { class: "spark-label" }, el("span", {}, label), el("strong", {}, `${show(last)} ${unit}`), el("span", { class: "muted" }, `peak ${show(peak)}`)),
    svg);
}

function renderTraffic(totals) {
  const perSecond = (key) => points.map((p) => (p.seconds > 0 ? Math.round((10 * p[key]) / p.seconds) / 10 : 0));
  const minutes = Math.round((totals.seconds || 0) / 60);
  fill("traffic-window", `(last ${minutes >= 1 ? minutes + " min" : Math.round(totals.seconds || 0) + " s"})`);
  const sparks = [
    sparkline("requests", "requests", perSecond("requests"), "/s"),
    sparkline("errors", "errors", perSecond("errors"), "/s"),
    sparkline("turns ok", "turnsOk", perSecond("turnsOk"), "/s"),
  ];
  if (points.some((p) => p.queued !== null)) sparks.push(sparkline("model steps queued", "modelQueued", points.map((p) => p.queued), ""));
  fill("sparks", ...sparks);
  const codes = Object.entries(totals.responses || {});
  const methods = Object.entries(totals.requests || {}).slice(0, 8);
  const turns = Object.entries(totals.turns || {});
  const mark = (code) => (code === "ok" ? "✓ ok" : "✕ " + code);
  fill("by-code",
    table(["responses by code", "count"], codes.length
      ? codes.map(([code, n]) => el("tr", { "data-code": code }, el("th", { scope: "row" }, mark(code)), cell("count", n)))
      : [el("tr", {}, el("td", { colspan: "2" }, "no responses"))], { id: "codes" }),
    turns.length ? table(["turns by outcome", "count"], turns.map(([o, n]) => el("tr", { "data-outcome": o }, el("th", { scope: "row" }, mark(o)), cell("count", n)))) : null,
    methods.length ? table(["busiest methods", "requests"], methods.map(([m, n]) => el("tr", { "data-method": m }, el("th", { scope: "row" }, m), cell("count", n)))) : null);
}

function renderExtra(model) {
  const panels = [];
  if (model && !model.error) {
    for (const [key, value] of Object.entries(model)) {
      if (!KNOWN_MODEL.has(key)) panels.push(genericPanel(humanize(key), value, key));
    }
    const stats = model.statistics;
    if (stats && Array.isArray(stats.devices)) {
      const unknown = Object.fromEntries(Object.entries(stats).filter(([k]) => !KNOWN_STATISTICS.has(k)));
      if (Object.keys(unknown).length) panels.push(genericPanel("other backend statistics", unknown, "statistics"));
    }
  }
  fill("extra", ...panels);
}

function render(message) {
  if (!message.append) points = [];
  points = points.concat(message.points || []);
  if (message.window) windowSeconds = message.window;
  const newest = points.length ? points[points.length - 1].at : 0;
  points = points.filter((p) => p.at > newest - windowSeconds);
  const snapshot = message.snapshot;
  const model = snapshot.model;
  const stats = model && !model.error ? model.statistics : null;
  renderBackends(model);
  renderQueues(stats);
  renderCoalescing(stats);
  renderConnections(snapshot.server);
  renderObjects(snapshot.server);
  renderTraffic(message.totals || {});
  renderExtra(model);
  lastUpdate = new Date();
  fill("updated", `updated ${lastUpdate.toLocaleTimeString("en-GB")} · up ${Math.round(snapshot.uptimeSeconds)} s`);
}

// --- the stream --------------------------------------------------------------------------------------

function setLink(state, text) {
  const link = document.getElementById("link");
  link.dataset.state = state;
  link.textContent = text;
  document.getElementById("main").classList.toggle("stale", state !== "live");
}

function connect() {
  const scheme = window.location.protocol === "https:" ? "wss://" : "ws://";
  const socket = new WebSocket(scheme + window.location.host + "/console/live");
  socket.addEventListener("open", () => {
    retryDelay = 1000;
    setLink("live", "● live");
  });
  socket.addEventListener("message", (event) => render(JSON.parse(event.data)));
  socket.addEventListener("close", () => reconnectLater());
}

async function reconnectLater() {
  const since = lastUpdate ? ` — showing ${lastUpdate.toLocaleTimeString("en-GB")}` : "";
  setLink("reconnecting", `◌ reconnecting in ${Math.round(retryDelay / 1000)} s${since}`);
  await new Promise((resolve) => setTimeout(resolve, retryDelay));
  retryDelay = Math.min(retryDelay * 2, 15000);
  try {
    const probe = await fetch("/console/state", { credentials: "same-origin", cache: "no-store" });
    if (probe.status === 401) {
      window.location.replace("/console"); // signed out or the server restarted: sign in again
      return;
    }
  } catch (error) {
    reconnectLater(); // the server is down: keep trying
    return;
  }
  connect();
}

document.getElementById("sign-out").addEventListener("click", async () => {
  await fetch("/console/logout", { method: "POST", credentials: "same-origin" });
  window.location.replace("/console");
});

makePanels();
connect();
