package client

import (
	"context"
	"fmt"
	"slices"

	"github.com/paxlock/paxlock/client/wire"
)

// ErrUnknownPermit reports a PermitID that names no permit the Semaphore
// handle holds: one of another grant (another token), one already given
// back, an index past the grant's permits, or the same id twice in one
// call. It wraps ErrInvalid.
var ErrUnknownPermit = fmt.Errorf("%w: unknown permit", ErrInvalid)

// PermitID names one permit of a Semaphore handle's grant: the grant's
// fencing token and the permit's index, 0 to n-1, among the n permits the
// Acquire took. The server counts a holder's permits and does not name
// them; the ids are the handle's bookkeeping, there so that a program can
// hand the permits of one Acquire to its tasks and give them back one by
// one with ReleasePermits. Ids of permits given back are no longer valid,
// and none of a grant is valid once it is released or lost.
type PermitID struct {
	// Token is the grant's fencing token (Semaphore.Token).
	Token uint64
	// Index is the permit's place among the grant's permits.
	Index uint32
}

// PermitIDs returns the ids of the permits the handle holds, in index
// order, or nil when it holds none (see Held).
func (s *Semaphore) PermitIDs() []PermitID {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.m.Held() {
		return nil
	}
	return slices.Clone(s.ids)
}

// ReleasePermits gives back the permits ids name and keeps the handle's
// others: the grant keeps its token, TTL and auto-renewal, and waiters
// that the freed permits let in are granted by the same step. Giving back
// every permit the handle holds is Release. The ids are checked before
// anything is sent: none, an id the handle does not hold, or one twice is
// an error wrapping ErrUnknownPermit (and ErrInvalid), with nothing given
// back. It returns an error wrapping ErrNotHeld when the handle holds
// nothing, and, as Release does, one wrapping ErrLockLost when the grant
// was lost. A server that predates partial releases frees the whole grant:
// the handle then holds nothing and the error wraps ErrLockLost.
func (s *Semaphore) ReleasePermits(ctx context.Context, ids ...PermitID) error {
	if s == nil {
		return invalid("nil *Semaphore")
	}
	if s.err != nil {
		return s.err
	}
	if err := s.m.check(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	h := s.m.held()
	if h == nil {
		return s.m.wrap("release permits", ErrNotHeld)
	}
	keep, err := s.remaining(h.token, ids)
	if err != nil {
		return err
	}
	if len(keep) == 0 {
		return s.releaseLocked(ctx)
	}
	if !h.valid() {
		return s.releaseLocked(ctx) // the grant is lost: ErrLockLost
	}
	res, err := s.m.c.do(ctx, "release permits", s.m.key, s.m.hash, wire.TypeRelease,
		&wire.Release{Key: s.m.key, Owner: s.m.owner, Token: h.token, KeepPermits: uint32(len(keep))})
	if err != nil {
		return err
	}
	r := res.resp
	switch {
	case r.Status == wire.StatusSuccess && r.Permits == uint32(len(keep)):
		s.ids, s.held = keep, len(keep)
		// A re-sent acquire (an outcome the client does not know) asks
		// for what the grant has now.
		s.f.n.Store(uint32(len(keep)))
		return nil
	case r.Status == wire.StatusSuccess:
		_ = s.releaseLocked(ctx) // the hold is gone; forget it
		return fmt.Errorf("client: semaphore %q: the server released the whole grant (it predates partial releases): %w", s.m.key, ErrLockLost)
	case lostStatus(r.Status):
		_ = s.releaseLocked(ctx)
		return fmt.Errorf("client: semaphore %q: release permits: %w", s.m.key, ErrLockLost)
	}
	return statusErr("release permits", s.m.key, r)
}

// remaining returns the handle's permit ids less ids, all of which must
// be the handle's (grant token), each once.
func (s *Semaphore) remaining(token uint64, ids []PermitID) ([]PermitID, error) {
	if len(ids) == 0 {
		return nil, fmt.Errorf("%w: semaphore %q: no permit ids", ErrUnknownPermit, s.m.key)
	}
	keep := slices.Clone(s.ids)
	for _, id := range ids {
		i := slices.Index(keep, id)
		if id.Token != token || i < 0 {
			return nil, fmt.Errorf("%w: semaphore %q: permit %d of token %d is not held by the handle (or named twice)", ErrUnknownPermit, s.m.key, id.Index, id.Token)
		}
		keep = slices.Delete(keep, i, i+1)
	}
	return keep, nil
}

// permitIDs returns the ids of a grant of n permits with token.
func permitIDs(token uint64, n int) []PermitID {
	ids := make([]PermitID, n)
	for i := range ids {
		ids[i] = PermitID{Token: token, Index: uint32(i)}
	}
	return ids
}
