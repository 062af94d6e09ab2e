package group

import (
	"context"
	"fmt"

	"github.com/paxlock/paxlock/paxos"
	"github.com/paxlock/paxlock/systable"
)

// The audit log is group 0's table systable.Audit: the last records of
// the changes made through the admin API, the same on every replica of
// group 0. This file applies an audit command and is the Service's side
// of the table.

// opAudit appends an audit record (group 0 only): data = the record and
// the bound (systable.EncodeAuditCommand).
const opAudit op = 29

// AuditRecord is one audit record (systable.AuditRecord).
type AuditRecord = systable.AuditRecord

// AuditFilter selects audit records in a read (systable.AuditFilter).
type AuditFilter = systable.AuditFilter

// DefaultAuditKeep is how many audit records group 0 keeps by default.
const DefaultAuditKeep = systable.DefaultAuditKeep

// MaxAuditKeep bounds how many audit records group 0 keeps.
const MaxAuditKeep = systable.MaxAuditKeep

func auditOp(sm *StateMachine, c *command, w paxos.Writer) any {
	// Apply sets sm.applied to the instance before it applies any command.
	return sm.audit.Apply(sm.applied, c.data, w)
}

// ProposeAudit appends r to the audit log through group 0, which this
// node must master (else ErrNotSystemMaster); the log then keeps its
// last keep records on every replica. Seq and Instance are set by the
// apply. When ctx ends first the outcome is unknown.
func (s *Service) ProposeAudit(ctx context.Context, keep int, r AuditRecord) error {
	res, err := s.proposeTable(ctx, &command{op: opAudit, data: systable.EncodeAuditCommand(keep, r)}, "audit record")
	if err != nil {
		return err
	}
	if o, _ := res.(systable.AuditOutcome); o != systable.AuditApplied {
		return fmt.Errorf("group: audit record: %v", res)
	}
	return nil
}

// AuditRecords returns the audit records f selects from this node's
// replica of group 0, oldest first.
func (s *Service) AuditRecords(f AuditFilter) []AuditRecord {
	return s.groups[NamespaceGroup].sm.audit.Read(f)
}

// AuditLen returns how many audit records this node's replica holds.
func (s *Service) AuditLen() int { return s.groups[NamespaceGroup].sm.audit.Len() }
