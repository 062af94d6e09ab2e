// This file splits the registry's tables into pages under
// RegistryPageBytes (a meta node's side) and gathers the pages of one
// version back into the tables (a registry process's side).

package wire

import (
	"errors"
	"fmt"
)

// RegistryPageBytes bounds the encoded body of one page of the registry's
// tables: far under DefaultMaxFrame, and above the largest single entry
// (a cluster with 64 client and 64 admin addresses of up to 1 KiB and a
// 64 KiB CA), so that every page holds at least one entry.
const RegistryPageBytes = 256 << 10

// Upper bounds of msgpack's encodings, for sizing pages before encoding.
const (
	mpHeader = 5 // an array, str or bin header
	mpUint   = 9
	// mpPageHeader bounds a page's fields other than its lists' entries.
	mpPageHeader = mpHeader + mpUint + 1 + 3*mpHeader + 1 + mpUint + 1
)

func clusterSize(c *RegistryCluster) int {
	n := 2*mpHeader + len(c.Name) + 2*mpHeader + len(c.CA)
	for _, a := range c.Client {
		n += mpHeader + len(a)
	}
	for _, a := range c.Admin {
		n += mpHeader + len(a)
	}
	return n
}

func namespaceSize(ns *RegistryNamespace) int {
	return 6*mpHeader + 2*mpUint + len(ns.Name) + len(ns.Cluster) + len(ns.Salt) + len(ns.StoredKey) + len(ns.ServerKey)
}

func moveSize(m *RegistryMove) int {
	return 4*mpHeader + len(m.Namespace) + len(m.From) + len(m.To) + 4*mpUint
}

// PageRegistryTables splits t into pages whose bodies each encode to at
// most budget bytes (RegistryPageBytes when budget is 0 or less), except
// for a page holding one entry bigger than the budget. The pages share
// t's lists (they are sub-slices) and list t's clusters, namespaces and
// moves in t's order; there is always at least one page. Every page is
// Paged, numbered from 0, and More but the last.
func PageRegistryTables(t *RegistryTables, budget int) []RegistryTables {
	if budget <= 0 {
		budget = RegistryPageBytes
	}
	var pages []RegistryTables
	cur := RegistryTables{Version: t.Version, Paged: true}
	size := mpPageHeader
	flush := func() {
		pages = append(pages, cur)
		cur = RegistryTables{Version: t.Version, Paged: true, Page: uint32(len(pages))}
		size = mpPageHeader
	}
	room := func(n int) {
		if size+n > budget && size > mpPageHeader {
			flush()
		}
		size += n
	}
	for i := range t.Clusters {
		room(clusterSize(&t.Clusters[i]))
		cur.Clusters = append(cur.Clusters, t.Clusters[i])
	}
	for i := range t.Namespaces {
		room(namespaceSize(&t.Namespaces[i]))
		cur.Namespaces = append(cur.Namespaces, t.Namespaces[i])
	}
	for i := range t.Moves {
		room(moveSize(&t.Moves[i]))
		cur.Moves = append(cur.Moves, t.Moves[i])
	}
	pages = append(pages, cur)
	for i := range pages[:len(pages)-1] {
		pages[i].More = true
	}
	return pages
}

// ErrRegistryPage means a page of the registry's tables does not continue
// the tables being gathered: another version, a page out of order, a name
// out of order, or tables over the MaxRegistry limits.
var ErrRegistryPage = errors.New("wire: registry tables page does not fit")

// RegistryAssembly gathers the pages of one version of the registry's
// tables. Its zero value is ready; Add with page 0 starts over.
type RegistryAssembly struct {
	t    *RegistryTables
	next uint32
}

// Next reports the version being gathered and the page it needs next
// (0, 0 when none is under way).
func (a *RegistryAssembly) Next() (version uint64, page uint32) {
	if a.t == nil {
		return 0, 0
	}
	return a.t.Version, a.next
}

// Reset drops the pages gathered.
func (a *RegistryAssembly) Reset() { *a = RegistryAssembly{} }

// Add adds page p, which must be Paged and not Unchanged. Page 0 drops
// whatever was gathered and starts p's version; a later page must be the
// next one of that version, and its names must continue each list's
// ascending order (no entry twice). When p is the last page (not More),
// Add returns the whole tables and is ready for the next version. Any
// error (ErrRegistryPage) drops what was gathered.
func (a *RegistryAssembly) Add(p *RegistryTables) (*RegistryTables, error) {
	t, err := a.add(p)
	if err != nil {
		a.Reset()
		return nil, err
	}
	return t, nil
}

func (a *RegistryAssembly) add(p *RegistryTables) (*RegistryTables, error) {
	switch {
	case !p.Paged || p.Unchanged:
		return nil, fmt.Errorf("%w: not a page of tables", ErrRegistryPage)
	case p.Page == 0:
		a.t, a.next = &RegistryTables{Version: p.Version}, 0
	case a.t == nil || p.Version != a.t.Version || p.Page != a.next:
		v, want := a.Next()
		return nil, fmt.Errorf("%w: page %d of version %d, expected page %d of version %d", ErrRegistryPage, p.Page, p.Version, want, v)
	}
	t := a.t
	if err := appendAscending(&t.Clusters, p.Clusters, MaxRegistryClusters, func(c *RegistryCluster) string { return c.Name }); err != nil {
		return nil, fmt.Errorf("%w: clusters: %w", ErrRegistryPage, err)
	}
	if err := appendAscending(&t.Namespaces, p.Namespaces, MaxRegistryNamespaces, func(n *RegistryNamespace) string { return n.Name }); err != nil {
		return nil, fmt.Errorf("%w: namespaces: %w", ErrRegistryPage, err)
	}
	if err := appendAscending(&t.Moves, p.Moves, MaxRegistryNamespaces, func(m *RegistryMove) string { return m.Namespace }); err != nil {
		return nil, fmt.Errorf("%w: moves: %w", ErrRegistryPage, err)
	}
	if p.More {
		a.next++
		return nil, nil
	}
	a.Reset()
	return t, nil
}

// appendAscending appends src to *dst, checking that names ascend
// strictly across both and that the list stays at most limit long.
func appendAscending[E any](dst *[]E, src []E, limit int, name func(*E) string) error {
	if len(*dst)+len(src) > limit {
		return fmt.Errorf("over %d entries", limit)
	}
	for i := range src {
		if n := len(*dst); n > 0 && name(&(*dst)[n-1]) >= name(&src[i]) {
			return fmt.Errorf("%q after %q", name(&src[i]), name(&(*dst)[n-1]))
		}
		*dst = append(*dst, src[i])
	}
	return nil
}
