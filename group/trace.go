package group

import "github.com/paxlock/paxlock/client/wire"

// Stage is a point a traced request reaches on the master that serves
// it (see Trace).
type Stage uint8

// The stages of a request, in the order a blocking acquire meets them.
const (
	// StageQueued: a blocking acquire joined its key's queue.
	StageQueued Stage = iota
	// StageProposed: the command that carries the request (or, for a
	// waiter, its grant) was handed to Paxos.
	StageProposed
	// StageCommitted: that command's outcome is known: chosen and
	// applied (the status is the command's), or failed (the status is
	// the answer's).
	StageCommitted
	// StageGranted: a queued waiter was told its outcome (a grant, or a
	// timeout); by is the trace of the request whose command woke it (a
	// release), or nil.
	StageGranted
	// StageResponded: the request was answered.
	StageResponded
)

// Trace follows one traced request through the lock service, for the
// server's tracing spans; Request.Trace is nil when the request is not
// traced, and every stage is then one nil check, so an untraced request
// costs nothing more. A pointer keeps Request in its allocation size
// class.
type Trace struct {
	// Mark is told of each stage the request reaches, with the status
	// the stage ended in and, for StageGranted, the trace of the request
	// that woke the waiter (nil if none, or untraced). It runs on the
	// worker that serves the request's key, one stage at a time; it must
	// return at once.
	Mark func(s Stage, st wire.Status, by *Trace)
	// Ref is the server's own record of the request's trace (its span
	// context), which it reads back from a by trace.
	Ref any
}

// mark tells r's trace (if any) of stage s.
func (r *Request) mark(s Stage, st wire.Status, by *Trace) {
	if r != nil && r.Trace != nil {
		r.Trace.Mark(s, st, by)
	}
}

// traceOf is r's trace, or nil.
func traceOf(r *Request) *Trace {
	if r == nil {
		return nil
	}
	return r.Trace
}

// markProposed tells p's requester and the waiters it grants to that
// its command was proposed.
func (p *pending) markProposed() {
	p.req.mark(StageProposed, 0, nil)
	for _, q := range p.grants {
		q.req.mark(StageProposed, 0, nil)
	}
}

// markCommitted tells p's requester and waiters that its command's
// outcome is known, st being that outcome's status.
func (p *pending) markCommitted(st wire.Status) {
	p.req.mark(StageCommitted, st, nil)
	for _, q := range p.grants {
		q.req.mark(StageCommitted, st, nil)
	}
}

// traced reports whether p's requester or a waiter it grants to is
// traced: the only case in which p's stages are marked.
func (p *pending) traced() bool {
	if traceOf(p.req) != nil {
		return true
	}
	for _, q := range p.grants {
		if q.req.Trace != nil {
			return true
		}
	}
	return false
}

// committedStatus is the status StageCommitted reports for a command
// whose outcome is out, or whose failure is err.
func committedStatus(out *outcome, err error) wire.Status {
	if err != nil || out == nil {
		return statusOf(err)
	}
	return out.status
}
