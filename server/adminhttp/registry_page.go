// This file pages GET /registry: a cursor over the tables' entries
// (clusters, then namespaces, then moves, each by name), pages bounded in
// entries and in bytes of JSON (adminapi.RegistryPageBytes).

package adminhttp

import (
	"cmp"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/paxlock/paxlock/adminapi"
	"github.com/paxlock/paxlock/client/wire"
)

// registryTablesOrder names the tables in a cursor, in page order.
const registryTablesOrder = "cnm"

// registryCursor is a position among the tables' entries: after the
// entry name of table (an index of registryTablesOrder).
type registryCursor struct {
	table int
	name  string
}

// parseRegistryCursor parses "" (the start) or "T:NAME", T one of
// registryTablesOrder and NAME a valid name; anything else is
// wire.ErrInvalid.
func parseRegistryCursor(s string) (registryCursor, error) {
	if s == "" {
		return registryCursor{table: -1}, nil
	}
	tbl, name, ok := strings.Cut(s, ":")
	i := strings.Index(registryTablesOrder, tbl)
	if !ok || len(tbl) != 1 || i < 0 || wire.ValidateNamespace(name) != nil {
		return registryCursor{}, fmt.Errorf("%w: cursor %q: want the next field of the page before", wire.ErrInvalid, s)
	}
	return registryCursor{table: i, name: name}, nil
}

func (c registryCursor) String() string { return registryTablesOrder[c.table:c.table+1] + ":" + c.name }

// before reports whether entry name of table comes at or before c.
func (c registryCursor) before(table int, name string) bool {
	return table < c.table || table == c.table && name <= c.name
}

// registryPage returns the page of t after cur: at most limit entries
// and budget bytes of entries' JSON (at least one entry), and the cursor
// of the next page ("" when none).
func registryPage(t adminapi.Registry, cur registryCursor, limit, budget int) adminapi.Registry {
	out := adminapi.Registry{Version: t.Version, Clusters: []adminapi.RegistryCluster{},
		Namespaces: []adminapi.RegistryNamespace{}, Moves: []adminapi.RegistryMove{}}
	n, size := 0, 0
	last := registryCursor{table: -1}
	// take adds an entry, reporting false when the page is full.
	take := func(table int, name string, v any, add func()) bool {
		if cur.before(table, name) {
			return true
		}
		b, _ := json.Marshal(v)
		if n >= limit || n > 0 && size+len(b)+1 > budget {
			out.Next = last.String()
			return false
		}
		n, size, last = n+1, size+len(b)+1, registryCursor{table: table, name: name}
		add()
		return true
	}
	for i := range t.Clusters {
		c := t.Clusters[i]
		if !take(0, c.Name, c, func() { out.Clusters = append(out.Clusters, c) }) {
			return out
		}
	}
	for i := range t.Namespaces {
		ns := t.Namespaces[i]
		if !take(1, ns.Name, ns, func() { out.Namespaces = append(out.Namespaces, ns) }) {
			return out
		}
	}
	for i := range t.Moves {
		m := t.Moves[i]
		if !take(2, m.Namespace, m, func() { out.Moves = append(out.Moves, m) }) {
			return out
		}
	}
	return out
}

// registryGet answers this node's replica of the tables, without the
// verifiers: a page with ?limit= or ?after= (see adminapi.Registry), else
// the whole tables, or 413 when they are over adminapi.RegistryPageBytes
// (a client that does not page is told so, never given part of the
// tables).
func (h *handler) registryGet(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	t := h.Node.Registry()
	budget := cmp.Or(h.Node.RegistryReplyBytes(), adminapi.RegistryPageBytes)
	if !q.Has("limit") && !q.Has("after") {
		out := registryPage(t, registryCursor{table: -1}, len(t.Clusters)+len(t.Namespaces)+len(t.Moves), 1<<62)
		b, err := json.Marshal(out)
		if err != nil || len(b) > budget {
			http.Error(w, fmt.Sprintf("registry tables over %d bytes: read them in pages, GET /registry?limit=%d&after= and then each reply's next",
				budget, adminapi.RegistryPageLimit), http.StatusRequestEntityTooLarge)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(append(b, '\n'))
		return
	}
	limit := adminapi.RegistryPageLimit
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > adminapi.RegistryPageMaxLimit {
			http.Error(w, fmt.Sprintf("limit %q: 1 to %d", v, adminapi.RegistryPageMaxLimit), http.StatusBadRequest)
			return
		}
		limit = n
	}
	cur, err := parseRegistryCursor(q.Get("after"))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(registryPage(t, cur, limit, budget-4096))
}
