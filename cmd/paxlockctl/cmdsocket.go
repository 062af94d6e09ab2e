// This file is the channel between a run form and its command: a Unix
// socket in a private directory, named in CMD's environment, through
// which CMD asks the paxlockctl that runs it to change its hold (rlock
// -upgradable: upgrade and downgrade; sem acquire: sem release of some
// permits) by running paxlockctl itself.

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"time"
)

// holdRequest is what a command's paxlockctl sends, one JSON line.
type holdRequest struct {
	// Op is upgrade, downgrade or release.
	Op string `json:"op"`
	// WaitMs bounds an upgrade's wait (0: until the hold ends).
	WaitMs int64 `json:"wait_ms,omitempty"`
	// Permits is how many permits a release gives back.
	Permits int `json:"permits,omitempty"`
}

// holdReply is the run form's answer, one JSON line.
type holdReply struct {
	// Token is the fencing token of the hold now held (upgrade: the
	// write's, higher than the read's; downgrade and release: kept).
	Token uint64 `json:"token,omitempty"`
	// Permits is how many permits the hold keeps (release).
	Permits int `json:"permits,omitempty"`
	// Exit is the exit status the asking paxlockctl ends with: 0, 1
	// (the cluster failed: ask again), 2 (a request the hold cannot
	// take), 124 (not upgraded within -wait), 125 (the hold was lost:
	// CMD is being stopped).
	Exit  int    `json:"exit"`
	Error string `json:"error,omitempty"`
}

// maxHoldLine bounds a request or reply line.
const maxHoldLine = 4096

// holdSocket is a run form's end of the channel: it answers one
// connection at a time until closed.
type holdSocket struct {
	dir  string
	ln   net.Listener
	stop chan struct{} // closed by close: requests in flight are abandoned
}

// openHoldSocket opens a socket in a new private directory (mode 0700,
// named after what) and answers each request with perform until close.
// perform's context ends when the asker goes away or the socket closes.
func openHoldSocket(what string, perform func(context.Context, holdRequest) holdReply) (*holdSocket, error) {
	dir, err := os.MkdirTemp("", "paxlockctl-"+what+"-")
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("unix", filepath.Join(dir, "s"))
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	s := &holdSocket{dir: dir, ln: ln, stop: make(chan struct{})}
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			s.answer(conn, perform)
		}
	}()
	return s, nil
}

// addr is the socket's path, for CMD's environment.
func (s *holdSocket) addr() string { return s.ln.Addr().String() }

// close stops answering and removes the socket's directory.
func (s *holdSocket) close() {
	select {
	case <-s.stop:
		return
	default:
		close(s.stop)
	}
	_ = s.ln.Close()
	_ = os.RemoveAll(s.dir)
}

// answer reads one request from conn and performs it. The request is
// abandoned when the asking paxlockctl goes away (its connection ends)
// or the socket closes.
func (s *holdSocket) answer(conn net.Conn, perform func(context.Context, holdRequest) holdReply) {
	defer func() { _ = conn.Close() }()
	br := bufio.NewReader(io.LimitReader(conn, maxHoldLine))
	line, err := br.ReadBytes('\n')
	var req holdRequest
	if err != nil || json.Unmarshal(line, &req) != nil {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		_, _ = br.ReadByte() // the asker sends nothing more: its end ends the request
		cancel()
	}()
	go func() {
		select {
		case <-s.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	rep := perform(ctx, req)
	b, _ := json.Marshal(rep) // a plain struct: cannot fail
	_ = conn.SetWriteDeadline(time.Now().Add(5 * time.Second))
	_, _ = conn.Write(append(b, '\n'))
}

// askHold sends req to the run form whose socket is in environment
// variable env and returns its answer; cmd names the asking command in
// errors, form the run form it must run inside.
func askHold(ctx context.Context, env, cmd, form string, req holdRequest) (holdReply, error) {
	sock := os.Getenv(env)
	if sock == "" {
		return holdReply{}, fmt.Errorf("%w: %s runs inside paxlockctl %s -- CMD (%s is not set)", errUsage, cmd, form, env)
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", sock)
	if err != nil {
		return holdReply{}, fmt.Errorf("%s: the %s is gone: %w", cmd, form, err)
	}
	defer func() { _ = conn.Close() }()
	stop := context.AfterFunc(ctx, func() { _ = conn.Close() }) // interrupted: the run form abandons the request
	defer stop()
	b, _ := json.Marshal(req) // a plain struct: cannot fail
	if _, err := conn.Write(append(b, '\n')); err != nil {
		return holdReply{}, fmt.Errorf("%s: %w", cmd, err)
	}
	line, err := bufio.NewReader(io.LimitReader(conn, maxHoldLine)).ReadBytes('\n')
	var rep holdReply
	if err == nil {
		err = json.Unmarshal(line, &rep)
	}
	switch {
	case ctx.Err() != nil:
		return holdReply{}, fmt.Errorf("%s: interrupted: %w", cmd, ctx.Err())
	case err != nil:
		return holdReply{}, fmt.Errorf("%s: no answer from the %s: %w", cmd, form, err)
	}
	return rep, nil
}

// replyErr turns a reply's failure into runUpgrade's or runSemRelease's
// error: a cluster failure (exit 1) is an error to print, any other
// status is printed here and exits with it.
func replyErr(o *options, cmd string, rep holdReply) error {
	switch rep.Exit {
	case 0:
		return nil
	case 1:
		return fmt.Errorf("%s: %s", cmd, rep.Error)
	}
	fmt.Fprintf(o.stderr, "paxlockctl: %s: %s\n", cmd, rep.Error)
	return exitStatus{rep.Exit}
}
