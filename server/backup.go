package server

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/paxlock/paxlock/group"
	"github.com/paxlock/paxlock/internal/buildinfo"
	"github.com/paxlock/paxlock/paxos"
	"github.com/paxlock/paxlock/paxos/pebblestore"
	"github.com/paxlock/paxlock/server/adminhttp"
)

// backupGroupTimeout bounds the wait for one group's image to be opened
// (the host's loop takes it between rounds).
const backupGroupTimeout = 30 * time.Second

// backupHandler streams a backup of every group (GET /backup; the admin
// token is required even with admin_public_read): per group, the image of
// its master at the instance it applied (see backupGroup), written by
// group.BackupWriter.
// A node that is not ready (see Ready: a follower more than ReadyMaxLag
// instances behind, no quorum) answers 503, so the backup is never taken
// from a stale replica; paxlockctl then asks the next node. A failure
// after the first byte ends the response without its checksum record,
// which the reader reports as a truncated file.
func (s *Server) backupHandler(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		http.Error(w, "use GET", http.StatusMethodNotAllowed)
		return
	}
	if ok, why := s.Ready(); !ok {
		http.Error(w, "this node is not ready to give a backup: "+why, http.StatusServiceUnavailable)
		return
	}
	groups := s.svc.Groups()
	commit := "unknown"
	if in, ok := buildinfo.Read(); ok {
		commit = in.String()
	}
	hdr := group.BackupHeader{Cluster: s.cfg.ClusterName, Time: time.Now().UTC(), Node: s.cfg.NodeID, Commit: commit, Groups: len(groups)}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Disposition", fmt.Sprintf("attachment; filename=%q", fmt.Sprintf("paxlock-%s-%s.backup", hdr.Cluster, hdr.Time.Format("20060102T150405Z"))))
	start := time.Now()
	cw := &countWriter{w: w}
	bw, err := group.NewBackupWriter(cw, hdr)
	var locks int64
	peers := s.peerAdminClient()
	defer peers.CloseIdleConnections()
	for g := 0; err == nil && g < len(groups); g++ {
		var gi group.BackupGroup
		gi, err = s.backupGroup(r.Context(), bw, g, groups[g], peers)
		locks += gi.Locks
	}
	if err == nil {
		err = bw.Close()
	}
	if err != nil {
		s.log.Error("backup failed", "remote", r.RemoteAddr, "err", err)
		return
	}
	s.log.Info("backup served", "remote", r.RemoteAddr, "groups", len(groups), "locks", locks, "bytes", cw.n, "took", time.Since(start).Round(time.Millisecond))
}

// backupGroup writes group g's image into bw, always the image of the
// group's master, so that the backup holds every change acknowledged
// before it began: this node's replica when it serves the group, else the
// master's over its admin endpoint (GET /backup/image). A group whose
// master moves or cannot be asked (placement hands groups over, a master
// fails) is retried, following the master, for up to backupGroupTimeout;
// then the backup fails naming the group. It never falls back to a
// follower's replica, which may miss the last acknowledged changes.
func (s *Server) backupGroup(ctx context.Context, bw *group.BackupWriter, g int, lg *group.Group, peers *http.Client) (group.BackupGroup, error) {
	deadline := time.Now().Add(backupGroupTimeout)
	for pause := 50 * time.Millisecond; ; pause = min(2*pause, time.Second) {
		src, err := s.openMasterImage(ctx, g, lg, peers)
		if err == nil {
			defer func() { _ = src.Close() }()
			return bw.Group(src, true)
		}
		if time.Until(deadline) < pause {
			return group.BackupGroup{}, fmt.Errorf("server: backup: group %d: no image from its master within %v: %w", g, backupGroupTimeout, err)
		}
		s.log.Debug("backup: asking the group's master again", "group", g, "err", err)
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return group.BackupGroup{}, ctx.Err()
		case <-t.C:
		}
	}
}

// openMasterImage opens group g's image on its master as this node knows
// it now: its own replica when it serves the group, else the master's
// admin endpoint. Opening waits up to backupGroupTimeout (the peers
// client's response header timeout); reading the image is bounded by ctx
// only, however long it takes.
func (s *Server) openMasterImage(ctx context.Context, g int, lg *group.Group, peers *http.Client) (paxos.SnapshotSource, error) {
	if lg.Serving() {
		rep := s.replica(g)
		if rep == nil {
			return nil, errors.New("the group's replication gives no image")
		}
		octx, cancel := context.WithTimeout(ctx, backupGroupTimeout)
		defer cancel()
		return rep.OpenImage(octx)
	}
	var m uint32
	if v := s.view.Load(); g < len(v.Groups) {
		m = v.Groups[g].Master
	}
	if m == 0 || m == s.cfg.NodeID {
		return nil, errors.New("no master known")
	}
	return s.remoteImage(ctx, peers, m, g)
}

// peerAdminClient returns an HTTP client for other nodes' admin endpoints
// without an overall timeout (an image streams for as long as it takes):
// HTTPS verified against the cluster CA when the admin endpoint is HTTPS.
func (s *Server) peerAdminClient() *http.Client {
	tr := &http.Transport{ResponseHeaderTimeout: backupGroupTimeout}
	if s.sec.adminTLS != nil {
		tc := &tls.Config{MinVersion: tls.VersionTLS12}
		if s.sec.peer != nil {
			_, tc.RootCAs = s.sec.peer.Current()
		}
		tr.TLSClientConfig = tc
	}
	return &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// appliedHeader carries an image's applied instance in GET /backup/image.
const appliedHeader = "X-Paxlock-Applied"

// remoteImage opens group g's image on node id, its master.
func (s *Server) remoteImage(ctx context.Context, cl *http.Client, id uint32, g int) (paxos.SnapshotSource, error) {
	addr := s.addr(paxos.NodeID(id)).Admin
	if addr == "" {
		return nil, fmt.Errorf("no admin address for master node %d", id)
	}
	scheme := "http://"
	if s.sec.adminTLS != nil {
		scheme = "https://"
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("%s%s/backup/image?group=%d", scheme, addr, g), nil)
	if err != nil {
		return nil, err
	}
	if s.sec.adminToken != "" {
		req.Header.Set("Authorization", "Bearer "+s.sec.adminToken)
	}
	resp, err := cl.Do(req)
	if err != nil {
		return nil, err
	}
	applied, perr := strconv.ParseUint(resp.Header.Get(appliedHeader), 10, 64)
	if resp.StatusCode != http.StatusOK || perr != nil {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		_ = resp.Body.Close() // an error answer, read
		return nil, fmt.Errorf("node %d: %s: %s", id, resp.Status, strings.TrimSpace(string(b)))
	}
	return &remoteSource{body: resp.Body, br: bufio.NewReaderSize(resp.Body, 64<<10), applied: applied}, nil
}

// remoteSource is a paxos.SnapshotSource read from GET /backup/image:
// chunks, each a uvarint length and the chunk, ended by a zero length
// (a body that ends before it is an error, not a shorter image).
type remoteSource struct {
	body    io.Closer
	br      *bufio.Reader
	applied uint64
	buf     []byte
	done    bool
}

func (r *remoteSource) Applied() uint64 { return r.applied }

func (r *remoteSource) Next() ([]byte, bool, error) {
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

func (r *remoteSource) Close() error { return r.body.Close() }

// maxImageChunk bounds a chunk of GET /backup/image (chunks are about
// host.ReplicaConfig.SnapshotChunk, 1 MiB).
const maxImageChunk = 64 << 20

// imageHandler streams this node's image of one group it masters (GET
// /backup/image?group=N), for the node that gathers a backup: 409 when
// this node does not serve the group.
func (s *Server) imageHandler(w http.ResponseWriter, r *http.Request) {
	groups := s.svc.Groups()
	g, err := strconv.Atoi(r.URL.Query().Get("group"))
	if err != nil || g < 0 || g >= len(groups) {
		http.Error(w, "group: want 0 to "+strconv.Itoa(len(groups)-1), http.StatusBadRequest)
		return
	}
	lg := groups[g]
	rep := s.replica(g)
	if rep == nil || !lg.Serving() {
		http.Error(w, "this node does not serve the group", http.StatusConflict)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), backupGroupTimeout)
	src, err := rep.OpenImage(ctx)
	cancel()
	if err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	defer func() { _ = src.Close() }() // a read-only view
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set(appliedHeader, strconv.FormatUint(src.Applied(), 10))
	bw := bufio.NewWriterSize(adminhttp.NewStreamWriter(w, time.Duration(s.cfg.AdminWriteTimeout)), 64<<10)
	var lb [binary.MaxVarintLen64]byte
	for {
		chunk, last, err := src.Next()
		if err != nil {
			s.log.Error("backup image failed", "group", g, "err", err)
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

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// ErrDataDirNotEmpty is returned by Restore when the data directory
// already holds something: a restore seeds a new node only.
var ErrDataDirNotEmpty = errors.New("data directory is not empty")

// Restore seeds the empty data directory of cfg's node with the backup in
// file, before the node starts (paxlockd -restore): every group's image
// with its group version raised by one and its instances starting afresh
// (group.RestoreBackup). It refuses, writing nothing, a data
// directory that holds anything, a file that is not a backup of this
// format, one of another cluster (cluster_name) or group count, and one
// whose checksum fails: the whole file is read and checked before
// anything is written. Every node of the new cluster is started from the
// same file; a node started empty without it fetches a snapshot.
func Restore(cfg Config, file string, log *slog.Logger) (group.BackupInfo, error) {
	var info group.BackupInfo
	cfg.EnsureDefaults()
	if err := cfg.Validate(); err != nil {
		return info, err
	}
	if log == nil {
		log = slog.Default()
	}
	created := false
	switch ents, err := os.ReadDir(cfg.DataDir); {
	case errors.Is(err, os.ErrNotExist):
		created = true
	case err != nil:
		return info, fmt.Errorf("server: restore: data dir: %w", err)
	case len(ents) > 0:
		return info, fmt.Errorf("server: restore: %s holds %d entries (%s, ...): %w; restore seeds a new node only", cfg.DataDir, len(ents), ents[0].Name(), ErrDataDirNotEmpty)
	}
	f, err := os.Open(file)
	if err != nil {
		return info, fmt.Errorf("server: restore: %w", err)
	}
	defer func() { _ = f.Close() }() // read only
	check := func(h group.BackupHeader) error {
		switch {
		case h.Cluster != cfg.ClusterName:
			return fmt.Errorf("%w: the backup is of cluster %q, this node's cluster_name is %q", group.ErrBadBackup, h.Cluster, cfg.ClusterName)
		case h.Groups != cfg.Groups:
			return fmt.Errorf("%w: the backup has %d groups, this node's configuration %d (keys map to groups by their count)", group.ErrBadBackup, h.Groups, cfg.Groups)
		}
		return nil
	}
	if info, err = group.ReadBackup(f, group.BackupVisitor{Header: check}); err != nil {
		return info, fmt.Errorf("server: restore %s: %w", file, err)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return info, fmt.Errorf("server: restore: %w", err)
	}
	undo := func() {
		if created {
			_ = os.RemoveAll(cfg.DataDir)
			return
		}
		ents, _ := os.ReadDir(cfg.DataDir)
		for _, e := range ents {
			_ = os.RemoveAll(filepath.Join(cfg.DataDir, e.Name()))
		}
	}
	if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
		return info, fmt.Errorf("server: restore: data dir: %w", err)
	}
	st, err := pebblestore.Open(cfg.DataDir, pebblestore.Options{Logger: log, FS: cfg.storeFS, BlockingSync: cfg.DisableIOURing, NoWALSpares: cfg.DisableWALSpares})
	if err != nil {
		undo()
		return info, fmt.Errorf("server: restore: %w", err)
	}
	_, rerr := group.RestoreBackup(f, st)
	if err := errors.Join(rerr, st.Close()); err != nil {
		undo()
		return info, fmt.Errorf("server: restore %s: %w", file, err)
	}
	if _, err := checkIdentity(cfg.DataDir, cfg); err != nil {
		undo()
		return info, err
	}
	var locks int64
	for _, g := range info.Groups {
		locks += g.Locks
	}
	log.Info("restored from backup", "file", file, "cluster", info.Header.Cluster, "taken", info.Header.Time, "by_node", info.Header.Node,
		"groups", len(info.Groups), "locks", locks, "applied", group.RestoredApplied)
	return info, nil
}
