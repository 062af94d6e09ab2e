// paxlock web console, elections: the elections this browser follows,
// each with its leader's value, term (fencing token), owner, how long it
// has led and the candidates waiting, read from the election key's
// master (GET /cluster/locks/NS/KEY) every two seconds. An election is a
// plain lock (client.Election, paxlockctl elect: the leader holds the
// key, its value is the holder value), so the nodes cannot list
// elections: the operator names the ones to follow, kept in local
// storage. Uses console.js' and locks.js' helpers.
"use strict";

const ELECTIONS_KEY = "paxlock-elections";
const ELECTIONS_EVERY = 2000;

function followed() {
  try {
    const list = JSON.parse(localStorage.getItem(ELECTIONS_KEY) || "[]");
    return Array.isArray(list) ? list.filter(e => e && typeof e.ns === "string" && typeof e.key === "string") : [];
  } catch (err) {
    return [];
  }
}

function saveFollowed(list) { localStorage.setItem(ELECTIONS_KEY, JSON.stringify(list)); }

// electionRow is one followed election's row, from its lock detail d (or
// the error of its read).
function electionRow(e, d, err) {
  const stop = el("button", "unfollow");
  stop.type = "button";
  stop.addEventListener("click", () => {
    saveFollowed(followed().filter(f => f.ns !== e.ns || f.key !== e.key));
    refreshElections();
  });
  const stopCell = el("td");
  stopCell.appendChild(stop);
  let tr;
  if (err) {
    tr = row([e.ns, linkCell(e.key, lockHash(e.ns, e.key)), el("td", err.message, "bad"), "", "", "", "", stopCell]);
  } else if (!d.held || !d.holders.length) {
    tr = row([e.ns, linkCell(e.key, lockHash(e.ns, e.key)), el("td", "no leader", "muted"), "", "", "", num(d.waiters.length), stopCell]);
  } else {
    const h = d.holders[0];
    tr = row([e.ns, linkCell(e.key, lockHash(e.ns, e.key)), h.value || "—", num(h.token), h.owner, num(ms(h.held_ms)), num(d.waiters.length), stopCell]);
    tr.dataset.value = h.value || "";
    tr.dataset.token = String(h.token);
  }
  tr.dataset.namespace = e.ns;
  tr.dataset.key = e.key;
  return tr;
}

async function refreshElections() {
  const list = followed();
  const body = $("elections").tBodies[0];
  $("elections").hidden = list.length === 0;
  if (!list.length) { body.replaceChildren(); return; }
  const rows = await Promise.all(list.map(async e => {
    try {
      return electionRow(e, await api(lockURL(e.ns, e.key)));
    } catch (err) {
      return electionRow(e, null, err);
    }
  }));
  body.replaceChildren(...rows);
}

document.addEventListener("DOMContentLoaded", () => {
  $("election-add").addEventListener("submit", ev => {
    ev.preventDefault();
    const ns = $("election-ns").value.trim(), key = $("election-key").value;
    $("election-error").textContent = "";
    if (!ns || !key) {
      $("election-error").textContent = "give the namespace and the election's key";
      return;
    }
    const list = followed().filter(f => f.ns !== ns || f.key !== key);
    list.push({ ns, key });
    saveFollowed(list);
    $("election-key").value = "";
    refreshElections();
  });
  setInterval(() => { if (!$("main").hidden && !$("view-cluster").hidden) refreshElections(); }, ELECTIONS_EVERY);
});
