package server

import (
	"context"
	"crypto/tls"
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

// writeBackup writes a backup of every group, taken at at, to w (GET
// /backup): per group, the image of its master at the instance it
// applied (see backupGroup), written by group.BackupWriter.
func (s *Server) writeBackup(ctx context.Context, w io.Writer, at time.Time) (int, int64, error) {
	groups := s.svc.Groups()
	commit := "unknown"
	if in, ok := buildinfo.Read(); ok {
		commit = in.String()
	}
	hdr := group.BackupHeader{Cluster: s.cfg.ClusterName, Time: at, Node: s.cfg.NodeID, Commit: commit, Groups: len(groups)}
	bw, err := group.NewBackupWriter(w, hdr)
	var locks int64
	peers := s.peerAdminClient()
	defer peers.CloseIdleConnections()
	for g := 0; err == nil && g < len(groups); g++ {
		var gi group.BackupGroup
		gi, err = s.backupGroup(ctx, bw, group.ID(g), groups[g], peers)
		locks += gi.Locks
	}
	if err == nil {
		err = bw.Close()
	}
	return len(groups), locks, err
}

// backupGroup writes group g's image into bw, always the image of the
// group's master, so that the backup holds every change acknowledged
// before it began: this node's replica when it serves the group, else the
// master's over its admin endpoint (GET /backup/image). A group whose
// master moves or cannot be asked (placement hands groups over, a master
// fails) is retried, following the master, for up to backupGroupTimeout;
// then the backup fails naming the group. It never falls back to a
// follower's replica, which may miss the last acknowledged changes.
func (s *Server) backupGroup(ctx context.Context, bw *group.BackupWriter, g group.ID, lg *group.Group, peers *http.Client) (group.BackupGroup, error) {
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
func (s *Server) openMasterImage(ctx context.Context, g group.ID, lg *group.Group, peers *http.Client) (paxos.SnapshotSource, error) {
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
	if v := s.view.Load(); int(g) < len(v.Groups) {
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

// remoteImage opens group g's image on node id, its master.
func (s *Server) remoteImage(ctx context.Context, cl *http.Client, id uint32, g group.ID) (paxos.SnapshotSource, error) {
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
	applied, perr := strconv.ParseUint(resp.Header.Get(adminhttp.AppliedHeader), 10, 64)
	if resp.StatusCode != http.StatusOK || perr != nil {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		_ = resp.Body.Close() // an error answer, read
		return nil, fmt.Errorf("node %d: %s: %s", id, resp.Status, strings.TrimSpace(string(b)))
	}
	return adminhttp.ReadImage(resp.Body, applied), nil
}

// openImage opens this node's image of group g, which it must serve
// (adminhttp.ErrNotServing), waiting up to backupGroupTimeout (GET
// /backup/image).
func (s *Server) openImage(ctx context.Context, g group.ID) (paxos.SnapshotSource, error) {
	rep := s.replica(g)
	if rep == nil || !s.svc.Group(g).Serving() {
		return nil, adminhttp.ErrNotServing
	}
	ctx, cancel := context.WithTimeout(ctx, backupGroupTimeout)
	defer cancel()
	return rep.OpenImage(ctx)
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
	st, err := pebblestore.Open(cfg.DataDir, pebblestore.Options{Logger: log, FS: cfg.storeFS, BlockingSync: cfg.DisableIOURing, NoWALSpares: cfg.DisableWALSpares,
		MemTableSize: cfg.memTable(), CacheSize: cfg.blockCache()})
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
