package server

import (
	"time"

	"github.com/paxlock/paxlock/client/wire"
	"github.com/paxlock/paxlock/group"
)

// requestOf translates a request on one key into the lock service's
// Request: its operation and the fields the wire message carries for it.
// The caller fills in who asks and where the answer goes (Namespace,
// Hash, ReqID, Sink, Start). False for a message that is no such request.
// m is validated (wire.Request.Validate): lock-delays are at most
// wire.MaxLockDelayMs.
func requestOf(m wire.Message) (*group.Request, bool) {
	r := &group.Request{}
	switch m := m.(type) {
	case *wire.Acquire:
		r.Op, r.Key, r.Owner, r.Kind, r.Flags, r.Weight = group.OpAcquire, m.Key, m.Owner, m.Kind, m.Flags, m.Weight
		r.TTL = time.Duration(m.TTLMs) * time.Millisecond
		r.MaxWait = waitDuration(m.MaxWaitMs)
		r.WaitedMs = m.WaitedMs
		r.WaitID, r.Value = m.WaitID, m.Value
		r.Permits, r.Limit = m.Permits, m.Limit
		r.LockDelayMs = uint16(min(m.LockDelayMs, wire.MaxLockDelayMs))
		r.MaxHoldMs = min(m.MaxHoldMs, wire.MaxHoldLimitMs)
	case *wire.Renew:
		r.Op, r.Key, r.Owner, r.Token = group.OpRenew, m.Key, m.Owner, m.Token
		r.TTL = time.Duration(m.TTLMs) * time.Millisecond
		r.SetValue, r.Value = m.SetValue, m.Value
	case *wire.Release:
		r.Op, r.Key, r.Owner, r.Token = group.OpRelease, m.Key, m.Owner, m.Token
		r.Permits = m.KeepPermits
		if m.PassOnID != 0 {
			r.PassOn = wire.Owner{Client: m.Owner.Client, ID: m.PassOnID}
			r.TTL = time.Duration(m.PassOnTTLMs) * time.Millisecond
			r.Value = m.PassOnValue
			r.LockDelayMs = uint16(min(m.PassOnLockDelayMs, wire.MaxLockDelayMs))
		}
	case *wire.State:
		r.Op, r.Key, r.Token = group.OpState, m.Key, m.Token
	case *wire.Watch:
		r.Op, r.Key, r.WatchID, r.Token, r.Flags = group.OpWatch, m.Key, m.WatchID, m.Token, m.Flags
		r.MaxWait = waitDuration(m.MaxWaitMs)
	case *wire.Unwatch:
		r.Op, r.Key, r.WatchID = group.OpUnwatch, m.Key, m.WatchID
	case *wire.CancelWait:
		r.Op, r.Key, r.Owner, r.WaitID = group.OpCancelWait, m.Key, m.Owner, m.WaitID
	default:
		return nil, false
	}
	return r, true
}

// waitDuration is a wire wait in milliseconds as a duration: negative
// for wire.WaitForever.
func waitDuration(ms uint32) time.Duration {
	if ms == wire.WaitForever {
		return -1
	}
	return time.Duration(ms) * time.Millisecond
}
