package registry

// This file is a lock cluster's side of a namespace move as the move
// driver (registry/mover) sees it: each step one call to the cluster's
// admin API (adminapi/move.go), which takes it in every lock group.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/paxlock/paxlock/adminapi"
	"github.com/paxlock/paxlock/client/wire"
	"github.com/paxlock/paxlock/registry/mover"
)

// moveCluster implements mover.Cluster over a lock cluster's admin API.
type moveCluster struct {
	a       *adminClient
	clients []string
}

var _ mover.Cluster = (*moveCluster)(nil)

func (c *moveCluster) Addrs() []string { return c.clients }

func moveID(id uint64) string { return strconv.FormatUint(id, 10) }

// step posts one step and maps a refusal (409) to mover.ErrRefused.
func (c *moveCluster) step(ctx context.Context, ns, step string, body any) error {
	b, err := json.Marshal(body)
	if err != nil {
		return err
	}
	_, err = c.a.do(ctx, http.MethodPost, "/moves/"+url.PathEscape(ns)+"/"+step, b, http.StatusOK)
	if adminStatus(err) == http.StatusConflict {
		return fmt.Errorf("%w: %w", mover.ErrRefused, err)
	}
	return err
}

func (c *moveCluster) Incoming(ctx context.Context, token uint64, ns string, id uint64, v adminapi.Verifier) error {
	return c.step(ctx, ns, "incoming", adminapi.MoveStep{ID: moveID(id), SCRAM: &v, Fence: token})
}

func (c *moveCluster) Freeze(ctx context.Context, token uint64, ns string, id uint64) error {
	return c.step(ctx, ns, "freeze", adminapi.MoveStep{ID: moveID(id), Fence: token})
}

func (c *moveCluster) RaiseVersion(ctx context.Context, token uint64, ns string, min uint64) error {
	return c.step(ctx, ns, "version", adminapi.MoveStep{Min: min, Fence: token})
}

func (c *moveCluster) Import(ctx context.Context, token uint64, ns string, id uint64, src, batch int, pairs []byte) error {
	return c.step(ctx, ns, "import", adminapi.MoveImport{ID: moveID(id), SrcGroup: src, Batch: batch, Pairs: pairs, Fence: token})
}

func (c *moveCluster) Own(ctx context.Context, token uint64, ns string, id uint64) error {
	return c.step(ctx, ns, "own", adminapi.MoveStep{ID: moveID(id), Fence: token})
}

func (c *moveCluster) Drop(ctx context.Context, token uint64, ns string, id uint64, movedTo []string) error {
	return c.step(ctx, ns, "drop", adminapi.MoveStep{ID: moveID(id), MovedTo: strings.Join(movedTo, ","), Fence: token})
}

func (c *moveCluster) Unfreeze(ctx context.Context, token uint64, ns string, id uint64) error {
	return c.step(ctx, ns, "unfreeze", adminapi.MoveStep{ID: moveID(id), Fence: token})
}

// Forget is the target's abort, which the unfreeze step also is there:
// it drops what was imported and the verifier it installed.
func (c *moveCluster) Forget(ctx context.Context, token uint64, ns string, id uint64) error {
	return c.Unfreeze(ctx, token, ns, id)
}

// Export streams every group's export (GET /moves/{ns}/export, each
// from a node that applied the freeze: one that did not redirects to the
// group's master) and returns the highest group version. An export
// without its end line is an error: the step is repeated, and the
// target skips the batches it applied.
func (c *moveCluster) Export(ctx context.Context, _ uint64, ns string, id uint64, fn func(group, batch int, pairs []byte) error) (uint64, error) {
	b, err := c.a.do(ctx, http.MethodGet, "/moves/"+url.PathEscape(ns), nil, http.StatusOK)
	if err != nil {
		return 0, err
	}
	var st adminapi.MoveStatus
	if err := json.Unmarshal(b, &st); err != nil {
		return 0, fmt.Errorf("move status of %q: %w", ns, err)
	}
	// Groups are exported exportParallel at a time: a batch's import is
	// a round of the target's groups, so groups in parallel cut the time
	// the namespace is frozen.
	versions := make([]uint64, len(st.Groups))
	errs := make([]error, len(st.Groups))
	sem := make(chan struct{}, exportParallel)
	var wg sync.WaitGroup
	for i, g := range st.Groups {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			versions[i], errs[i] = c.exportGroup(ctx, ns, id, g.Group, fn)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return 0, err
	}
	return slices.Max(append(versions, 0)), nil
}

// exportParallel is how many groups a move exports at once.
const exportParallel = 8

// exportGroup streams one group's export into fn and returns its
// version.
func (c *moveCluster) exportGroup(ctx context.Context, ns string, id uint64, g int, fn func(group, batch int, pairs []byte) error) (uint64, error) {
	path := fmt.Sprintf("/moves/%s/export?group=%d&id=%s", url.PathEscape(ns), g, moveID(id))
	var end *adminapi.MoveExportLine
	err := c.a.stream(ctx, path, func(r io.Reader) error {
		var err error
		end, err = readExport(r, g, fn)
		return err
	})
	if adminStatus(err) == http.StatusConflict {
		return 0, fmt.Errorf("%w: %w", mover.ErrRefused, err)
	}
	if err != nil {
		return 0, err
	}
	return end.Version, nil
}

// readExport reads one group's export lines, handing each batch to fn,
// and returns its end line.
func readExport(r io.Reader, g int, fn func(group, batch int, pairs []byte) error) (*adminapi.MoveExportLine, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		var ln adminapi.MoveExportLine
		if err := json.Unmarshal(sc.Bytes(), &ln); err != nil {
			return nil, fmt.Errorf("export of group %d: %w", g, err)
		}
		switch {
		case ln.Error != "":
			return nil, fmt.Errorf("export of group %d: %s", g, ln.Error)
		case ln.End:
			return &ln, nil
		case ln.Group != g:
			return nil, fmt.Errorf("export of group %d: a line of group %d", g, ln.Group)
		}
		if err := fn(g, ln.Batch, ln.Pairs); err != nil {
			return nil, err
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("export of group %d: %w", g, err)
	}
	return nil, fmt.Errorf("export of group %d: %w", g, io.ErrUnexpectedEOF)
}

// clusterFinder returns the mover's lookup of lock clusters in the
// registry's current tables.
func (s *Standalone) clusterFinder() mover.Clusters {
	return func(name string) (mover.Cluster, error) {
		s.tmu.RLock()
		t := s.tables
		s.tmu.RUnlock()
		if t != nil {
			for _, c := range t.Clusters {
				if c.Name == name {
					return s.moveClusterOf(c)
				}
			}
		}
		return nil, fmt.Errorf("cluster %q is not in the registry's tables", name)
	}
}

func (s *Standalone) moveClusterOf(c wire.RegistryCluster) (*moveCluster, error) {
	if len(c.Admin) == 0 {
		return nil, errors.New("the cluster has no admin addresses in the registry's tables")
	}
	a, err := newAdminClient(c.Name, c.Admin, c.CA, s.cfg.AdminToken)
	if err != nil {
		return nil, err
	}
	return &moveCluster{a: a, clients: c.Client}, nil
}
