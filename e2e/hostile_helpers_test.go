package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/paxlock/paxlock/client/scramauth"
	"github.com/paxlock/paxlock/client/wire"
	"github.com/paxlock/paxlock/internal/pki"
)

// The hostile suite (make hostile): each test attacks real paxlockd
// processes the way a misbehaving network or a hostile party would, and
// checks that the node stays bounded, serving and truthful. These are its
// helpers.

// hostileSetup starts a 3-node loopback cluster (plaintext, no admin
// token, peers without TLS: what CLUSTER_SECURE=0 runs) and waits until
// every node reports ready; it skips without PAXLOCK_E2E.
func hostileSetup(t *testing.T) *cluster {
	t.Helper()
	return hostileSetupWith(t, nil)
}

// hostileSetupWith is hostileSetup with extra settings in every node's
// configuration.
func hostileSetupWith(t *testing.T, extra map[string]any) *cluster {
	t.Helper()
	if os.Getenv("PAXLOCK_E2E") == "" {
		t.Skip("set PAXLOCK_E2E=1 (make hostile) to run the adversarial suite")
	}
	c := startClusterWith(t, 3, extra)
	c.waitReady()
	return c
}

// hostileSecureSetup starts a 3-node loopback cluster whose peers run
// mutual TLS under a cluster CA (what CLUSTER_SECURE=1 runs on the peer
// port; relays go through the TLS client listeners, with the node
// certificates), and waits until every node reports ready. The admin
// endpoints stay plain HTTP without a token, so that the suite's checks
// read them as on the plaintext cluster. It returns the cluster and the
// directory of its material (pki.WriteDev's files: the CA's key too, from
// which a test mints the certificate a compromised node would hold); it
// skips without PAXLOCK_E2E.
func hostileSecureSetup(t *testing.T) (*cluster, string) {
	t.Helper()
	if os.Getenv("PAXLOCK_E2E") == "" {
		t.Skip("set PAXLOCK_E2E=1 (make hostile) to run the adversarial suite")
	}
	dir := t.TempDir()
	certs := filepath.Join(dir, "certs")
	if _, err := pki.WriteDev(certs, pki.DevOptions{Cluster: "paxlock", Nodes: 3, Hosts: []string{"127.0.0.1", "localhost"}}); err != nil {
		t.Fatal(err)
	}
	c := newCluster(t, buildPaxlockd(t, dir), dir)
	var nodes []nodeAddrs
	for i := 1; i <= 3; i++ {
		nodes = append(nodes, nodeAddrs{ID: i, Peer: freePort(t), Client: freePort(t), ClientTLS: freePort(t), Admin: freePort(t)})
	}
	for i := 1; i <= 3; i++ {
		c.add(i, nodes, nodes[i-1].Admin, "", map[string]any{"tls": map[string]string{
			"ca":   filepath.Join(certs, pki.DevCACert),
			"cert": filepath.Join(certs, pki.DevNodeCert(i)),
			"key":  filepath.Join(certs, pki.DevNodeKey(i)),
		}})
	}
	c.waitReady()
	return c, certs
}

// waitReady waits until every node of c answers /readyz 200.
func (c *cluster) waitReady() {
	for _, p := range c.procs {
		c.waitUntil(fmt.Sprintf("node %d ready", p.id), time.Minute, func() bool { return readyz(http.DefaultClient, p) == http.StatusOK })
	}
}

// readyz returns the status of p's /readyz (0 if it did not answer).
func readyz(hc *http.Client, p *proc) int {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.admin+"/readyz", nil)
	if err != nil {
		return 0
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// openFDs counts the descriptors process pid has open.
func openFDs(t *testing.T, pid int) int {
	t.Helper()
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// rssBytes is process pid's resident set (VmRSS).
func rssBytes(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmRSS")
	return 0
}

// metric reads one unlabelled sample from p's /metrics (-1 if absent).
func metric(t *testing.T, p *proc, name string) float64 {
	t.Helper()
	hc := http.Client{Timeout: 10 * time.Second}
	resp, err := hc.Get("http://" + p.admin + "/metrics")
	if err != nil {
		t.Fatalf("metrics of node %d: %v", p.id, err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				t.Fatal(err)
			}
			return f
		}
	}
	return -1
}

// memSample is a node's memory as the OS and the Go runtime see it.
type memSample struct{ sys, heap, rss int64 }

func sampleMem(t *testing.T, p *proc) memSample {
	t.Helper()
	return memSample{
		sys:  int64(metric(t, p, "go_memstats_sys_bytes")),
		heap: int64(metric(t, p, "go_memstats_heap_inuse_bytes")),
		rss:  rssBytes(t, p.cmd.Process.Pid),
	}
}

func (m memSample) String() string {
	return fmt.Sprintf("sys %.1f MiB, heap in use %.1f MiB, RSS %.1f MiB", mib(m.sys), mib(m.heap), mib(m.rss))
}

func mib(n int64) float64 { return float64(n) / (1 << 20) }

// rawConn is a client connection spoken frame by frame, as an attacker
// (or a buggy client) would: no session package, no retries.
type rawConn struct {
	t      *testing.T
	nc     net.Conn
	br     *bufio.Reader
	enc    wire.Codec
	next   uint64
	frames chan wire.Frame // filled by the reader once started
}

func dialRaw(t *testing.T, addr string) *rawConn {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	t.Cleanup(func() { nc.Close() })
	return &rawConn{t: t, nc: nc, br: bufio.NewReaderSize(nc, 64<<10)}
}

// send writes one request and returns its id.
func (r *rawConn) send(typ wire.Type, m wire.Message) uint64 {
	r.t.Helper()
	r.next++
	f, err := r.enc.AppendFrame(nil, typ, r.next, m)
	if err != nil {
		r.t.Fatal(err)
	}
	_ = r.nc.SetWriteDeadline(time.Now().Add(10 * time.Second))
	if _, err := r.nc.Write(f); err != nil {
		r.t.Fatalf("write %s: %v", typ, err)
	}
	return r.next
}

// read returns the next frame within limit.
func (r *rawConn) read(limit time.Duration) (wire.Frame, error) {
	if r.frames != nil {
		select {
		case f, ok := <-r.frames:
			if !ok {
				return wire.Frame{}, io.EOF
			}
			return f, nil
		case <-time.After(limit):
			return wire.Frame{}, os.ErrDeadlineExceeded
		}
	}
	_ = r.nc.SetReadDeadline(time.Now().Add(limit))
	f, _, err := wire.ReadFrame(r.br, nil, 0)
	return f, err
}

// reply reads frames until the reply to request id (pushes are skipped
// but must not be what the caller waits for).
func (r *rawConn) reply(id uint64, limit time.Duration) (wire.Frame, error) {
	deadline := time.Now().Add(limit)
	for {
		f, err := r.read(time.Until(deadline))
		if err != nil {
			return f, err
		}
		if f.ReqID == id {
			return f, nil
		}
	}
}

// scram runs a client SCRAM handshake for namespace ns with client key
// key on the connection and returns the final status (SUCCESS or the
// refusal's).
func (r *rawConn) scram(ns, secret, key string) (wire.Status, error) {
	cl, err := scramauth.NewClient(ns, secret)
	if err != nil {
		return 0, err
	}
	first, err := cl.First()
	if err != nil {
		return 0, err
	}
	id := r.send(wire.TypeScramClientFirst, &wire.ScramClientFirst{Namespace: ns, ClientID: wire.ClientIDOf(key), ClientKey: key, Agent: "hostile-e2e", Mechanism: wire.MechanismSCRAMSHA256, Message: first})
	f, err := r.reply(id, 10*time.Second)
	if err != nil {
		return 0, fmt.Errorf("server-first: %w", err)
	}
	if f.Type == wire.TypeResponse {
		var resp wire.Response
		if err := r.enc.DecodeInto(f.Body, &resp); err != nil {
			return 0, err
		}
		return resp.Status, nil
	}
	var sf wire.ScramServerFirst
	if err := r.enc.DecodeInto(f.Body, &sf); err != nil {
		return 0, err
	}
	final, err := cl.Final(sf.Message)
	if err != nil {
		return 0, err
	}
	id = r.send(wire.TypeScramClientFinal, &wire.ScramClientFinal{Message: final})
	if f, err = r.reply(id, 10*time.Second); err != nil {
		return 0, fmt.Errorf("server-final: %w", err)
	}
	if f.Type == wire.TypeResponse {
		var resp wire.Response
		if err := r.enc.DecodeInto(f.Body, &resp); err != nil {
			return 0, err
		}
		return resp.Status, nil
	}
	var fin wire.ScramServerFinal
	if err := r.enc.DecodeInto(f.Body, &fin); err != nil {
		return 0, err
	}
	if err := cl.Verify(fin.Message); err != nil {
		return 0, err
	}
	return wire.StatusSuccess, nil
}

// getViewServed reports whether a fresh connection to addr is answered a
// View to a GetView within limit.
func getViewServed(addr string, limit time.Duration) bool {
	nc, err := net.DialTimeout("tcp", addr, limit)
	if err != nil {
		return false
	}
	defer nc.Close()
	var enc wire.Codec
	f, err := enc.AppendFrame(nil, wire.TypeGetView, 1, &wire.GetView{})
	if err != nil {
		return false
	}
	_ = nc.SetDeadline(time.Now().Add(limit))
	if _, err := nc.Write(f); err != nil {
		return false
	}
	got, _, err := wire.ReadFrame(bufio.NewReader(nc), nil, 0)
	return err == nil && got.Type == wire.TypeView && got.ReqID == 1
}

// halfHeader is a frame header declaring a body of bodyLen bytes that
// never comes.
func halfHeader(typ wire.Type, bodyLen int) []byte {
	b := make([]byte, wire.HeaderSize)
	binary.BigEndian.PutUint32(b, uint32(bodyLen+wire.HeaderSize-4))
	b[4] = wire.Version
	b[5] = byte(typ)
	binary.BigEndian.PutUint64(b[6:], 1)
	return b
}

// adminDo sends an admin request to addr and returns the status and body;
// it follows redirects (307 keeps the method, body and headers).
func adminDo(method, addr, path, ctype string, body []byte, hdr map[string]string) (int, string, error) {
	req, err := http.NewRequest(method, "http://"+addr+path, bytes.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	for k, v := range hdr {
		if k == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	hc := http.Client{Timeout: 15 * time.Second}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, string(b), nil
}

// isTimeout reports whether err is a deadline.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, os.ErrDeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
}
