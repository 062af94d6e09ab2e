package conformance

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/paxlock/paxlock/client"
	"github.com/paxlock/paxlock/client/wire"
)

// env is the cluster under test, from the environment make conformance
// sets: PAXLOCK_REGISTRY (the Go client's node addresses),
// PAXLOCK_API_URLS (the API's, comma-separated), PAXLOCK_NAMESPACE,
// PAXLOCK_SECRET and PAXLOCK_CA (the CA of the API's TLS, optional).
type env struct {
	registry []string
	apis     []string
	ns, sec  string
	ca       string
	http     *http.Client
}

func setup(t *testing.T) *env {
	t.Helper()
	if os.Getenv("PAXLOCK_CONFORMANCE") == "" {
		t.Skip("PAXLOCK_CONFORMANCE not set (make conformance runs these against make run's cluster)")
	}
	e := &env{registry: strings.Split(os.Getenv("PAXLOCK_REGISTRY"), ","), apis: strings.Split(os.Getenv("PAXLOCK_API_URLS"), ","),
		ns: os.Getenv("PAXLOCK_NAMESPACE"), sec: os.Getenv("PAXLOCK_SECRET"), ca: os.Getenv("PAXLOCK_CA")}
	tr := &http.Transport{}
	if e.ca != "" {
		pem, err := os.ReadFile(e.ca)
		if err != nil {
			t.Fatal(err)
		}
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(pem)
		tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	e.http = &http.Client{Transport: tr, Timeout: 30 * time.Second}
	return e
}

func (e *env) goClient(t *testing.T) *client.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := client.New(ctx, client.Config{Registry: e.registry, Namespace: e.ns, Secret: e.sec})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// curl posts req as JSON to the API's method on node i, as curl does:
// the HTTP status, the Paxlock-Status header and the answer's JSON.
func (e *env) curl(t *testing.T, i int, method string, req map[string]any, secret string) (int, string, map[string]any) {
	t.Helper()
	b, _ := json.Marshal(req)
	r, err := http.NewRequest(http.MethodPost, e.apis[i%len(e.apis)]+"/paxlock.v1.LockService/"+method, bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	r.Header.Set("Content-Type", "application/json")
	r.SetBasicAuth(e.ns, secret)
	resp, err := e.http.Do(r)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var out map[string]any
	_ = json.Unmarshal(body, &out)
	return resp.StatusCode, resp.Header.Get("Paxlock-Status"), out
}

func token(t *testing.T, v any) uint64 {
	t.Helper()
	s, _ := v.(string)
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		t.Fatalf("token %v: %v", v, err)
	}
	return n
}

func key(name string) string { return fmt.Sprintf("conf-%s-%d", name, time.Now().UnixNano()) }

// pyHolder runs the Python client in a child process that takes key
// (blocking), prints its token, holds it until its standard input
// closes, then releases it and exits.
type pyHolder struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *bufio.Reader
}

const pyHold = `
import sys, paxlock
url, ns, secret, ca, key = sys.argv[1:6]
c = paxlock.Client(url, ns, secret, ca_file=ca or None)
m = c.mutex(key, ttl=10)
if sys.argv[6] == "try":
    print("held" if m.acquire(blocking=False) else "taken", flush=True)
else:
    m.acquire()
    print(m.token, flush=True)
sys.stdin.read()
if m.token:
    m.release()
`

func (e *env) python(t *testing.T, key, mode string) *pyHolder {
	t.Helper()
	return e.pyRun(t, pyHold, key, mode)
}

// pyRun runs a Python script with the client on its path in a child
// process, with the arguments url, namespace, secret, CA file and args;
// its standard input closes when the test ends.
func (e *env) pyRun(t *testing.T, script string, args ...string) *pyHolder {
	t.Helper()
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3")
	}
	cmd := exec.Command(py, append([]string{"-c", script, e.apis[0], e.ns, e.sec, e.ca}, args...)...)
	cmd.Env = append(os.Environ(), "PYTHONPATH="+filepath.Join("..", "clients", "python"), "PYTHONDONTWRITEBYTECODE=1")
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &pyHolder{cmd: cmd, stdin: in, out: bufio.NewReader(out)}
	t.Cleanup(func() { _ = in.Close(); _ = cmd.Wait() })
	return p
}

func (p *pyHolder) line(t *testing.T) string {
	t.Helper()
	s, err := p.out.ReadString('\n')
	if err != nil {
		t.Fatalf("python: %v", err)
	}
	return strings.TrimSpace(s)
}

func (p *pyHolder) release(t *testing.T) {
	t.Helper()
	_ = p.stdin.Close()
	if err := p.cmd.Wait(); err != nil && !errors.Is(err, os.ErrProcessDone) && !strings.Contains(err.Error(), "Wait was already called") {
		t.Fatalf("python holder: %v", err)
	}
}

// TestGoAndPythonExcludeEachOther: a Go holder makes a Python try-lock
// fail and a Python holder makes a Go try-lock fail; each hand-over's
// token is higher than the last.
func TestGoAndPythonExcludeEachOther(t *testing.T) {
	e := setup(t)
	ctx := t.Context()
	k := key("mutex")
	m := e.goClient(t).Mutex(k, client.TTL(10*time.Second))
	if err := m.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	goTok := m.Token()
	try := e.python(t, k, "try")
	if got := try.line(t); got != "taken" {
		t.Fatalf("Python try-lock while Go holds: %q", got)
	}
	try.release(t)
	if err := m.Unlock(ctx); err != nil {
		t.Fatal(err)
	}

	hold := e.python(t, k, "hold")
	pyTok, err := strconv.ParseUint(hold.line(t), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	if pyTok <= goTok {
		t.Fatalf("Python's token %d after Go's %d", pyTok, goTok)
	}
	m2 := e.goClient(t).Mutex(k, client.TTL(10*time.Second))
	var le *client.LockedError
	if err := m2.TryLock(ctx); !errors.As(err, &le) {
		t.Fatalf("Go try-lock while Python holds: %v", err)
	}
	hold.release(t)
	if err := m2.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	if m2.Token() <= pyTok {
		t.Fatalf("Go's token %d after Python's %d", m2.Token(), pyTok)
	}
	_ = m2.Unlock(ctx)
}

// TestCurlReleaseWakesGoWaiter: a lock taken with curl, a Go client
// blocked on it, the curl release wakes it (the wake-up time is logged);
// another owner's release and a wrong secret are refused; CheckToken
// refuses the released token.
func TestCurlReleaseWakesGoWaiter(t *testing.T) {
	e := setup(t)
	k := key("curl")
	code, _, a := e.curl(t, 0, "Acquire", map[string]any{"key": k, "owner": "curl-owner", "ttl_ms": 10000}, e.sec)
	if code != http.StatusOK {
		t.Fatalf("curl Acquire: HTTP %d %v", code, a)
	}
	tok := token(t, a["token"])
	if code, st, _ := e.curl(t, 1, "Acquire", map[string]any{"key": k, "owner": "other", "ttl_ms": 10000}, e.sec); code == http.StatusOK || st != "LOCK_OCCUPIED" {
		t.Fatalf("a second owner's try-lock: HTTP %d %s", code, st)
	}
	if code, st, _ := e.curl(t, 1, "Release", map[string]any{"key": k, "owner": "other", "token": strconv.FormatUint(tok, 10)}, e.sec); code == http.StatusOK {
		t.Fatalf("another owner's release: HTTP %d %s", code, st)
	}
	if code, _, _ := e.curl(t, 0, "State", map[string]any{"key": k}, "wrong-secret"); code != http.StatusUnauthorized {
		t.Fatalf("a wrong secret: HTTP %d", code)
	}

	m := e.goClient(t).Mutex(k, client.TTL(10*time.Second))
	locked := make(chan error, 1)
	go func() { locked <- m.Lock(context.Background()) }()
	deadline := time.Now().Add(30 * time.Second)
	for { // the Go waiter is queued when the key's state shows it
		_, _, s := e.curl(t, 0, "State", map[string]any{"key": k}, e.sec)
		if st, _ := s["state"].(map[string]any); st != nil && st["queueLen"] != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the Go waiter never queued")
		}
		time.Sleep(20 * time.Millisecond)
	}
	released := time.Now()
	if code, _, r := e.curl(t, 0, "Release", map[string]any{"key": k, "owner": "curl-owner", "token": strconv.FormatUint(tok, 10)}, e.sec); code != http.StatusOK {
		t.Fatalf("curl Release: HTTP %d %v", code, r)
	}
	if err := <-locked; err != nil {
		t.Fatal(err)
	}
	t.Logf("Go waiter woken %v after the curl release", time.Since(released).Round(100*time.Microsecond))
	if m.Token() <= tok {
		t.Fatalf("Go's token %d after curl's %d", m.Token(), tok)
	}
	_, _, c := e.curl(t, 0, "CheckToken", map[string]any{"key": k, "token": strconv.FormatUint(tok, 10)}, e.sec)
	if c["current"] == true {
		t.Fatal("CheckToken accepts a released token")
	}
	_ = m.Unlock(t.Context())
}

// TestPythonSuite runs the Python client's own tests against the same
// cluster.
func TestPythonSuite(t *testing.T) {
	e := setup(t)
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3")
	}
	cmd := exec.Command(py, "-m", "unittest", "discover", "-v", "-s", "tests", "-t", ".")
	cmd.Dir = filepath.Join("..", "clients", "python")
	cmd.Env = append(os.Environ(), "PYTHONPATH=.", "PYTHONDONTWRITEBYTECODE=1",
		"PAXLOCK_API_URLS="+strings.Join(e.apis, ","), "PAXLOCK_NAMESPACE="+e.ns, "PAXLOCK_SECRET="+e.sec, "PAXLOCK_CA="+e.ca)
	out, err := cmd.CombinedOutput()
	t.Logf("%s", out)
	if err != nil || strings.Contains(string(out), "skipped=") {
		t.Fatalf("the Python client's tests: %v", err)
	}
}

// ctl runs paxlockctl against the cluster's admin endpoints.
func (e *env) ctl(t *testing.T, args ...string) string {
	t.Helper()
	dir := os.Getenv("PAXLOCK_CONFORMANCE_DIR")
	cmd := exec.Command(filepath.Join("..", "bin", "paxlockctl"), args...)
	cmd.Env = append(os.Environ(), "PAXLOCK_ADMIN_CA="+filepath.Join(dir, "certs", "ca.crt"),
		"PAXLOCK_ADMIN_TOKEN_FILE="+filepath.Join(dir, "certs", "admin.token"), "PAXLOCK_NAMESPACE="+e.ns)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("paxlockctl %q: %v\n%s", args, err, out)
	}
	return string(out)
}

// curlGrantedAfterLoss has a curl client (owner, waiting up to waitMs)
// queue for the key Go's m holds until m's hold ends by itself, and
// returns the token curl was granted; it fails t unless m saw the end
// before curl's grant (the validity rule) and the token is above m's.
func (e *env) curlGrantedAfterLoss(t *testing.T, m *client.Mutex, owner string, waitMs int) uint64 {
	t.Helper()
	before := m.Token()
	code, _, a := e.curl(t, 1, "Acquire", map[string]any{"key": m.Key(), "owner": owner, "ttl_ms": 30000, "wait_ms": waitMs}, e.sec)
	if code != http.StatusOK {
		t.Fatalf("curl waiter: HTTP %d %v", code, a)
	}
	select {
	case <-m.Lost():
	default:
		t.Fatal("the curl waiter was granted the key before its Go holder saw its hold end")
	}
	tok := token(t, a["token"])
	if tok <= before {
		t.Fatalf("curl's token %d after Go's %d", tok, before)
	}
	return tok
}

// TestExpiryRevocationAndMasterChange: a Go hold left to expire is seen
// lost by its holder before a curl waiter is granted the key; CheckToken
// refuses the curl hold once an operator force-unlocks it; after the
// key's master hands its groups over (a drain), the next grant's token
// is higher still.
func TestExpiryRevocationAndMasterChange(t *testing.T) {
	e := setup(t)
	k := key("expiry")
	m := e.goClient(t).Mutex(k, client.TTL(1500*time.Millisecond))
	if err := m.Lock(t.Context()); err != nil {
		t.Fatal(err)
	}
	t2 := e.curlGrantedAfterLoss(t, m, "waiter", 20000)

	e.ctl(t, "unlock", "--force", k)
	if _, _, c := e.curl(t, 0, "CheckToken", map[string]any{"key": k, "token": strconv.FormatUint(t2, 10)}, e.sec); c["current"] == true {
		t.Fatal("CheckToken accepts a force-unlocked hold's token")
	}
	_, _, _ = e.curl(t, 1, "Release", map[string]any{"key": k, "owner": "waiter", "token": strconv.FormatUint(t2, 10)}, e.sec) // acknowledge the revocation

	gc := e.goClient(t)
	v := gc.View()
	master := v.Groups[wire.GroupOf(wire.KeyHash(e.ns, k), len(v.Groups))].Master
	e.ctl(t, "drain", strconv.FormatUint(uint64(master), 10)) // the key's group moves to another node
	defer e.ctl(t, "drain", strconv.FormatUint(uint64(master), 10), "-undo")
	m3 := gc.Mutex(k, client.TTL(10*time.Second))
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := m3.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	if m3.Token() <= t2 {
		t.Fatalf("token %d after a master change, %d before", m3.Token(), t2)
	}
	_ = m3.Unlock(t.Context())
}
