package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/paxlock/paxlock/backup"
)

// backupOutput is backup's output: the file written and what it holds.
type backupOutput struct {
	File    string         `json:"file"`
	Bytes   int64          `json:"bytes"`
	Cluster string         `json:"cluster"`
	Node    uint32         `json:"node"` // the node that gave it
	Time    time.Time      `json:"time"`
	Commit  string         `json:"commit"`
	SHA256  string         `json:"sha256"`
	Locks   int64          `json:"locks"`
	Groups  []backup.Group `json:"groups"`
}

func (o backupOutput) table(w io.Writer) error {
	fmt.Fprintf(w, "wrote %s: %d bytes, cluster %q, from node %d at %s, %d locks, sha256 %s\n",
		o.File, o.Bytes, o.Cluster, o.Node, o.Time.Format(time.RFC3339), o.Locks, o.SHA256)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "GROUP\tAPPLIED\tVERSION\tLOCKS\tFROM MASTER")
	for _, g := range o.Groups {
		fmt.Fprintf(tw, "%d\t%d\t%d\t%d\t%v\n", g.Group, g.Applied, g.Version, g.Locks, g.Master)
	}
	return tw.Flush()
}

// backupCmd downloads a backup (GET /backup) from the first node that
// gives one into a temporary file next to file, checks it whole
// (structure, each group's counts, checksum: package backup) and only
// then renames it to file, which it never overwrites. What a record's
// value means is the lock service's: the node checked every record as it
// wrote the file, and a restore checks them again before it writes
// anything.
func backupCmd(ctx context.Context, p printer, a *adminClient, file string) error {
	if _, err := os.Lstat(file); err == nil {
		return fmt.Errorf("%s exists: not overwritten", file)
	}
	tmp, err := os.CreateTemp(filepath.Dir(file), "."+filepath.Base(file)+".part-*")
	if err != nil {
		return err
	}
	defer func() {
		_ = tmp.Close()           // closed already on success
		_ = os.Remove(tmp.Name()) // renamed away on success
	}()
	var lastErr error
	var n int64
	for _, addr := range a.addrs {
		n, lastErr = a.fetchBackup(ctx, addr, tmp)
		if lastErr == nil {
			break
		}
		if _, err := tmp.Seek(0, io.SeekStart); err != nil {
			return err
		}
		if err := tmp.Truncate(0); err != nil {
			return err
		}
	}
	if lastErr != nil {
		return fmt.Errorf("no node gave a backup: %w", lastErr)
	}
	if err := tmp.Sync(); err != nil {
		return err
	}
	if _, err := tmp.Seek(0, io.SeekStart); err != nil {
		return err
	}
	info, err := backup.Read(tmp, backup.Visitor{})
	if err != nil {
		return fmt.Errorf("the backup received is not valid: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Link(tmp.Name(), file); err != nil { // fails if file appeared meanwhile
		return err
	}
	out := backupOutput{File: file, Bytes: n, Cluster: info.Header.Cluster, Node: info.Header.Node, Time: info.Header.Time,
		Commit: info.Header.Commit, SHA256: fmt.Sprintf("%x", info.Sum), Groups: info.Groups}
	for _, g := range info.Groups {
		out.Locks += g.Locks
	}
	return p.emit(out)
}

// fetchBackup writes addr's backup into w.
func (a *adminClient) fetchBackup(ctx context.Context, addr string, w io.Writer) (int64, error) {
	req, err := a.request(ctx, http.MethodGet, addr, "/backup", nil)
	if err != nil {
		return 0, err
	}
	// No overall timeout: a million locks take a while to stream; ctx
	// (SIGINT) ends it.
	resp, err := a.do(req, 0)
	if err != nil {
		return 0, err
	}
	defer func() { _ = resp.Body.Close() }() // read to the end or abandoned
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return 0, fmt.Errorf("%s: HTTP %d: %s", addr, resp.StatusCode, strings.TrimSpace(string(b)))
	}
	n, err := io.Copy(w, resp.Body)
	if err != nil {
		return n, fmt.Errorf("%s: %w", addr, err)
	}
	if n == 0 {
		return 0, errors.New(addr + ": empty answer")
	}
	return n, nil
}
