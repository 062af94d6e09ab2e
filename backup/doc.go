// Package backup is the backup file's format: writing one, and reading
// one with its structure, counts and checksum checked. It knows the lock
// service's keyspace only as far as a group's end record counts it (the
// lock records and the group version); what a pair's value means is the
// state machine's (package group checks every record it knows while it
// reads, through Visitor.Pair). A tool that only moves or checks backup
// files links this package and not the lock service.
//
// A backup is a set of per-group consistent cuts: each lock group's
// state-machine image exactly as it was after one applied instance, with
// that instance and the group version. Groups are independent (no
// operation spans two), so there is no instant at which the whole cluster
// is cut, and none is needed.
//
// The file is a magic line followed by records, each a type byte, a
// uvarint payload length and the payload:
//
//	'H' header, JSON (Header)
//	per group, in order 0, 1, ...:
//	  'G' group start, JSON (Group: group, applied, master)
//	  'P' zero or more chunks of pairs (codec.AppendPair)
//	  'E' group end, JSON (Group: group, applied, master, version, locks, pairs)
//	'Z' SHA-256 of every byte of the file before this record
//
// and nothing after the 'Z' record.
//
// # Files by job
//
//   - doc.go: the format, as above.
//   - format.go: Header, Group, Info, the record types and the keys a
//     group's end record counts.
//   - write.go: Writer.
//   - read.go: Read and Visitor.
package backup
