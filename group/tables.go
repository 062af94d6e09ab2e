package group

import (
	"context"
	"errors"
	"fmt"

	"github.com/paxlock/paxlock/paxos"
)

// Group 0's tables. Every group's state machine holds the lock table;
// group 0's also holds the system tables (namespaces and their verifiers,
// quotas, the member list, the registry's tables). applyCommand sends a
// command to the table it changes, and each system table answers with an
// outcome type of its own (systable.NamespaceOutcome,
// systable.QuotaOutcome, systable.MemberOutcome, regOutcome), never a
// lock status: the proposer (proposeTable) turns it into an error, and
// none of them reaches the wire.

// applyCommand applies one decoded command chosen at instance to the
// table it changes and returns that table's outcome: *outcome for the
// lock table and the move steps, a system table's own type otherwise.
func (sm *StateMachine) applyCommand(instance uint64, c *command, w paxos.Writer) any {
	switch c.op {
	case opNamespacePut, opNamespaceDelete, opNamespaceInit:
		return sm.applyNamespace(c, w)
	case opMemberPut:
		return sm.members.ApplyPut(c.data, w)
	case opMemberInit:
		return sm.members.ApplyInit(c.data, w)
	case opRegCluster, opRegNamespace, opRegMove:
		return sm.applyRegistry(c, w)
	case opNamespaceQuota:
		return sm.applyQuota(c, w)
	case opFreeze, opUnfreeze, opImport, opOwn, opDropNamespace, opIncoming:
		return sm.applyMove(c)
	}
	return sm.apply(instance, c, w)
}

// proposeTable proposes c, a change to a system table, in the namespace
// group, which this node must master (else ErrNotSystemMaster), and
// returns the table's outcome; what names the change in errors.
func (s *Service) proposeTable(ctx context.Context, c *command, what string) (any, error) {
	px := s.groups[NamespaceGroup].px
	if !px.Status().Serving {
		return nil, ErrNotSystemMaster
	}
	res, err := propose(ctx, px, appendCommand(nil, c))
	if err != nil {
		if errors.Is(err, paxos.ErrNotMaster) {
			return nil, ErrNotSystemMaster
		}
		return nil, fmt.Errorf("group: %s: %w", what, err)
	}
	if res.Value == nil {
		return nil, fmt.Errorf("group: %s: no outcome", what)
	}
	return res.Value, nil
}

// propose submits cmd to px and waits until it is applied or failed, or
// ctx ends. When ctx ends first the outcome is unknown: the command may
// still be chosen.
func propose(ctx context.Context, px Consensus, cmd []byte) (paxos.Result, error) {
	ch := make(chan paxos.Result, 1)
	px.Submit(cmd, func(r paxos.Result) { ch <- r })
	select {
	case r := <-ch:
		return r, r.Err
	case <-ctx.Done():
		return paxos.Result{}, fmt.Errorf("propose: %w", ctx.Err())
	}
}
