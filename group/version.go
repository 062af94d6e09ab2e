package group

import (
	"context"
	"errors"
	"fmt"

	"github.com/paxlock/paxlock/client/wire"
	"github.com/paxlock/paxlock/paxos"
)

// ErrVersionRange refuses a group version beyond MaxGroupVersion: a token
// keeps the version in its top 16 bits.
var ErrVersionRange = errors.New("group: group version out of range")

// RaiseVersion raises the group's version to v through Paxos
// (opSetVersion), so that every grant chosen after it carries a token
// v<<48 | instance on every replica: above every token granted before,
// whatever the instance numbers (moving keys into the group, as a
// namespace migration does, needs their next tokens above those the keys
// had where they come from). A v at or below the current version changes
// nothing. It returns the group version once the command is applied.
// This node must serve the group (else ErrNotMaster), and v must be at
// most MaxGroupVersion (else ErrVersionRange, nothing proposed). When ctx
// ends first the outcome is unknown: the raise may still be chosen.
//
// A restore does not use it: it raises the version in the image it
// writes before any node starts (RestoreBackup), because its instances
// start afresh, and a grant chosen before a proposed raise would get a
// token below the backup's.
func (g *Group) RaiseVersion(ctx context.Context, v uint64) (uint64, error) {
	if v > MaxGroupVersion {
		return 0, fmt.Errorf("%w: %d, at most %d", ErrVersionRange, v, MaxGroupVersion)
	}
	if !g.px.Status().Serving {
		return 0, ErrNotMaster
	}
	res, err := propose(ctx, g.px, appendCommand(nil, &command{op: opSetVersion, token: v}))
	switch {
	case errors.Is(err, paxos.ErrNotMaster):
		return 0, ErrNotMaster
	case err != nil:
		return 0, fmt.Errorf("group: raise group %d's version: %w", g.id, err)
	}
	out, _ := res.Value.(*outcome)
	switch {
	case out == nil:
		return 0, fmt.Errorf("group: raise group %d's version: no outcome", g.id)
	case out.status != wire.StatusSuccess:
		return 0, fmt.Errorf("group: raise group %d's version: %s", g.id, out.status)
	}
	return out.token, nil
}
