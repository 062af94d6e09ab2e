package paxostest

import (
	"strings"

	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

// WALFaults returns a switch (off until its On is called) that fails,
// with errorfs.ErrInjected, every write and sync of a Pebble store's WAL
// files: a store on errorfs.Wrap(fs, WALFaults()) meets a failing disk
// when a test says so. errorfs does not wrap the files ReuseForWrite
// returns (recycled WAL files): turn it on before Pebble rotates its first
// WAL.
func WALFaults() *errorfs.Toggle {
	return &errorfs.Toggle{Injector: errorfs.InjectorFunc(func(op errorfs.Op) error {
		if !strings.HasSuffix(op.Path, ".log") {
			return nil
		}
		switch op.Kind {
		case errorfs.OpFileWrite, errorfs.OpFileWriteAt, errorfs.OpFileSync, errorfs.OpFileSyncData, errorfs.OpFileSyncTo:
			return errorfs.ErrInjected
		}
		return nil
	})}
}
