package group

import (
	"context"
	"errors"
	"fmt"

	"github.com/paxlock/paxlock/paxos"
	"github.com/paxlock/paxlock/systable"
)

// Group 0's tables. Every group's state machine holds the lock table and
// its move records; group 0's also holds the system tables of package
// systable (namespaces and their verifiers, quotas, the member list, the
// registry's tables). The state machine is a multiplexer over them:
// applyCommand sends a command to the table it changes (tableOps) and
// Load sends a keyspace pair to the table that claims it
// (systemTables). Each system table answers with an outcome type of its
// own (systable.NamespaceOutcome, QuotaOutcome, MemberOutcome,
// RegistryOutcome), never a lock status: the proposer (proposeTable)
// turns it into an error, and none of them reaches the wire.

// applyCommand applies one decoded command chosen at instance to the
// table it changes (tableOps; the lock table's ops are not listed) and
// returns that table's outcome: *outcome for the lock table, a table's
// own type otherwise.
func (sm *StateMachine) applyCommand(instance uint64, c *command, w paxos.Writer) any {
	if int(c.op) < len(tableOps) {
		if f := tableOps[c.op]; f != nil {
			// A call through a func value lets its arguments escape: the
			// copy keeps c itself on Apply's stack, which the lock table's
			// commands would otherwise pay for with an allocation each.
			tc := *c
			return f(sm, &tc, w)
		}
	}
	return sm.apply(instance, c, w)
}

// tableApply applies one command to a table other than the lock table.
type tableApply func(sm *StateMachine, c *command, w paxos.Writer) any

// tableOps sends each op of a system table, and each move step, to the
// table it changes.
var tableOps = [...]tableApply{
	opNamespacePut:    namespaceOp,
	opNamespaceDelete: namespaceOp,
	opNamespaceInit:   namespaceOp,
	opNamespaceQuota:  quotaOp,
	opMemberPut:       memberPutOp,
	opMemberInit:      memberInitOp,
	opRegCluster:      registryOp,
	opRegNamespace:    registryOp,
	opRegMove:         registryOp,
	opFreeze:          moveOp,
	opUnfreeze:        moveOp,
	opImport:          moveOp,
	opOwn:             moveOp,
	opDropNamespace:   moveOp,
	opIncoming:        moveOp,
	opAudit:           auditOp,
}

func namespaceOp(sm *StateMachine, c *command, w paxos.Writer) any { return sm.applyNamespace(c, w) }
func quotaOp(sm *StateMachine, c *command, w paxos.Writer) any     { return sm.applyQuota(c, w) }
func registryOp(sm *StateMachine, c *command, w paxos.Writer) any  { return sm.applyRegistry(c, w) }
func moveOp(sm *StateMachine, c *command, _ paxos.Writer) any      { return sm.applyMove(c) }

func memberPutOp(sm *StateMachine, c *command, w paxos.Writer) any {
	return sm.members.ApplyPut(c.data, w)
}

func memberInitOp(sm *StateMachine, c *command, w paxos.Writer) any {
	return sm.members.ApplyInit(c.data, w)
}

// systemTables returns group 0's system tables as Load and a backup see
// them; no two claim one key.
func (sm *StateMachine) systemTables() []systable.Table {
	return []systable.Table{&sm.ns, &sm.quotas, &sm.members, &sm.reg, &sm.audit}
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
