package adminhttp

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/paxlock/paxlock/paxos"
)

// ErrNotServing says this node does not serve the group an image is
// asked of (HTTP 409).
var ErrNotServing = errors.New("this node does not serve the group")

// BackupNode is what the backup endpoints ask of the node.
type BackupNode interface {
	// ClusterName names the backup's file.
	ClusterName() string
	// WriteBackup writes a backup of every group, taken at at, to w (see
	// GET /backup), and says how many groups and locks it held.
	WriteBackup(ctx context.Context, w io.Writer, at time.Time) (groups int, locks int64, err error)
	// OpenImage opens this node's image of lock group g, which it must
	// serve (ErrNotServing).
	OpenImage(ctx context.Context, g int) (paxos.SnapshotSource, error)
}

// backup streams a backup of every group (GET /backup; the admin token
// is required even with public read): per group, the image of its master
// at the instance it applied, in the backup file format. A node that is
// not ready (Node.Ready: a follower far behind, no quorum) answers 503,
// so the backup is never taken from a stale replica; paxlockctl then asks
// the next node. A failure after the first byte ends the response without
// its checksum record, which the reader reports as a truncated file.
func (h *handler) backup(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		http.Error(w, "use GET", http.StatusMethodNotAllowed)
		return
	}
	if ok, why := h.Node.Ready(); !ok {
		http.Error(w, "this node is not ready to give a backup: "+why, http.StatusServiceUnavailable)
		return
	}
	at := time.Now().UTC()
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Disposition", fmt.Sprintf("attachment; filename=%q", fmt.Sprintf("paxlock-%s-%s.backup", h.Node.ClusterName(), at.Format("20060102T150405Z"))))
	start := time.Now()
	cw := &countWriter{w: w}
	groups, locks, err := h.Node.WriteBackup(r.Context(), cw, at)
	if err != nil {
		h.Log.Error("backup failed", "remote", r.RemoteAddr, "err", err)
		return
	}
	h.Log.Info("backup served", "remote", r.RemoteAddr, "groups", groups, "locks", locks, "bytes", cw.n, "took", time.Since(start).Round(time.Millisecond))
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// AppliedHeader carries an image's applied instance in GET
// /backup/image.
const AppliedHeader = "X-Paxlock-Applied"

// maxImageChunk bounds a chunk of GET /backup/image (chunks are about
// host.ReplicaConfig.SnapshotChunk, 1 MiB).
const maxImageChunk = 64 << 20

// image streams this node's image of one group it masters (GET
// /backup/image?group=N), for the node that gathers a backup: chunks,
// each a uvarint length and the chunk, ended by a zero length; 409 when
// this node does not serve the group.
func (h *handler) image(w http.ResponseWriter, r *http.Request) {
	g, err := strconv.Atoi(r.URL.Query().Get("group"))
	if n := h.Node.Groups(); err != nil || g < 0 || g >= n {
		http.Error(w, "group: want 0 to "+strconv.Itoa(n-1), http.StatusBadRequest)
		return
	}
	src, err := h.Node.OpenImage(r.Context(), g)
	switch {
	case errors.Is(err, ErrNotServing):
		http.Error(w, err.Error(), http.StatusConflict)
		return
	case err != nil:
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	defer func() { _ = src.Close() }() // a read-only view
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set(AppliedHeader, strconv.FormatUint(src.Applied(), 10))
	bw := bufio.NewWriterSize(NewStreamWriter(w, h.WriteTimeout), 64<<10)
	var lb [binary.MaxVarintLen64]byte
	for {
		chunk, last, err := src.Next()
		if err != nil {
			h.Log.Error("backup image failed", "group", g, "err", err)
			return // no terminator: the reader sees a cut image
		}
		if len(chunk) > 0 {
			_, _ = bw.Write(lb[:binary.PutUvarint(lb[:], uint64(len(chunk)))])
			_, _ = bw.Write(chunk)
		}
		if last {
			break
		}
	}
	_, _ = bw.Write([]byte{0})
	_ = bw.Flush() // a failed write shows as a cut image on the other side
}

// ReadImage returns the paxos.SnapshotSource of a GET /backup/image
// answer's body, whose AppliedHeader said applied: a body that ends
// before its terminator is an error, not a shorter image.
func ReadImage(body io.ReadCloser, applied uint64) paxos.SnapshotSource {
	return &imageSource{body: body, br: bufio.NewReaderSize(body, 64<<10), applied: applied}
}

// imageSource reads GET /backup/image's chunks.
type imageSource struct {
	body    io.Closer
	br      *bufio.Reader
	applied uint64
	buf     []byte
	done    bool
}

func (r *imageSource) Applied() uint64 { return r.applied }

func (r *imageSource) Next() ([]byte, bool, error) {
	if r.done {
		return nil, true, nil
	}
	n, err := binary.ReadUvarint(r.br)
	if err != nil {
		return nil, false, fmt.Errorf("server: backup image: %w", io.ErrUnexpectedEOF)
	}
	if n == 0 {
		r.done = true
		return nil, true, nil
	}
	if n > maxImageChunk {
		return nil, false, fmt.Errorf("server: backup image: chunk of %d bytes", n)
	}
	if uint64(cap(r.buf)) < n {
		r.buf = make([]byte, n)
	}
	r.buf = r.buf[:n]
	if _, err := io.ReadFull(r.br, r.buf); err != nil {
		return nil, false, fmt.Errorf("server: backup image: %w", io.ErrUnexpectedEOF)
	}
	return r.buf, false, nil
}

func (r *imageSource) Close() error { return r.body.Close() }
