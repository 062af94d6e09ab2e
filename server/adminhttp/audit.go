package adminhttp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/paxlock/paxlock/adminapi"
)

// The audit log: every change asked of the admin endpoint (a request
// other than GET and HEAD that passed the token and adminguard's checks)
// leaves a record in lock group 0's audit table once the handler has
// answered, with who asked (auditActor), from where, what (auditAction,
// auditTarget) and the outcome. A request redirected to another node
// leaves none here: the node that serves it records it. The record is
// proposed before the answer leaves the handler, so an answer that says
// a change was made comes after its record was chosen, unless the
// proposal failed, which is logged ("audit record not kept").

const (
	// auditTimeout bounds the proposal of one record.
	auditTimeout = 5 * time.Second
	// auditPeek is how much of a request's body the record reads its
	// target from; a larger body is passed on whole, its target unread.
	auditPeek = 8 << 10
	// DefaultAuditLimit and MaxAuditLimit bound a GET /audit page.
	DefaultAuditLimit = 100
	MaxAuditLimit     = 10000
)

// AuditQuery selects records of GET /audit.
type AuditQuery struct {
	// Since selects records with a Seq above it; Limit bounds them.
	Since uint64
	Limit int
	// Action and Namespace, when set, select records with them.
	Action, Namespace string
}

// AuditNode is what the audit log asks of the node (Config.Audit).
type AuditNode interface {
	// Audit appends r to the audit log through lock group 0: proposed
	// when this node masters it, else relayed to its master (POST
	// /audit). The node fills in r's Node and Time unless relayed is
	// set: a relayed record is proposed here or refused with
	// ErrNotSystemMaster, never relayed again.
	Audit(ctx context.Context, r adminapi.AuditRecord, relayed bool) error
	// AuditLog reads this node's replica of the audit log.
	AuditLog(q AuditQuery) adminapi.AuditLog
}

// audited wraps next so that every change it answers is recorded (see
// above); without Config.Audit it is next.
func (h *handler) audited(next http.Handler) http.Handler {
	if h.Audit == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		action, ok := auditAction(r)
		if !ok {
			next.ServeHTTP(w, r)
			return
		}
		body := peekBody(r)
		aw := &auditWriter{ResponseWriter: w}
		next.ServeHTTP(aw, r)
		if aw.status == http.StatusTemporaryRedirect || aw.status == http.StatusPermanentRedirect {
			return
		}
		rec := adminapi.AuditRecord{Actor: auditActor(r, h.Token), Source: r.RemoteAddr, Action: action, Outcome: aw.outcome()}
		rec.Namespace, rec.Target = auditTarget(r, body)
		ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), auditTimeout)
		defer cancel()
		if err := h.Audit.Audit(ctx, rec, false); err != nil {
			h.Log.Error("audit record not kept", "action", rec.Action, "namespace", rec.Namespace, "target", rec.Target, "actor", rec.Actor, "source", rec.Source, "outcome", rec.Outcome, "err", err)
		}
	})
}

// peekBody reads up to auditPeek bytes of r's body for the record and
// puts them back in front of the rest; it returns them when they are the
// whole body, else nil.
func peekBody(r *http.Request) []byte {
	if r.Body == nil || r.Body == http.NoBody {
		return nil
	}
	b, err := io.ReadAll(io.LimitReader(r.Body, auditPeek+1))
	r.Body = readCloser{io.MultiReader(bytes.NewReader(b), r.Body), r.Body}
	if err != nil || len(b) > auditPeek {
		return nil
	}
	return b
}

type readCloser struct {
	io.Reader
	io.Closer
}

// auditWriter keeps the status of an answer and the start of an error's
// text.
type auditWriter struct {
	http.ResponseWriter
	status int
	text   []byte
}

func (w *auditWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *auditWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	if w.status >= 300 && len(w.text) < 200 {
		w.text = append(w.text, b[:min(len(b), 200-len(w.text))]...)
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (w *auditWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// outcome is the record's Outcome for the answer written.
func (w *auditWriter) outcome() string {
	switch {
	case w.status == http.StatusAccepted:
		return "pending"
	case w.status < 300:
		return "ok"
	}
	msg := string(bytes.TrimSpace(w.text))
	if i := bytes.IndexByte(w.text, '\n'); i >= 0 {
		msg = string(bytes.TrimSpace(w.text[:i]))
	}
	return fmt.Sprintf("HTTP %d: %s", w.status, msg)
}

// auditRead is GET /audit?since=&limit=&action=&namespace=: this node's
// replica of the audit log, oldest first.
func (h *handler) auditRead(w http.ResponseWriter, r *http.Request) {
	if h.Audit == nil {
		http.Error(w, "no audit log on this node", http.StatusNotFound)
		return
	}
	q, err := parseAuditQuery(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	writeJSON(w, http.StatusOK, h.Audit.AuditLog(q))
}

func parseAuditQuery(r *http.Request) (AuditQuery, error) {
	v := r.URL.Query()
	q := AuditQuery{Limit: DefaultAuditLimit, Action: v.Get("action"), Namespace: v.Get("namespace")}
	if s := v.Get("since"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return q, fmt.Errorf("since: want a record's seq, got %q", s)
		}
		q.Since = n
	}
	if s := v.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > MaxAuditLimit {
			return q, fmt.Errorf("limit: want 1 to %d, got %q", MaxAuditLimit, s)
		}
		q.Limit = n
	}
	return q, nil
}

// auditRelay is POST /audit: a record a peer relays to the master of
// lock group 0 (AuditNode.Audit). It is not itself recorded.
func (h *handler) auditRelay(w http.ResponseWriter, r *http.Request) {
	if h.Audit == nil {
		http.Error(w, "no audit log on this node", http.StatusNotFound)
		return
	}
	var rec adminapi.AuditRecord
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 16<<10))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rec); err != nil || rec.Action == "" {
		http.Error(w, "body: want an audit record", http.StatusBadRequest)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), auditTimeout)
	defer cancel()
	switch err := h.Audit.Audit(ctx, rec, true); {
	case err == nil:
		w.WriteHeader(http.StatusNoContent)
	case errors.Is(err, ErrNotSystemMaster):
		http.Error(w, fmt.Sprintf("this node does not master lock group 0 (master: node %d)", h.Node.SystemMaster()), http.StatusServiceUnavailable)
	default:
		http.Error(w, err.Error(), http.StatusInternalServerError)
	}
}
