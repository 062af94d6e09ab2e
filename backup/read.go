package backup

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"

	"github.com/paxlock/paxlock/internal/codec"
)

// Visitor receives a backup's contents as Read reads them. Any function
// may be nil; an error it returns ends the read.
type Visitor struct {
	Header func(h Header) error
	// Pair checks one of group g's pairs (valid during the call) before
	// the chunk holding it goes to Pairs.
	Pair func(g int, k, v []byte) error
	// Pairs gets a chunk of group g's pairs (valid during the call).
	Pairs func(g int, chunk []byte) error
	// GroupEnd gets a group once all its pairs were read and checked.
	GroupEnd func(g Group) error
}

// Read reads a whole backup from r, checks its format, structure, counts
// and checksum, and calls v along the way. The checksum is known good only
// when it returns nil: a caller that must not act on a bad file reads it
// twice, once to check and once to act.
func Read(r io.Reader, v Visitor) (Info, error) {
	var info Info
	rr := recordReader{br: bufio.NewReaderSize(r, 256<<10), h: sha256.New()}
	m := make([]byte, len(magic))
	if _, err := io.ReadFull(rr.br, m); err != nil || string(m) != magic {
		return info, bad("not a paxlock backup (no %q line)", magic[:len(magic)-1])
	}
	rr.h.Write(m)
	hdr, err := readHeader(&rr)
	if err != nil {
		return info, err
	}
	info.Header = hdr
	if v.Header != nil {
		if err := v.Header(info.Header); err != nil {
			return info, err
		}
	}
	for gi := 0; gi < info.Header.Groups; gi++ {
		g, err := readGroup(&rr, gi, v)
		if err != nil {
			return info, err
		}
		info.Groups = append(info.Groups, g)
	}
	sum := rr.h.Sum(nil)
	typ, p, err := rr.next()
	if err != nil {
		return info, err
	}
	if typ != recTrailer {
		return info, bad("record %q after the last group", typ)
	}
	if !bytes.Equal(p, sum) {
		return info, bad("checksum mismatch: the file is corrupt")
	}
	copy(info.Sum[:], sum)
	if _, err := rr.br.ReadByte(); err != io.EOF {
		return info, bad("data after the checksum")
	}
	return info, nil
}

// readHeader reads and checks the header record.
func readHeader(rr *recordReader) (Header, error) {
	var h Header
	typ, p, err := rr.next()
	if err != nil {
		return h, err
	}
	if typ != recHeader {
		return h, bad("record %q where the header belongs", typ)
	}
	var format struct {
		Format int `json:"format"`
	}
	if err := json.Unmarshal(p, &format); err != nil {
		return h, bad("header: %v", err)
	}
	if format.Format != Format {
		return h, bad("format %d; this build reads format %d", format.Format, Format)
	}
	if err := json.Unmarshal(p, &h); err != nil {
		return h, bad("header: %v", err)
	}
	if h.Groups <= 0 || h.Groups > 1<<16 {
		return h, bad("header: %d groups", h.Groups)
	}
	return h, nil
}

// readGroup reads group gi's records.
func readGroup(rr *recordReader, gi int, v Visitor) (Group, error) {
	typ, p, err := rr.next()
	if err != nil {
		return Group{}, err
	}
	var start Group
	if typ != recGroupStart {
		return start, bad("record %q where group %d starts", typ, gi)
	}
	if err := json.Unmarshal(p, &start); err != nil || start.Group != gi {
		return start, bad("group %d start record", gi)
	}
	seen := Group{Group: gi, Applied: start.Applied, Master: start.Master}
	for {
		typ, p, err := rr.next()
		if err != nil {
			return seen, err
		}
		switch typ {
		case recPairs:
			if err := readPairs(&seen, p, v); err != nil {
				return seen, err
			}
		case recGroupEnd:
			var end Group
			if err := json.Unmarshal(p, &end); err != nil {
				return seen, bad("group %d end record: %v", gi, err)
			}
			if end != seen {
				return seen, bad("group %d: end record %+v, contents %+v", gi, end, seen)
			}
			if v.GroupEnd != nil {
				if err := v.GroupEnd(seen); err != nil {
					return seen, err
				}
			}
			return seen, nil
		default:
			return seen, bad("record %q inside group %d", typ, gi)
		}
	}
}

// readPairs counts and checks a chunk of g's pairs, then hands it on.
func readPairs(g *Group, chunk []byte, v Visitor) error {
	err := codec.EachPair(chunk, func(k, val []byte) error {
		if err := g.count(k, val); err != nil {
			return err
		}
		if v.Pair != nil {
			return v.Pair(g.Group, k, val)
		}
		return nil
	})
	if errors.Is(err, codec.ErrMalformed) {
		err = fmt.Errorf("pairs: %w", ErrBad)
	}
	if err != nil {
		return fmt.Errorf("group %d: %w", g.Group, err)
	}
	if v.Pairs != nil {
		return v.Pairs(g.Group, chunk)
	}
	return nil
}

// recordReader reads records and hashes the bytes it consumed (bufio's
// read-ahead is not hashed until consumed).
type recordReader struct {
	br      *bufio.Reader
	h       hash.Hash
	payload []byte
}

// next reads a record; its payload is valid until the next call. The
// trailer record is not hashed (its payload is the hash).
func (rr *recordReader) next() (byte, []byte, error) {
	typ, err := rr.br.ReadByte()
	if err != nil {
		return 0, nil, bad("truncated (no checksum record)")
	}
	n, err := binary.ReadUvarint(rr.br)
	if err != nil || n > maxRecord {
		return 0, nil, bad("record %q: bad length", typ)
	}
	if uint64(cap(rr.payload)) < n {
		rr.payload = make([]byte, n)
	}
	p := rr.payload[:n]
	if _, err := io.ReadFull(rr.br, p); err != nil {
		return 0, nil, bad("truncated record %q", typ)
	}
	if typ != recTrailer {
		var hdr [1 + binary.MaxVarintLen64]byte
		hdr[0] = typ
		hn := binary.PutUvarint(hdr[1:], n)
		rr.h.Write(hdr[:1+hn])
		rr.h.Write(p)
	}
	return typ, p, nil
}
