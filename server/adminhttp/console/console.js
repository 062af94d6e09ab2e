// paxlock web console: reads /events (server-sent events, each a
// ClusterStatus gathered by this node from every node) over fetch, so
// that it can send the admin token as a bearer header, and renders it.
// Everything is built with textContent: key names and owners are data.
"use strict";

const TOKEN_KEY = "paxlock-admin-token";
let abort = null;

function $(id) { return document.getElementById(id); }

function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = String(text);
  if (cls) e.className = cls;
  return e;
}

function row(cells) {
  const tr = document.createElement("tr");
  for (const c of cells) tr.appendChild(c instanceof Node ? c : el("td", c));
  return tr;
}

function num(v) { return el("td", v, "num"); }

function uptime(ms) {
  const s = Math.floor((ms || 0) / 1000);
  if (s < 120) return s + " s";
  if (s < 7200) return Math.floor(s / 60) + " min";
  if (s < 172800) return Math.floor(s / 3600) + " h " + Math.floor(s % 3600 / 60) + " min";
  return Math.floor(s / 86400) + " d " + Math.floor(s % 86400 / 3600) + " h";
}

function setState(state, text) {
  const s = $("conn");
  s.dataset.state = state;
  s.textContent = text;
}

function token() { return sessionStorage.getItem(TOKEN_KEY) || ""; }

function showLogin(msg) {
  $("login").hidden = false;
  $("main").hidden = true;
  $("login-error").textContent = msg || "";
  $("token").focus();
}

function render(cs) {
  $("login").hidden = true;
  $("main").hidden = false;
  $("logout").hidden = !token();
  $("version").textContent = cs.version || "";
  $("source").textContent = "gathered by node " + cs.node + " at " + new Date(cs.time).toLocaleTimeString() + ", view " + cs.view_version;

  const nodes = $("nodes").tBodies[0];
  nodes.replaceChildren();
  for (const n of cs.nodes) {
    let health;
    if (!n.reachable) health = el("td", "unreachable: " + (n.error || "?"), "bad");
    else if (n.storage_failed) health = el("td", "storage failed", "bad");
    else if (n.ready) health = el("td", "ready", "ok");
    else health = el("td", "not ready: " + n.ready_reason, "warn");
    const tr = row([el("td", n.id), n.client, n.admin || "—", el("td", n.alive ? "yes" : "no", n.alive ? "ok" : "bad"), health, num(n.mastered), num(n.reachable ? n.conns : "—"), n.reachable ? uptime(n.uptime_ms) : "—", n.version || "—"]);
    tr.dataset.node = n.id;
    tr.dataset.version = n.version || "";
    tr.dataset.uptime = n.uptime_ms || 0;
    tr.dataset.health = n.reachable ? (n.ready ? "ready" : "not-ready") : "unreachable";
    nodes.appendChild(tr);
  }

  const groups = $("groups").tBodies[0];
  groups.replaceChildren();
  let mastered = 0;
  for (const g of cs.groups) {
    if (g.master) mastered++;
    const lag = (g.replicas || []).map(r => "n" + r.node + ": " + r.lag).join("  ");
    const acceptors = (g.members || []).join(",") + (g.member_change ? " (" + g.member_change + ")" : "");
    const tr = row([num(g.group), el("td", g.master ? "node " + g.master : "none", g.master ? "" : "bad"), num(g.epoch),
      el("td", g.serving ? "yes" : "no", g.serving ? "ok" : "warn"), num(g.committed), num(g.applied), lag, acceptors, num(g.locks)]);
    tr.dataset.group = g.group;
    tr.dataset.master = g.master;
    tr.dataset.locks = g.locks;
    groups.appendChild(tr);
  }
  $("groups-summary").textContent = mastered + " of " + cs.groups.length + " with a master";

  const hot = $("hotkeys").tBodies[0];
  hot.replaceChildren();
  for (const k of cs.hot_keys) {
    const holders = (k.holders || []).map(h => h.owner + " (" + h.kind + ", token " + h.token + ", " + Math.round(h.ttl_left_ms / 1000) + " s left)").join("; ");
    const tr = row([k.namespace, k.key, num(k.group), num(k.waiters), num(k.watchers), holders || "—"]);
    tr.dataset.key = k.namespace + "/" + k.key;
    tr.dataset.waiters = k.waiters;
    hot.appendChild(tr);
  }
  $("hotkeys-empty").hidden = cs.hot_keys.length > 0;

  const nss = $("namespaces").tBodies[0];
  nss.replaceChildren();
  for (const u of cs.namespaces || []) {
    const a = el("a", "browse");
    a.href = "#find?" + new URLSearchParams({ ns: u.namespace, prefix: "" });
    const td = el("td");
    td.appendChild(a);
    const tr = row([u.namespace, num(u.held), num(u.holders), num(u.waiters), td]);
    tr.dataset.namespace = u.namespace;
    tr.dataset.held = u.held;
    tr.dataset.waiters = u.waiters;
    nss.appendChild(tr);
  }
  if (typeof namespaceOptions === "function") namespaceOptions(cs.namespaces || []);

  const clients = $("clients").tBodies[0];
  clients.replaceChildren();
  let nclients = 0, cut = false;
  for (const n of cs.nodes) {
    cut = cut || n.clients_more;
    for (const c of n.clients || []) {
      nclients++;
      const tr = row([el("td", n.id), c.client, c.namespace, c.remote, c.tls ? "yes" : "no", c.relay ? "node " + c.relay : "—",
        num(uptime(Date.parse(cs.time) - Date.parse(c.connected))), num(c.in_flight || 0), num(c.waits || 0),
        num((c.watches || 0) + (c.prefix_watches || 0))]);
      tr.dataset.client = c.client;
      tr.dataset.namespace = c.namespace;
      tr.dataset.waits = c.waits || 0;
      tr.dataset.tls = c.tls ? "true" : "false";
      clients.appendChild(tr);
    }
  }
  $("clients-summary").textContent = nclients + " session" + (nclients === 1 ? "" : "s") + (cut ? ", cut at 200 a node" : "");
  $("clients").hidden = nclients === 0;

  const quotas = $("quotas").tBodies[0];
  quotas.replaceChildren();
  const limit = (use, lim) => el("td", use + " / " + (lim || "—"), "num");
  for (const q of cs.quotas || []) {
    const r = q.refused || {};
    const tr = row([q.namespace, limit(q.held, q.quota.held), limit(q.waiters, q.quota.waiters), num(q.quota.rate || "—"),
      num(q.quota.burst || (q.quota.rate ? "= rate" : "—")),
      el("td", r.held || 0, r.held ? "num warn" : "num"), el("td", r.waiters || 0, r.waiters ? "num warn" : "num"), el("td", r.rate || 0, r.rate ? "num warn" : "num")]);
    tr.dataset.namespace = q.namespace;
    quotas.appendChild(tr);
  }
  $("quotas-empty").hidden = (cs.quotas || []).length > 0;

  const masters = $("masters").tBodies[0];
  masters.replaceChildren();
  for (const c of cs.master_changes) {
    masters.appendChild(row([new Date(c.time).toLocaleTimeString(), num(c.group), c.from ? "node " + c.from : "—", "node " + c.to, num(c.epoch)]));
  }
}

// connect reads /events until it ends, then tries again (after a pause
// that grows to 5 s); a 401 asks for the token instead.
async function connect(delay) {
  if (abort) abort.abort();
  abort = new AbortController();
  const headers = {};
  if (token()) headers.Authorization = "Bearer " + token();
  try {
    const resp = await fetch("/events", { headers, signal: abort.signal, cache: "no-store" });
    if (resp.status === 401) {
      setState("unauthorized", "token needed");
      showLogin(token() ? "The token was refused." : "");
      return;
    }
    if (!resp.ok || !resp.body) throw new Error("HTTP " + resp.status);
    setState("live", "live");
    delay = 500;
    const reader = resp.body.pipeThrough(new TextDecoderStream()).getReader();
    let buf = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buf += value;
      let i;
      while ((i = buf.indexOf("\n\n")) >= 0) {
        const block = buf.slice(0, i);
        buf = buf.slice(i + 2);
        const data = block.split("\n").filter(l => l.startsWith("data:")).map(l => l.slice(5).trimStart()).join("\n");
        if (data) render(JSON.parse(data));
      }
    }
    throw new Error("stream ended");
  } catch (err) {
    if (err.name === "AbortError") return;
    setState("retrying", "disconnected (" + err.message + "), retrying…");
    delay = Math.min((delay || 500) * 2, 5000);
    setTimeout(() => connect(delay), delay);
  }
}

document.addEventListener("DOMContentLoaded", () => {
  $("login").addEventListener("submit", ev => {
    ev.preventDefault();
    sessionStorage.setItem(TOKEN_KEY, $("token").value.trim());
    $("token").value = "";
    setState("connecting", "connecting…");
    connect();
    if (typeof route === "function") route();
  });
  $("logout").addEventListener("click", () => {
    sessionStorage.removeItem(TOKEN_KEY);
    connect();
  });
  connect();
});
