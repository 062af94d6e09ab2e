package backup

import (
	"bufio"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"

	"github.com/paxlock/paxlock/internal/codec"
)

// Writer writes a backup file. It streams: it holds no pairs, and a
// group's pairs are written in the chunks its caller hands it.
type Writer struct {
	bw     *bufio.Writer
	h      hash.Hash
	hdr    Header
	next   int    // the next group to start
	cur    *Group // the group being written, nil between groups
	err    error
	closed bool
}

// NewWriter writes the magic line and header h (Format is set) to w.
func NewWriter(w io.Writer, h Header) (*Writer, error) {
	h.Format = Format
	bw := &Writer{bw: bufio.NewWriterSize(w, 256<<10), h: sha256.New(), hdr: h}
	bw.raw([]byte(magic))
	bw.json(recHeader, h)
	return bw, bw.err
}

func (w *Writer) raw(b []byte) {
	if w.err != nil {
		return
	}
	w.h.Write(b)
	_, w.err = w.bw.Write(b)
}

func (w *Writer) record(typ byte, payload []byte) {
	var hdr [1 + binary.MaxVarintLen64]byte
	hdr[0] = typ
	n := binary.PutUvarint(hdr[1:], uint64(len(payload)))
	w.raw(hdr[:1+n])
	w.raw(payload)
}

func (w *Writer) json(typ byte, v any) {
	b, err := json.Marshal(v)
	if err != nil && w.err == nil {
		w.err = err
	}
	w.record(typ, b)
}

// StartGroup starts the next group's image, of applied instance applied
// (taken on the group's master when master), and returns its number.
func (w *Writer) StartGroup(applied uint64, master bool) (int, error) {
	if w.cur != nil {
		return 0, fmt.Errorf("backup: group %d not ended", w.cur.Group)
	}
	if w.next >= w.hdr.Groups {
		return 0, fmt.Errorf("backup: group %d of %d", w.next, w.hdr.Groups)
	}
	w.cur = &Group{Group: w.next, Applied: applied, Master: master}
	w.next++
	w.json(recGroupStart, *w.cur)
	return w.cur.Group, w.err
}

// Pairs writes a chunk of the current group's pairs (codec.AppendPair),
// counting them for its end record. An empty chunk writes nothing.
func (w *Writer) Pairs(chunk []byte) error {
	if w.cur == nil {
		return errors.New("backup: pairs outside a group")
	}
	if len(chunk) == 0 {
		return w.err
	}
	if err := codec.EachPair(chunk, w.cur.count); err != nil {
		return fmt.Errorf("backup: group %d: %w", w.cur.Group, err)
	}
	w.record(recPairs, chunk)
	return w.err
}

// EndGroup ends the current group and returns what was written of it.
func (w *Writer) EndGroup() (Group, error) {
	if w.cur == nil {
		return Group{}, errors.New("backup: no group to end")
	}
	g := *w.cur
	w.cur = nil
	w.json(recGroupEnd, g)
	return g, w.err
}

// Close writes the checksum and flushes. It fails unless every group of
// the header was written and ended.
func (w *Writer) Close() error {
	if w.err != nil {
		return w.err
	}
	if w.closed {
		return errors.New("backup: closed twice")
	}
	w.closed = true
	if w.next != w.hdr.Groups || w.cur != nil {
		return fmt.Errorf("backup: %d of %d groups written", w.next, w.hdr.Groups)
	}
	w.record(recTrailer, w.h.Sum(nil))
	if w.err == nil {
		w.err = w.bw.Flush()
	}
	return w.err
}
