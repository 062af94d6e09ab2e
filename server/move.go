package server

// Moving a namespace between clusters: the steps behind the admin
// endpoints a move's driver calls on the source and target clusters
// (adminhttp/moves.go serves them; adminapi/move.go lists them;
// docs/design.md, "Moving a namespace", is the protocol). A step is
// taken in every lock group on its master: this node proposes it in the
// groups it serves and forwards it, with ?group=G, to the masters of the
// others, retrying until each took it or the request's time is up.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/paxlock/paxlock/adminapi"
	"github.com/paxlock/paxlock/client/scramauth"
	"github.com/paxlock/paxlock/client/wire"
	"github.com/paxlock/paxlock/group"
	"github.com/paxlock/paxlock/paxos"
)

// moveExportBatch is about how many bytes of pairs one export batch
// holds: one import proposal, well under a Paxos batch's limit.
const moveExportBatch = 256 << 10

var moveSteps = map[string]group.MoveStep{
	"incoming": group.StepIncoming,
	"freeze":   group.StepFreeze,
	"own":      group.StepOwn,
	"drop":     group.StepDrop,
	"unfreeze": group.StepUnfreeze,
}

// errMoveGroupMaster: this node does not serve the group a ?group=G step
// names.
var errMoveGroupMaster = errors.New("not the group's master")

// MoveStatus returns namespace ns's move state in every lock group, as
// this node's replicas have applied it.
func (s *Server) MoveStatus(ns string) adminapi.MoveStatus {
	v := s.view.Load()
	st := adminapi.MoveStatus{Namespace: ns, Node: s.cfg.NodeID, Groups: []adminapi.MoveGroup{}, Clients: []string{}}
	for g, lg := range s.svc.Groups() {
		sm := lg.StateMachine()
		info := sm.MoveInfo(ns)
		mg := adminapi.MoveGroup{Group: g, State: info.State.String(), ID: info.ID, MovedTo: info.MovedTo,
			Version: sm.Version(), Applied: sm.Applied(), Batches: info.Batches, Locks: info.Locks}
		if g < len(v.Groups) {
			mg.Master = v.Groups[g].Master
		}
		st.Groups = append(st.Groups, mg)
	}
	for _, n := range s.nodes() {
		if n.Client != "" {
			st.Clients = append(st.Clients, n.Client)
		}
	}
	if rec, ok := s.svc.NamespaceRecord(ns); ok {
		st.Verifier = rec
	}
	return st
}

// moveAct is a step: local takes it in group g, which this node must
// serve (errMoveGroupMaster otherwise); all takes it in every group that
// it concerns, each on its master.
type moveAct struct {
	s     *Server
	ns    string
	step  string
	body  []byte
	local func(ctx context.Context, g int, body []byte) error
	all   func(ctx context.Context) ([]int, []error)
}

// moveAction decodes a step's body and returns what it does.
func (s *Server) moveAction(ns, step string, body []byte) (*moveAct, error) {
	a := &moveAct{s: s, ns: ns, step: step, body: body}
	a.all = a.everyGroup
	if step == "import" {
		var imp adminapi.MoveImport
		if err := json.Unmarshal(body, &imp); err != nil || imp.ID == "" || imp.SrcGroup < 0 || imp.Batch < 0 {
			return nil, errors.New("body: want {\"id\", \"src_group\", \"batch\", \"pairs\"}")
		}
		a.local = func(ctx context.Context, g int, body []byte) error {
			var imp adminapi.MoveImport
			if err := json.Unmarshal(body, &imp); err != nil {
				return fmt.Errorf("%w: %w", wire.ErrInvalid, err)
			}
			if !s.svc.Group(group.ID(g)).Serving() {
				return errMoveGroupMaster
			}
			return s.svc.Group(group.ID(g)).Import(ctx, ns, imp.ID, uint32(imp.SrcGroup), uint32(imp.Batch), imp.Pairs, imp.Fence)
		}
		a.all = func(ctx context.Context) ([]int, []error) { return a.importAll(ctx, imp) }
		return a, nil
	}
	var ms adminapi.MoveStep
	if err := json.Unmarshal(body, &ms); err != nil {
		return nil, errors.New("body: want a JSON object (adminapi.MoveStep)")
	}
	switch step {
	case "version":
		if ms.Min == 0 || ms.Min > group.MaxGroupVersion {
			return nil, fmt.Errorf("min: want a group version from 1 to %d", group.MaxGroupVersion)
		}
		a.local = func(ctx context.Context, g int, _ []byte) error {
			if !s.svc.Group(group.ID(g)).Serving() {
				return errMoveGroupMaster
			}
			_, err := s.svc.Group(group.ID(g)).RaiseVersion(ctx, ms.Min)
			if errors.Is(err, group.ErrNotMaster) {
				return errMoveGroupMaster
			}
			return err
		}
		return a, nil
	case "namespace":
		a.local = func(ctx context.Context, g int, _ []byte) error {
			return s.moveNamespaceRecord(ctx, group.ID(g), ns, ms)
		}
		a.all = func(ctx context.Context) ([]int, []error) {
			return []int{int(group.NamespaceGroup)}, []error{a.onMaster(ctx, group.NamespaceGroup)}
		}
		return a, nil
	}
	st, ok := moveSteps[step]
	if !ok {
		return nil, fmt.Errorf("unknown move step %q: incoming, freeze, import, version, own, drop, unfreeze", step)
	}
	if ms.ID == "" {
		return nil, errors.New("body: want {\"id\": ...}")
	}
	a.local = func(ctx context.Context, g int, _ []byte) error {
		err := s.svc.Group(group.ID(g)).MoveStep(ctx, st, ns, ms.ID, ms.MovedTo, ms.Fence)
		if errors.Is(err, group.ErrNotMaster) {
			return errMoveGroupMaster
		}
		return err
	}
	switch st {
	case group.StepIncoming:
		if len(ms.Verifier) == 0 && ms.SCRAM == nil && ms.Secret == "" {
			return nil, errors.New("body: an incoming step needs the namespace's verifier or secret")
		}
		a.all = a.incomingAll
	case group.StepUnfreeze:
		a.all = a.unfreezeAll
	}
	return a, nil
}

// moveNamespaceRecord installs (ms.Verifier or ms.Secret) or removes
// (ms.Delete) namespace ns's record in the namespace table: group 0,
// which this node must serve.
func (s *Server) moveNamespaceRecord(ctx context.Context, g group.ID, ns string, ms adminapi.MoveStep) error {
	if g != group.NamespaceGroup {
		return fmt.Errorf("%w: the namespace table is group %d's", wire.ErrInvalid, group.NamespaceGroup)
	}
	var err error
	switch {
	case ms.Delete:
		err = s.svc.DeleteNamespace(ctx, ns)
		if errors.Is(err, group.ErrUnknownNamespace) {
			err = nil
		}
	case len(ms.Verifier) > 0:
		err = s.svc.PutNamespaceRecord(ctx, ns, ms.Verifier)
	case ms.SCRAM != nil:
		v := ms.SCRAM
		err = s.svc.PutNamespaceVerifier(ctx, ns, scramauth.Verifier{Iters: v.Iters, Salt: v.Salt, StoredKey: v.StoredKey, ServerKey: v.ServerKey})
	default:
		err = s.svc.PutNamespace(ctx, ns, ms.Secret)
	}
	if errors.Is(err, group.ErrNotSystemMaster) {
		return errMoveGroupMaster
	}
	return err
}

// everyGroup takes the step in every group, all at once.
func (a *moveAct) everyGroup(ctx context.Context) ([]int, []error) {
	n := len(a.s.svc.Groups())
	groups := make([]int, n)
	errs := make([]error, n)
	done := make(chan struct{}, n)
	for g := range n {
		groups[g] = g
		go func() {
			errs[g] = a.onMaster(ctx, group.ID(g))
			done <- struct{}{}
		}()
	}
	for range n {
		<-done
	}
	return groups, errs
}

// incomingAll marks every group incoming, then installs the namespace's
// verifier: a client of the namespace can authenticate here only once
// every group answers it MOVING.
func (a *moveAct) incomingAll(ctx context.Context) ([]int, []error) {
	groups, errs := a.everyGroup(ctx)
	if errors.Join(errs...) != nil {
		return groups, errs
	}
	nsAct, err := a.s.moveAction(a.ns, "namespace", a.body)
	if err == nil {
		err = nsAct.onMaster(ctx, group.NamespaceGroup)
	}
	if err != nil {
		errs[group.NamespaceGroup] = fmt.Errorf("installing the namespace's verifier: %w", err)
	}
	return groups, errs
}

// unfreezeAll aborts the move in every group. On a target that knew
// nothing of the namespace before (no tombstone of an earlier move away),
// the verifier the incoming step installed goes too, so that nobody can
// be served the namespace here.
func (a *moveAct) unfreezeAll(ctx context.Context) ([]int, []error) {
	target := false
	for _, g := range a.s.MoveStatus(a.ns).Groups {
		if g.State == group.MoveIncoming.String() && g.MovedTo == "" {
			target = true
		}
	}
	groups, errs := a.everyGroup(ctx)
	if !target || errors.Join(errs...) != nil {
		return groups, errs
	}
	nsAct, err := a.s.moveAction(a.ns, "namespace", []byte(`{"delete": true}`))
	if err == nil {
		err = nsAct.onMaster(ctx, group.NamespaceGroup)
	}
	if err != nil {
		errs[group.NamespaceGroup] = fmt.Errorf("removing the namespace's verifier: %w", err)
	}
	return groups, errs
}

// importAll splits an exported batch by the group each key belongs to
// here and imports each part on its group's master.
func (a *moveAct) importAll(ctx context.Context, imp adminapi.MoveImport) ([]int, []error) {
	parts, err := a.s.svc.SplitImport(a.ns, imp.Pairs)
	if err != nil {
		return []int{0}, []error{err}
	}
	groups := make([]int, 0, len(parts))
	for g := range parts {
		groups = append(groups, g)
	}
	// Each group's part is its own proposal on its own master: all at
	// once, so a batch costs one round, not one per group.
	errs := make([]error, len(groups))
	var wg sync.WaitGroup
	for i, g := range groups {
		part := imp
		part.Pairs = parts[g]
		body, err := json.Marshal(part)
		if err != nil {
			errs[i] = err
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			sub := *a
			sub.body = body
			errs[i] = sub.onMaster(ctx, group.ID(g))
		}()
	}
	wg.Wait()
	return groups, errs
}

// onMaster takes the step in group g on its master: here when this node
// serves g, else forwarded to the master this node knows, again and
// again until it is taken, refused, or ctx ends.
func (a *moveAct) onMaster(ctx context.Context, g group.ID) error {
	return retry(ctx, 20*time.Millisecond, 500*time.Millisecond, func() error {
		if a.s.svc.Group(g).Serving() {
			return a.local(ctx, int(g), a.body)
		}
		return a.forward(ctx, g)
	}, func(err error) bool {
		return errors.Is(err, group.ErrMoveConflict) || errors.Is(err, group.ErrMoveBadBatch) ||
			errors.Is(err, wire.ErrInvalid) || errors.Is(err, group.ErrVersionRange)
	})
}

// forward asks group g's master, as this node knows it, to take the step
// in g (?group=g).
func (a *moveAct) forward(ctx context.Context, g group.ID) error {
	m := a.s.svc.Group(g).Consensus().Status().Master
	if m == 0 || m == paxos.NodeID(a.s.cfg.NodeID) {
		return errMoveGroupMaster
	}
	n := a.s.addr(m)
	if n.Admin == "" {
		return fmt.Errorf("group %d's master, node %d, has no admin address", g, m)
	}
	scheme := "http://"
	if a.s.sec.adminTLS != nil {
		scheme = "https://"
	}
	url := scheme + n.Admin + "/moves/" + a.ns + "/" + a.step + "?group=" + strconv.Itoa(int(g))
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(a.body))
	if err != nil {
		return fmt.Errorf("move step request: %w", err)
	}
	if a.s.sec.adminToken != "" {
		req.Header.Set("Authorization", "Bearer "+a.s.sec.adminToken)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := a.s.memberClient().Do(req)
	if err != nil {
		return fmt.Errorf("node %d: %w", m, err)
	}
	defer func() { _ = resp.Body.Close() }()
	var res adminapi.MoveResult
	_ = json.NewDecoder(io.LimitReader(resp.Body, 64<<10)).Decode(&res)
	switch resp.StatusCode {
	case http.StatusOK:
		return nil
	case http.StatusConflict:
		return fmt.Errorf("node %d: %s: %w", m, res.Error, group.ErrMoveConflict)
	case http.StatusBadRequest:
		return fmt.Errorf("node %d: %s: %w", m, res.Error, wire.ErrInvalid)
	}
	return fmt.Errorf("node %d: %s: %s", m, resp.Status, res.Error)
}

// moveStepOf is a moveAct as adminhttp.MoveStep.
type moveStepOf struct{ a *moveAct }

func (m moveStepOf) InGroup(ctx context.Context, g int) error { return m.a.local(ctx, g, m.a.body) }

func (m moveStepOf) Everywhere(ctx context.Context) ([]int, []error) { return m.a.all(ctx) }

// moveFrozen reports whether this node's replica of group g applied the
// freeze of move id of namespace ns; when not, why it is not, and the
// group's master when this node does not serve it (0 otherwise).
func (s *Server) moveFrozen(ns, id string, g group.ID) (uint32, string, bool) {
	lg := s.svc.Group(g)
	info := lg.StateMachine().MoveInfo(ns)
	if info.State == group.MoveFrozen && info.ID == id {
		return 0, "", true
	}
	var m uint32
	if !lg.Serving() {
		m = uint32(lg.Consensus().Status().Master)
	}
	return m, fmt.Sprintf("group %d: namespace %q is %s (move %q), not frozen by move %q", g, ns, info.State, info.ID, id), false
}

// exportMove gives group g's records of ns, frozen by move id, to emit
// in batches of about moveExportBatch bytes, and returns the end line's
// figures.
func (s *Server) exportMove(ns, id string, g group.ID, emit func(pairs []byte) error) (adminapi.MoveExportLine, error) {
	ex, err := s.svc.Group(g).ExportMove(ns, id, moveExportBatch, emit)
	if err != nil {
		return adminapi.MoveExportLine{}, err
	}
	return adminapi.MoveExportLine{Version: ex.Version, Applied: ex.Applied, Batches: ex.Batches, Locks: ex.Locks}, nil
}
