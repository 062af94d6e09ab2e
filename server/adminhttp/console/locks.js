// paxlock web console, locks: find a lock by key or prefix in any
// namespace (GET /locks, paged with its cursor), a lock's page (GET
// /cluster/locks/NS/KEY: holders, lock-delay, the waiter queue) and its
// force-unlock (POST /cluster/unlock), all through this node with the
// admin token. The view follows the address's hash: #find?ns=&prefix=,
// #lock?ns=&key=, anything else the cluster. Uses console.js' helpers.
"use strict";

const PAGE = 50;
let lockTimer = null;
let findCursor = [];   // the cursors of the pages before this one
let lockShown = "";    // the lock the lock view shows: ns + "\n" + key

function authHeaders(extra) {
  const h = Object.assign({}, extra || {});
  if (token()) h.Authorization = "Bearer " + token();
  return h;
}

// api fetches path as JSON; a 401 asks for the token again.
async function api(path, init) {
  const resp = await fetch(path, Object.assign({ cache: "no-store" }, init || {}, { headers: authHeaders((init || {}).headers) }));
  if (resp.status === 401) {
    showLogin("The token was refused.");
    throw new Error("token refused");
  }
  const text = await resp.text();
  if (!resp.ok && resp.status !== 202) throw new Error("HTTP " + resp.status + ": " + text.trim());
  return JSON.parse(text);
}

function ms(v) {
  if (!v) return "—";
  if (v < 1000) return v + " ms";
  if (v < 120000) return (v / 1000).toFixed(1) + " s";
  return Math.round(v / 60000) + " min";
}

function lockHash(ns, key) { return "#lock?" + new URLSearchParams({ ns, key }); }

function lockURL(ns, key) {
  return "/cluster/locks/" + encodeURIComponent(ns) + "/" + key.split("/").map(encodeURIComponent).join("/");
}

function link(text, href) {
  const a = el("a", text);
  a.href = href;
  return a;
}

function linkCell(text, href) {
  const td = el("td");
  td.appendChild(link(text, href));
  return td;
}

function showView(name) {
  for (const v of ["cluster", "find", "lock"]) $("view-" + v).hidden = v !== name;
  if (name !== "lock") {
    lockShown = "";
    if (lockTimer) { clearTimeout(lockTimer); lockTimer = null; }
  }
}

// route shows the view the hash names.
function route() {
  const h = location.hash.slice(1);
  const q = new URLSearchParams(h.slice(h.indexOf("?") + 1));
  if (h.startsWith("find")) {
    showView("find");
    if (q.has("ns")) {
      $("find-ns-input").value = q.get("ns");
      $("find-prefix").value = q.get("prefix") || "";
      findCursor = [];
      findPage("");
    }
  } else if (h.startsWith("lock") && q.has("ns") && q.has("key")) {
    showView("lock");
    $("unlock-confirm").hidden = true;
    $("unlock-result").textContent = "";
    loadLock(q.get("ns"), q.get("key"));
  } else {
    showView("cluster");
  }
}

// namespaceOptions fills the search's namespace list from the cluster's.
function namespaceOptions(list) {
  const dl = $("find-ns-list");
  dl.replaceChildren(...list.map(u => { const o = document.createElement("option"); o.value = u.namespace; return o; }));
}

async function findPage(after) {
  const ns = $("find-ns-input").value.trim(), prefix = $("find-prefix").value;
  const out = $("find-results").tBodies[0];
  $("find-error").textContent = "";
  $("find-open").replaceChildren(prefix ? link("open the key " + JSON.stringify(prefix) + ", held or not", lockHash(ns, prefix)) : "");
  try {
    const page = await api("/locks?" + new URLSearchParams({ namespace: ns, prefix, after, limit: String(PAGE) }));
    out.replaceChildren();
    for (const l of page.locks) {
      const holders = l.kind === "write" ? "" : " (" + (l.readers || 1) + " holding" + (l.limit ? ", " + l.permits + "/" + l.limit + " permits" : "") + ")";
      const tr = row([linkCell(l.key, lockHash(ns, l.key)), l.kind + holders, l.holder, num(l.token), l.value || "—", num(ms(l.ttl_left_ms)), num(l.waiters), num(l.group)]);
      tr.dataset.key = l.key;
      out.appendChild(tr);
    }
    $("find-summary").textContent = page.locks.length + " held lock" + (page.locks.length === 1 ? "" : "s") + (findCursor.length ? ", page " + (findCursor.length + 1) : "");
    $("find-next").hidden = !page.next;
    $("find-next").dataset.after = page.next || "";
    $("find-prev").hidden = findCursor.length === 0;
    $("find-table").hidden = false;
  } catch (err) {
    $("find-error").textContent = err.message;
  }
}

async function loadLock(ns, key) {
  if (lockTimer) { clearTimeout(lockTimer); lockTimer = null; }

  const shown = ns + "\n" + key;
  lockShown = shown;
  $("lock-title").textContent = ns + " / " + key;
  const st = $("lock-state");
  try {
    const d = await api(lockURL(ns, key));
    if (lockShown !== shown) return; // another lock's page meanwhile
    $("lock-error").textContent = "";
    st.dataset.held = d.held ? "true" : "false";
    const facts = [d.held ? "held (" + d.kind + (d.limit ? ", " + d.limit + " permits" : "") + ")" : "free",
      "group " + d.group + " on its master node " + d.master, d.watchers + " watching"];
    if (d.delay_left_ms) facts.push("lock-delay " + ms(d.delay_left_ms) + " left");
    st.textContent = facts.join(" · ");
    st.className = d.held ? "warn" : "ok";
    const hb = $("lock-holders").tBodies[0];
    hb.replaceChildren();
    for (const h of d.holders) {
      const tr = row([h.owner, num(h.token), h.value || "—", el("td", h.revoked ? "revoked: ends on acknowledgement" : ms(h.ttl_left_ms), h.revoked ? "num bad" : "num"),
        num(ms(h.lock_delay_ms)), num(h.permits || "—")]);
      tr.dataset.owner = h.owner;
      tr.dataset.value = h.value || "";
      hb.appendChild(tr);
    }
    $("lock-holders-empty").hidden = d.holders.length > 0;
    $("lock-holders").hidden = d.holders.length === 0;
    const wb = $("lock-waiters").tBodies[0];
    wb.replaceChildren();
    d.waiters.forEach((q, i) => wb.appendChild(row([num(i + 1), q.owner, q.kind, num(q.weight), num(q.permits || "—"), num(ms(q.waited_ms)), q.granting ? "being granted" : ""])));
    $("lock-waiters-empty").hidden = d.waiters.length > 0;
    $("lock-waiters").hidden = d.waiters.length === 0;
    $("lock-more").hidden = !d.more;
    $("unlock").hidden = !d.held;
  } catch (err) {
    if (lockShown !== shown) return;
    $("lock-error").textContent = err.message;
  }
  // The page stays current while it is shown.
  if (lockShown === shown && !lockTimer) lockTimer = setTimeout(() => loadLock(ns, key), 2000);
}

async function forceUnlock() {
  const q = new URLSearchParams(location.hash.slice(location.hash.indexOf("?") + 1));
  const ns = q.get("ns"), key = q.get("key");
  $("unlock-confirm").hidden = true;
  $("unlock-result").textContent = "force-unlocking…";
  try {
    const r = await api("/cluster/unlock", { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify({ namespace: ns, key }) });
    const n = r.released.length;
    $("unlock-result").textContent = r.pending ? "Revoked; a holder has not acknowledged yet: the lock frees at its acknowledgement or its TTL."
      : n ? "Released " + n + " hold" + (n === 1 ? "" : "s") + " (token " + r.released.map(h => h.token).join(", ") + ")." : "The key was free.";
  } catch (err) {
    $("unlock-result").textContent = "Force-unlock failed: " + err.message;
  }
  loadLock(ns, key);
}

document.addEventListener("DOMContentLoaded", () => {
  window.addEventListener("hashchange", route);
  $("find").addEventListener("submit", ev => {
    ev.preventDefault();
    const h = "#find?" + new URLSearchParams({ ns: $("find-ns-input").value.trim(), prefix: $("find-prefix").value });
    if (location.hash === h) route(); else location.hash = h;
  });
  $("find-next").addEventListener("click", () => { findCursor.push($("find-next").dataset.after); findPage(findCursor[findCursor.length - 1]); });
  $("find-prev").addEventListener("click", () => { findCursor.pop(); findPage(findCursor.length ? findCursor[findCursor.length - 1] : ""); });
  $("unlock").addEventListener("click", () => { $("unlock-confirm").hidden = false; $("unlock-result").textContent = ""; });
  $("unlock-cancel").addEventListener("click", () => { $("unlock-confirm").hidden = true; });
  $("unlock-yes").addEventListener("click", forceUnlock);
  $("lock-refresh").addEventListener("click", () => route());
  route();
});
