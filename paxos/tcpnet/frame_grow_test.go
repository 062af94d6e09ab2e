package tcpnet

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"testing"
)

// TestFrameReaderGrowsWithArrivals: a peer that declares a 16 MiB frame and
// sends 100 bytes of it costs the reader a buffer sized by what arrived, not
// by the declared length.
func TestFrameReaderGrowsWithArrivals(t *testing.T) {
	const declared = 16 << 20
	var in bytes.Buffer
	var hdr [4]byte
	binary.BigEndian.PutUint32(hdr[:], declared)
	in.Write(hdr[:])
	in.Write(make([]byte, 100))
	r := frameReader{br: bufio.NewReaderSize(&in, 4096), max: 32 << 20}
	if _, err := r.next(); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("half-sent frame: err %v, want unexpected EOF", err)
	}
	if c := cap(r.scratch); c > 64<<10 {
		t.Fatalf("reader holds a %d-byte buffer for a frame of which 100 bytes arrived", c)
	}
}
