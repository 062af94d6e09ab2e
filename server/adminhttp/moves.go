package adminhttp

// Moving a namespace between clusters: the admin endpoints a move's
// driver calls on the source and target clusters (adminapi/move.go lists
// them; docs/design.md, "Moving a namespace", is the protocol). The node
// takes a step in every lock group on its master (MoveNode).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/paxlock/paxlock/adminapi"
	"github.com/paxlock/paxlock/client/wire"
)

// moveStepTimeout bounds one move step over every group.
const moveStepTimeout = 30 * time.Second

// maxMoveBody bounds a step's body (an import batch's pairs in base64).
const maxMoveBody = 4 << 20

// MoveNode is what the namespace-move endpoints ask of the node.
type MoveNode interface {
	// MoveStatus is namespace ns's move state in every lock group, as
	// this node's replicas have applied it.
	MoveStatus(ns string) adminapi.MoveStatus
	// MoveStep decodes step's body for namespace ns; an error is a bad
	// request.
	MoveStep(ns, step string, body []byte) (MoveStep, error)
	// MoveFrozen reports whether this node's replica of lock group g has
	// applied the freeze of move id of namespace ns; when not, why says
	// what state it is in, and master is the group's master when this
	// node does not serve g (0 otherwise), where the export is asked.
	MoveFrozen(ns, id string, g int) (master uint32, why string, ok bool)
	// ExportMove gives group g's records of ns, frozen by move id, to
	// emit in batches, and returns the export's end line.
	ExportMove(ns, id string, g int, emit func(pairs []byte) error) (adminapi.MoveExportLine, error)
}

// MoveStep is one decoded move step.
type MoveStep interface {
	// InGroup takes the step in lock group g, which this node must
	// master (a step forwarded with ?group=G).
	InGroup(ctx context.Context, g int) error
	// Everywhere takes it in every group it concerns, each on its
	// master, and gives each group's outcome.
	Everywhere(ctx context.Context) ([]int, []error)
}

func (h *handler) moveRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /moves/{ns}", h.moveStatus)
	mux.HandleFunc("GET /moves/{ns}/export", h.moveExport)
	mux.HandleFunc("POST /moves/{ns}/{step}", h.moveStep)
}

func (h *handler) moveStatus(w http.ResponseWriter, r *http.Request) {
	ns := r.PathValue("ns")
	if err := wire.ValidateNamespace(ns); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(h.Node.MoveStatus(ns))
}

// moveStep serves POST /moves/{ns}/{step}: in every group, or with
// ?group=G in that one, which this node must master.
func (h *handler) moveStep(w http.ResponseWriter, r *http.Request) {
	ns, step := r.PathValue("ns"), r.PathValue("step")
	if err := wire.ValidateNamespace(ns); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxMoveBody))
	if err != nil {
		http.Error(w, "body: "+err.Error(), http.StatusRequestEntityTooLarge)
		return
	}
	act, err := h.Node.MoveStep(ns, step, body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), moveStepTimeout)
	defer cancel()
	if q := r.URL.Query().Get("group"); q != "" {
		g, err := strconv.Atoi(q)
		if err != nil || g < 0 || g >= h.Node.Groups() {
			http.Error(w, "group: want a group number of this cluster", http.StatusBadRequest)
			return
		}
		err = act.InGroup(ctx, g)
		h.answerMove(w, ns, step, []int{g}, []error{err})
		return
	}
	groups, errs := act.Everywhere(ctx)
	h.answerMove(w, ns, step, groups, errs)
}

// answerMove writes a step's MoveResult: 409 when a group refused it,
// 503 when one could not take it, 200 when all did.
func (h *handler) answerMove(w http.ResponseWriter, ns, step string, groups []int, errs []error) {
	res := adminapi.MoveResult{Done: []int{}, Pending: []int{}}
	code := http.StatusOK
	for i, err := range errs {
		if err == nil {
			res.Done = append(res.Done, groups[i])
			continue
		}
		res.Pending = append(res.Pending, groups[i])
		c := http.StatusServiceUnavailable
		switch {
		case errors.Is(err, ErrConflict):
			c = http.StatusConflict
		case errors.Is(err, ErrBadInput), errors.Is(err, wire.ErrInvalid):
			c = http.StatusBadRequest
		}
		if res.Error == "" || c != http.StatusServiceUnavailable && code == http.StatusServiceUnavailable {
			res.Error = fmt.Sprintf("group %d: %v", groups[i], err)
			code = c
		}
	}
	if code == http.StatusOK {
		h.Log.Info("namespace move step", "namespace", ns, "step", step, "groups", len(res.Done))
	} else {
		h.Log.Warn("namespace move step not taken", "namespace", ns, "step", step, "pending", res.Pending, "err", res.Error)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(res)
}

// moveExport serves GET /moves/{ns}/export?group=G&id=ID: group G's
// records of the namespace from this node's replica, which must have
// applied the group's freeze of move ID, as lines of
// adminapi.MoveExportLine; a node whose replica has not redirects to the
// group's master (307).
func (h *handler) moveExport(w http.ResponseWriter, r *http.Request) {
	ns := r.PathValue("ns")
	q := r.URL.Query()
	g, err := strconv.Atoi(q.Get("group"))
	if err != nil || g < 0 || g >= h.Node.Groups() {
		http.Error(w, "group: want a group number of this cluster", http.StatusBadRequest)
		return
	}
	id := q.Get("id")
	if err := wire.ValidateNamespace(ns); err != nil || id == "" {
		http.Error(w, "want a namespace and ?id=", http.StatusBadRequest)
		return
	}
	if m, why, ok := h.Node.MoveFrozen(ns, id, g); !ok {
		if m != 0 && h.redirectTo(w, r, m) {
			return
		}
		http.Error(w, why, http.StatusConflict)
		return
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	sw := NewStreamWriter(w, h.WriteTimeout)
	enc := json.NewEncoder(sw)
	batch := 0
	end, err := h.Node.ExportMove(ns, id, g, func(pairs []byte) error {
		if err := enc.Encode(adminapi.MoveExportLine{Group: g, Batch: batch, Pairs: pairs}); err != nil {
			return err
		}
		batch++
		_ = sw.Flush() // a failed write shows in the next Encode
		return r.Context().Err()
	})
	if err != nil {
		_ = enc.Encode(adminapi.MoveExportLine{Group: g, Batch: batch, Error: err.Error()})
		return
	}
	end.Group, end.Batch, end.End = g, batch, true
	_ = enc.Encode(end)
}
