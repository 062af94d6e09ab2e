package apiserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	paxlockv1 "github.com/paxlock/paxlock/api/paxlock/v1"
	"github.com/paxlock/paxlock/client/wire"
	"github.com/paxlock/paxlock/internal/testutil"
)

// codeOfErr is err's Connect code (0 for nil).
func codeOfErr(err error) connect.Code {
	if err == nil {
		return 0
	}
	return connect.CodeOf(err)
}

// statusOfErr is the paxlock status an error of the service names.
func statusOfErr(err error) string {
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return ""
	}
	return ce.Meta().Get(StatusHeader)
}

func acquire(ctx context.Context, c interface {
	Acquire(context.Context, *connect.Request[paxlockv1.AcquireRequest]) (*connect.Response[paxlockv1.AcquireResponse], error)
}, q *paxlockv1.AcquireRequest) (*paxlockv1.AcquireResponse, error) {
	r, err := c.Acquire(ctx, connect.NewRequest(q))
	if err != nil {
		return nil, err
	}
	return r.Msg, nil
}

// TestAcquireRenewRelease: a try-lock is granted with a token and the TTL
// applied, renewed by its owner, released, and a second release finds
// no hold (NOT_FOUND).
func TestAcquireRenewRelease(t *testing.T) {
	t.Parallel()
	c := cluster(t)
	cl := c.client(0, testNS, testSecret)
	ctx := tctx(t)
	a, err := acquire(ctx, cl, &paxlockv1.AcquireRequest{Key: "arr", Owner: "alice", TtlMs: 5000})
	if err != nil {
		t.Fatal(err)
	}
	if a.Token == 0 || a.TtlMs != 5000 || a.ValidityMs == 0 || a.ValidityMs >= 5000 {
		t.Fatalf("acquire answered %v: want a token, ttl 5000 and validity below it", a)
	}
	re, err := cl.Renew(ctx, connect.NewRequest(&paxlockv1.RenewRequest{Key: "arr", Owner: "alice", Token: a.Token, TtlMs: 8000}))
	if err != nil {
		t.Fatal(err)
	}
	if re.Msg.TtlMs != 8000 {
		t.Fatalf("renew applied ttl %d, want 8000", re.Msg.TtlMs)
	}
	again, err := acquire(ctx, cl, &paxlockv1.AcquireRequest{Key: "arr", Owner: "alice"})
	if err != nil || again.Token != a.Token {
		t.Fatalf("reacquire by the owner: %v, %v; want the same token %d", again, err, a.Token)
	}
	if _, err := cl.Release(ctx, connect.NewRequest(&paxlockv1.ReleaseRequest{Key: "arr", Owner: "alice", Token: a.Token})); err != nil {
		t.Fatal(err)
	}
	_, err = cl.Release(ctx, connect.NewRequest(&paxlockv1.ReleaseRequest{Key: "arr", Owner: "alice", Token: a.Token}))
	if codeOfErr(err) != connect.CodeNotFound || statusOfErr(err) != "LOCK_DELETED" {
		t.Fatalf("second release: %v, want NOT_FOUND with LOCK_DELETED", err)
	}
}

// TestWrongOwnerRefused: another owner's release, renew and try-lock are
// refused with error codes, and the holder's hold is untouched.
func TestWrongOwnerRefused(t *testing.T) {
	t.Parallel()
	c := cluster(t)
	cl := c.client(0, testNS, testSecret)
	ctx := tctx(t)
	a, err := acquire(ctx, cl, &paxlockv1.AcquireRequest{Key: "wo", Owner: "alice", TtlMs: 10000, Value: []byte("a")})
	if err != nil {
		t.Fatal(err)
	}
	_, err = cl.Release(ctx, connect.NewRequest(&paxlockv1.ReleaseRequest{Key: "wo", Owner: "mallory", Token: a.Token}))
	if codeOfErr(err) != connect.CodePermissionDenied || statusOfErr(err) != "LOCK_CHANGED_OWNER" {
		t.Fatalf("release by another owner: %v, want PERMISSION_DENIED (LOCK_CHANGED_OWNER)", err)
	}
	_, err = cl.Renew(ctx, connect.NewRequest(&paxlockv1.RenewRequest{Key: "wo", Owner: "mallory", Token: a.Token}))
	if codeOfErr(err) != connect.CodePermissionDenied {
		t.Fatalf("renew by another owner: %v, want PERMISSION_DENIED", err)
	}
	_, err = cl.Release(ctx, connect.NewRequest(&paxlockv1.ReleaseRequest{Key: "wo", Owner: "alice", Token: a.Token + 1}))
	if codeOfErr(err) != connect.CodePermissionDenied || statusOfErr(err) != "TOKEN_ERROR" {
		t.Fatalf("release with a wrong token: %v, want PERMISSION_DENIED (TOKEN_ERROR)", err)
	}
	_, err = acquire(ctx, cl, &paxlockv1.AcquireRequest{Key: "wo", Owner: "mallory"})
	if codeOfErr(err) != connect.CodeFailedPrecondition || statusOfErr(err) != "LOCK_OCCUPIED" {
		t.Fatalf("try-lock of a held key: %v, want FAILED_PRECONDITION (LOCK_OCCUPIED)", err)
	}
	var ce *connect.Error
	errors.As(err, &ce)
	var info *paxlockv1.ErrorInfo
	for _, d := range ce.Details() {
		if v, err := d.Value(); err == nil {
			if i, ok := v.(*paxlockv1.ErrorInfo); ok {
				info = i
			}
		}
	}
	if info == nil || info.State.GetToken() != a.Token || string(info.State.GetValue()) != "a" {
		t.Fatalf("LOCK_OCCUPIED detail %v: want the holder's token %d and value", info, a.Token)
	}
	st, err := cl.State(ctx, connect.NewRequest(&paxlockv1.StateRequest{Key: "wo", Owner: "alice"}))
	if err != nil || !st.Msg.State.Held || st.Msg.State.Token != a.Token || !st.Msg.State.IsOwner {
		t.Fatalf("state after the refusals: %v, %v; want alice's hold %d", st, err, a.Token)
	}
	if _, err := cl.Release(ctx, connect.NewRequest(&paxlockv1.ReleaseRequest{Key: "wo", Owner: "alice", Token: a.Token})); err != nil {
		t.Fatal(err)
	}
}

// TestWrongSecretRefused: a wrong secret, an unknown namespace, another
// namespace's secret and no credentials are all UNAUTHENTICATED; the
// right secret is still accepted after them (the cache kept no refusal).
func TestWrongSecretRefused(t *testing.T) {
	t.Parallel()
	c := cluster(t)
	ctx := tctx(t)
	for _, cred := range [][2]string{{testNS, "wrong"}, {"nosuch", testSecret}, {testNS, "x"}, {"", ""}} {
		cl := c.client(1, cred[0], cred[1])
		_, err := acquire(ctx, cl, &paxlockv1.AcquireRequest{Key: "ws", Owner: "o"})
		if codeOfErr(err) != connect.CodeUnauthenticated {
			t.Fatalf("credentials %q: %v, want UNAUTHENTICATED", cred[0], err)
		}
	}
	a, err := acquire(ctx, c.client(1, testNS, testSecret), &paxlockv1.AcquireRequest{Key: "ws", Owner: "o"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.client(1, testNS, testSecret).Release(ctx, connect.NewRequest(&paxlockv1.ReleaseRequest{Key: "ws", Owner: "o", Token: a.Token})); err != nil {
		t.Fatal(err)
	}
}

// TestAnyNodeServesAnyKey: keys whose groups different nodes master are
// acquired through one node's API and renewed and released through each
// other node's: the owner string is the same owner everywhere, and a node
// that is not the master forwards.
func TestAnyNodeServesAnyKey(t *testing.T) {
	t.Parallel()
	c := cluster(t)
	ctx := tctx(t)
	before := c.forwarded(t)
	for k := range 6 {
		key := "any-" + strconv.Itoa(k)
		a, err := acquire(ctx, c.client(k%3, testNS, testSecret), &paxlockv1.AcquireRequest{Key: key, Owner: "o"})
		if err != nil {
			t.Fatalf("%s: %v", key, err)
		}
		if _, err := c.client((k+1)%3, testNS, testSecret).Renew(ctx, connect.NewRequest(&paxlockv1.RenewRequest{Key: key, Owner: "o", Token: a.Token})); err != nil {
			t.Fatalf("%s: renew through another node: %v", key, err)
		}
		if _, err := c.client((k+2)%3, testNS, testSecret).Release(ctx, connect.NewRequest(&paxlockv1.ReleaseRequest{Key: key, Owner: "o", Token: a.Token})); err != nil {
			t.Fatalf("%s: release through a third node: %v", key, err)
		}
	}
	if after := c.forwarded(t); after <= before {
		t.Fatalf("paxlock_forwarded_total stayed %d: no request was forwarded to its master", after)
	}
}

// TestBlockingAcquireWokenByRelease: a blocking acquire queues on the
// master (the key's state shows it waiting), is not answered while the
// key is held, and is granted, with a higher token, by the holder's
// release.
func TestBlockingAcquireWokenByRelease(t *testing.T) {
	t.Parallel()
	c := cluster(t)
	ctx := tctx(t)
	holder, waiter := c.client(0, testNS, testSecret), c.client(2, testNS, testSecret)
	a, err := acquire(ctx, holder, &paxlockv1.AcquireRequest{Key: "block", Owner: "first", TtlMs: 20000})
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		r   *paxlockv1.AcquireResponse
		err error
		at  time.Time
	}
	done := make(chan result, 1)
	go func() {
		r, err := acquire(ctx, waiter, &paxlockv1.AcquireRequest{Key: "block", Owner: "second", WaitMs: 20000, TtlMs: 5000})
		done <- result{r, err, time.Now()}
	}()
	testutil.Eventually(t, 10*time.Second, func() bool {
		st, err := holder.State(ctx, connect.NewRequest(&paxlockv1.StateRequest{Key: "block"}))
		return err == nil && st.Msg.State.QueueLen == 1
	}, "the waiter to queue on the master")
	select {
	case r := <-done:
		t.Fatalf("the waiter was answered while the key was held: %v, %v", r.r, r.err)
	default:
	}
	released := time.Now()
	if _, err := holder.Release(ctx, connect.NewRequest(&paxlockv1.ReleaseRequest{Key: "block", Owner: "first", Token: a.Token})); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.r.Token <= a.Token || r.r.WaitedMs == 0 {
		t.Fatalf("waiter granted %v, want a token above %d and the time it waited", r.r, a.Token)
	}
	t.Logf("woken %v after the release", r.at.Sub(released))
	if _, err := waiter.Release(ctx, connect.NewRequest(&paxlockv1.ReleaseRequest{Key: "block", Owner: "second", Token: r.r.Token})); err != nil {
		t.Fatal(err)
	}
}

// TestWaitRunsOut: a blocking acquire whose wait_ms passes is
// DEADLINE_EXCEEDED and leaves the queue.
func TestWaitRunsOut(t *testing.T) {
	t.Parallel()
	c := cluster(t)
	cl := c.client(1, testNS, testSecret)
	ctx := tctx(t)
	a, err := acquire(ctx, cl, &paxlockv1.AcquireRequest{Key: "runout", Owner: "first", TtlMs: 20000})
	if err != nil {
		t.Fatal(err)
	}
	_, err = acquire(ctx, cl, &paxlockv1.AcquireRequest{Key: "runout", Owner: "second", WaitMs: 200})
	if codeOfErr(err) != connect.CodeDeadlineExceeded {
		t.Fatalf("wait ran out: %v, want DEADLINE_EXCEEDED", err)
	}
	st, err := cl.State(ctx, connect.NewRequest(&paxlockv1.StateRequest{Key: "runout"}))
	if err != nil || st.Msg.State.QueueLen != 0 {
		t.Fatalf("state after the wait ran out: %v, %v; want no waiter", st, err)
	}
	if _, err := cl.Release(ctx, connect.NewRequest(&paxlockv1.ReleaseRequest{Key: "runout", Owner: "first", Token: a.Token})); err != nil {
		t.Fatal(err)
	}
}

// TestWatchStream: a continuous watch sees the acquire (token, value)
// and the release of a key, in order.
func TestWatchStream(t *testing.T) {
	t.Parallel()
	c := cluster(t)
	cl := c.client(2, testNS, testSecret)
	ctx, cancel := context.WithCancel(tctx(t))
	defer cancel()
	stream, err := cl.Watch(ctx, connect.NewRequest(&paxlockv1.WatchRequest{Key: "watched", Continuous: true}))
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	if _, err := stream.ResponseHeader(), stream.Err(); err != nil {
		t.Fatal(err)
	}
	// The headers come once the master registered the watch.
	a, err := acquire(ctx, c.client(0, testNS, testSecret), &paxlockv1.AcquireRequest{Key: "watched", Owner: "w", Value: []byte("v1")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.client(1, testNS, testSecret).Release(ctx, connect.NewRequest(&paxlockv1.ReleaseRequest{Key: "watched", Owner: "w", Token: a.Token})); err != nil {
		t.Fatal(err)
	}
	want := []paxlockv1.WatchEventKind{paxlockv1.WatchEventKind_WATCH_EVENT_KIND_ACQUIRED, paxlockv1.WatchEventKind_WATCH_EVENT_KIND_RELEASED}
	for i, k := range want {
		if !stream.Receive() {
			t.Fatalf("stream ended before event %d: %v", i, stream.Err())
		}
		ev := stream.Msg()
		if ev.Kind != k || ev.Token != a.Token {
			t.Fatalf("event %d: %v, want %v of token %d", i, ev, k, a.Token)
		}
		if i == 0 && string(ev.Value) != "v1" {
			t.Fatalf("acquired event's value %q, want v1", ev.Value)
		}
	}
}

// TestCheckToken: a held token is current; after the release it is not,
// and neither is a token never granted.
func TestCheckToken(t *testing.T) {
	t.Parallel()
	c := cluster(t)
	cl := c.client(0, testNS, testSecret)
	ctx := tctx(t)
	check := func(tok uint64) bool {
		t.Helper()
		r, err := cl.CheckToken(ctx, connect.NewRequest(&paxlockv1.CheckTokenRequest{Key: "ct", Token: tok}))
		if err != nil {
			t.Fatal(err)
		}
		return r.Msg.Current
	}
	a, err := acquire(ctx, cl, &paxlockv1.AcquireRequest{Key: "ct", Owner: "o"})
	if err != nil {
		t.Fatal(err)
	}
	if !check(a.Token) || check(a.Token+1) {
		t.Fatal("check of the held token not current, or of another token current")
	}
	if _, err := cl.Release(ctx, connect.NewRequest(&paxlockv1.ReleaseRequest{Key: "ct", Owner: "o", Token: a.Token})); err != nil {
		t.Fatal(err)
	}
	if check(a.Token) {
		t.Fatal("released token still current")
	}
	_, err = cl.CheckToken(ctx, connect.NewRequest(&paxlockv1.CheckTokenRequest{Key: "ct"}))
	if codeOfErr(err) != connect.CodeInvalidArgument {
		t.Fatalf("check of token 0: %v, want INVALID_ARGUMENT", err)
	}
}

// TestReadWriteAndSemaphore: readers share a read lock and keep a writer
// out; a semaphore of 2 permits takes two holders and refuses a third.
func TestReadWriteAndSemaphore(t *testing.T) {
	t.Parallel()
	c := cluster(t)
	cl := c.client(1, testNS, testSecret)
	ctx := tctx(t)
	read := paxlockv1.LockKind_LOCK_KIND_READ
	r1, err := acquire(ctx, cl, &paxlockv1.AcquireRequest{Key: "rw", Owner: "r1", Kind: read})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := acquire(ctx, cl, &paxlockv1.AcquireRequest{Key: "rw", Owner: "r2", Kind: read}); err != nil {
		t.Fatalf("second reader: %v", err)
	}
	_, err = acquire(ctx, cl, &paxlockv1.AcquireRequest{Key: "rw", Owner: "w", Kind: paxlockv1.LockKind_LOCK_KIND_WRITE})
	if codeOfErr(err) != connect.CodeFailedPrecondition {
		t.Fatalf("writer while read-locked: %v, want FAILED_PRECONDITION", err)
	}
	if r1.Token == 0 {
		t.Fatal("reader without a token")
	}
	sem := paxlockv1.LockKind_LOCK_KIND_SEMAPHORE
	for _, o := range []string{"s1", "s2"} {
		if _, err := acquire(ctx, cl, &paxlockv1.AcquireRequest{Key: "sem", Owner: o, Kind: sem, Permits: 1, Limit: 2}); err != nil {
			t.Fatalf("permit for %s: %v", o, err)
		}
	}
	_, err = acquire(ctx, cl, &paxlockv1.AcquireRequest{Key: "sem", Owner: "s3", Kind: sem, Permits: 1, Limit: 2})
	if codeOfErr(err) != connect.CodeFailedPrecondition {
		t.Fatalf("third permit of 2: %v, want FAILED_PRECONDITION", err)
	}
}

// TestGRPC: the same handler answers gRPC over HTTP/2 without TLS.
func TestGRPC(t *testing.T) {
	t.Parallel()
	c := cluster(t)
	cl := c.client(2, testNS, testSecret, connect.WithGRPC())
	ctx := tctx(t)
	a, err := acquire(ctx, cl, &paxlockv1.AcquireRequest{Key: "grpc", Owner: "g"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = cl.Release(ctx, connect.NewRequest(&paxlockv1.ReleaseRequest{Key: "grpc", Owner: "other", Token: a.Token}))
	if codeOfErr(err) != connect.CodePermissionDenied {
		t.Fatalf("gRPC release by another owner: %v, want PERMISSION_DENIED", err)
	}
}

// TestCurlJSON: plain JSON over HTTP/1.1, as curl sends it, takes a lock,
// and another owner's release is refused with HTTP 403 and the Connect
// code permission_denied.
func TestCurlJSON(t *testing.T) {
	t.Parallel()
	c := cluster(t)
	base := "http://" + c.apis[0].Addr() + "/paxlock.v1.LockService/"
	post := func(method, body string) (int, map[string]any) {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, base+method, bytes.NewBufferString(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.SetBasicAuth(testNS, testSecret)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var out map[string]any
		if err := json.Unmarshal(b, &out); err != nil {
			t.Fatalf("%s answered %d %q: %v", method, resp.StatusCode, b, err)
		}
		return resp.StatusCode, out
	}
	code, out := post("Acquire", `{"key": "curl", "owner": "me", "ttl_ms": 10000}`)
	tok, _ := out["token"].(string)
	if code != http.StatusOK || tok == "" || out["ttlMs"] != float64(10000) {
		t.Fatalf("acquire: %d %v, want 200 with a token and ttlMs 10000", code, out)
	}
	code, out = post("Release", fmt.Sprintf(`{"key": "curl", "owner": "you", "token": %q}`, tok))
	if code != http.StatusForbidden || out["code"] != "permission_denied" {
		t.Fatalf("release by another owner: %d %v, want 403 permission_denied", code, out)
	}
	code, out = post("Release", fmt.Sprintf(`{"key": "curl", "owner": "me", "token": %q}`, tok))
	if code != http.StatusOK {
		t.Fatalf("release by the owner: %d %v", code, out)
	}
}

// TestLossSeenByWatch: a holder that watches its own hold (its key and
// token) is told, without polling, when the hold expires.
func TestLossSeenByWatch(t *testing.T) {
	t.Parallel()
	c := cluster(t)
	cl := c.client(1, testNS, testSecret)
	ctx := tctx(t)
	a, err := acquire(ctx, cl, &paxlockv1.AcquireRequest{Key: "loss", Owner: "o", TtlMs: 1000})
	if err != nil {
		t.Fatal(err)
	}
	stream, err := cl.Watch(ctx, connect.NewRequest(&paxlockv1.WatchRequest{Key: "loss", Token: a.Token}))
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	if !stream.Receive() {
		t.Fatalf("watch of the own hold ended without an event: %v", stream.Err())
	}
	if ev := stream.Msg(); ev.Kind != paxlockv1.WatchEventKind_WATCH_EVENT_KIND_EXPIRED || ev.Token != a.Token {
		t.Fatalf("event %v, want EXPIRED of token %d", ev, a.Token)
	}
	if stream.Receive() {
		t.Fatalf("a watch that is not continuous sent a second event: %v", stream.Msg())
	}
}

// TestRenewSetsValue: Renew with set_value replaces the holder value
// that State shows; the token stays.
func TestRenewSetsValue(t *testing.T) {
	t.Parallel()
	c := cluster(t)
	cl := c.client(2, testNS, testSecret)
	ctx := tctx(t)
	a, err := acquire(ctx, cl, &paxlockv1.AcquireRequest{Key: "val", Owner: "leader", Value: []byte("host-a")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Renew(ctx, connect.NewRequest(&paxlockv1.RenewRequest{Key: "val", Owner: "leader", Token: a.Token, SetValue: true, Value: []byte("host-b")})); err != nil {
		t.Fatal(err)
	}
	st, err := cl.State(ctx, connect.NewRequest(&paxlockv1.StateRequest{Key: "val"}))
	if err != nil || string(st.Msg.State.Value) != "host-b" || st.Msg.State.Token != a.Token {
		t.Fatalf("state after set_value: %v, %v; want value host-b and token %d", st, err, a.Token)
	}
}

// TestLateGrantConfirmed: a grant that comes after a third of its
// validity is confirmed with a Renew, and validity_ms then counts the
// wait before that Renew's send as well (the caller counts it from its
// own send): more than the TTL less the margin, never more than the wait
// plus the TTL.
func TestLateGrantConfirmed(t *testing.T) {
	t.Parallel()
	c := cluster(t)
	cl := c.client(0, testNS, testSecret)
	ctx := tctx(t)
	a, err := acquire(ctx, cl, &paxlockv1.AcquireRequest{Key: "late", Owner: "first", TtlMs: 20000})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan *paxlockv1.AcquireResponse, 1)
	sent := time.Now()
	go func() {
		r, err := acquire(ctx, cl, &paxlockv1.AcquireRequest{Key: "late", Owner: "second", WaitMs: 20000, TtlMs: 1000})
		if err != nil {
			t.Error(err)
		}
		done <- r
	}()
	testutil.Eventually(t, 10*time.Second, func() bool {
		st, err := cl.State(ctx, connect.NewRequest(&paxlockv1.StateRequest{Key: "late"}))
		return err == nil && st.Msg.State.QueueLen == 1
	}, "the waiter to queue")
	// Past a third of the waiter's validity (990 ms) before the grant:
	// waiting for time to pass, not synchronising anything.
	<-time.After(400 * time.Millisecond)
	if _, err := cl.Release(ctx, connect.NewRequest(&paxlockv1.ReleaseRequest{Key: "late", Owner: "first", Token: a.Token})); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r == nil {
		t.Fatal("no grant")
	}
	answered := time.Since(sent)
	if r.ValidityMs <= 990 || time.Duration(r.ValidityMs)*time.Millisecond > answered+time.Second {
		t.Fatalf("late grant validity %d ms (answered %v after the send): want above 990 and at most the wait plus the TTL", r.ValidityMs, answered)
	}
	// A 1 s hold may have run out already on a loaded machine.
	if _, err := cl.Release(ctx, connect.NewRequest(&paxlockv1.ReleaseRequest{Key: "late", Owner: "second", Token: r.Token})); err != nil && codeOfErr(err) != connect.CodeNotFound {
		t.Fatal(err)
	}
}

// TestDowngradeAndSetLimit: a writer downgrades to a reader keeping its
// token (a second reader is then admitted); a semaphore's total is
// raised with set_limit, admitting one more holder.
func TestDowngradeAndSetLimit(t *testing.T) {
	t.Parallel()
	c := cluster(t)
	cl := c.client(0, testNS, testSecret)
	ctx := tctx(t)
	w, err := acquire(ctx, cl, &paxlockv1.AcquireRequest{Key: "dg", Owner: "w", Kind: paxlockv1.LockKind_LOCK_KIND_WRITE})
	if err != nil {
		t.Fatal(err)
	}
	d, err := acquire(ctx, cl, &paxlockv1.AcquireRequest{Key: "dg", Owner: "w", Kind: paxlockv1.LockKind_LOCK_KIND_READ, Downgrade: true})
	if err != nil || d.Token != w.Token {
		t.Fatalf("downgrade: %v, %v; want the write hold's token %d", d, err, w.Token)
	}
	if _, err := acquire(ctx, cl, &paxlockv1.AcquireRequest{Key: "dg", Owner: "r", Kind: paxlockv1.LockKind_LOCK_KIND_READ}); err != nil {
		t.Fatalf("reader after the downgrade: %v", err)
	}
	sem := paxlockv1.LockKind_LOCK_KIND_SEMAPHORE
	if _, err := acquire(ctx, cl, &paxlockv1.AcquireRequest{Key: "sl", Owner: "a", Kind: sem, Permits: 1, Limit: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := acquire(ctx, cl, &paxlockv1.AcquireRequest{Key: "sl", Owner: "b", Kind: sem, Limit: 2, SetLimit: true}); err != nil {
		t.Fatalf("set_limit: %v", err)
	}
	if _, err := acquire(ctx, cl, &paxlockv1.AcquireRequest{Key: "sl", Owner: "b", Kind: sem, Permits: 1, Limit: 2}); err != nil {
		t.Fatalf("second permit after raising the total: %v", err)
	}
}

// TestLockDelay: after a hold with a lock-delay expires, a try-lock by
// another owner is refused LOCK_OCCUPIED with no holder, and State shows
// the delay left.
func TestLockDelay(t *testing.T) {
	t.Parallel()
	c := cluster(t)
	cl := c.client(2, testNS, testSecret)
	ctx := tctx(t)
	a, err := acquire(ctx, cl, &paxlockv1.AcquireRequest{Key: "delay", Owner: "a", TtlMs: 1000, LockDelayMs: 20000})
	if err != nil {
		t.Fatal(err)
	}
	stream, err := cl.Watch(ctx, connect.NewRequest(&paxlockv1.WatchRequest{Key: "delay", Token: a.Token}))
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	if !stream.Receive() || stream.Msg().Kind != paxlockv1.WatchEventKind_WATCH_EVENT_KIND_EXPIRED {
		t.Fatalf("no expiry seen: %v %v", stream.Msg(), stream.Err())
	}
	_, err = acquire(ctx, cl, &paxlockv1.AcquireRequest{Key: "delay", Owner: "b"})
	if codeOfErr(err) != connect.CodeFailedPrecondition || statusOfErr(err) != "LOCK_OCCUPIED" {
		t.Fatalf("try-lock in the lock-delay: %v, want FAILED_PRECONDITION (LOCK_OCCUPIED)", err)
	}
	st, err := cl.State(ctx, connect.NewRequest(&paxlockv1.StateRequest{Key: "delay"}))
	if err != nil || st.Msg.State.Held || st.Msg.State.LockDelayLeftMs == 0 {
		t.Fatalf("state in the lock-delay: %v, %v; want free with the delay left", st, err)
	}
}

// TestSecretChange: once the node applied a namespace's new secret, the
// old secret is refused (its cached verification no longer counts) and
// the new one is served, over a new session once the node revoked the
// old one.
func TestSecretChange(t *testing.T) {
	t.Parallel()
	c := cluster(t)
	ctx := tctx(t)
	admin := "http://" + c.nodes[0].Config().AdminAddr + "/namespaces"
	put := func(secret string) {
		t.Helper()
		// 503: group 0 between masters on a loaded machine; the change
		// was not proposed, so it is sent again.
		testutil.EventuallyWith(t, 20*time.Second, func() (bool, string) {
			resp, err := http.Post(admin, "application/json", bytes.NewBufferString(fmt.Sprintf(`{"name": "rot", "secret": %q}`, secret)))
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusServiceUnavailable && resp.StatusCode/100 != 2 {
				t.Fatalf("POST /namespaces: %s", resp.Status)
			}
			return resp.StatusCode/100 == 2, resp.Status
		}, "POST /namespaces to be served")
	}
	put("one-secret")
	try := func(secret string) error {
		_, err := c.client(1, "rot", secret).State(ctx, connect.NewRequest(&paxlockv1.StateRequest{Key: "k"}))
		return err
	}
	testutil.Eventually(t, 10*time.Second, func() bool { return try("one-secret") == nil }, "the new namespace to be served")
	put("two-secret")
	testutil.Eventually(t, 10*time.Second, func() bool { return codeOfErr(try("one-secret")) == connect.CodeUnauthenticated }, "the old secret to be refused")
	testutil.Eventually(t, 10*time.Second, func() bool { return try("two-secret") == nil }, "the new secret to be served")
}

// TestRequestBound: a request body past maxRequestBytes is refused
// RESOURCE_EXHAUSTED without being served.
func TestRequestBound(t *testing.T) {
	t.Parallel()
	c := cluster(t)
	body := `{"key": "big", "owner": "` + strings.Repeat("x", maxRequestBytes) + `"}`
	req, err := http.NewRequest(http.MethodPost, "http://"+c.apis[0].Addr()+"/paxlock.v1.LockService/Acquire", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.SetBasicAuth(testNS, testSecret)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode == http.StatusOK || !strings.Contains(string(b), "resource_exhausted") {
		t.Fatalf("oversized request answered %d %s, want resource_exhausted", resp.StatusCode, b)
	}
}

// TestRoutingHints: every answer about a key, an error's too, names the
// node that answered, the master of the key's group and the group (the
// documented hash); a call sent to the hinted master is answered by the
// master itself, whose hint names itself.
func TestRoutingHints(t *testing.T) {
	t.Parallel()
	c := cluster(t)
	ctx := tctx(t)
	index := map[string]int{}
	for i, n := range c.nodes {
		index[strconv.FormatUint(uint64(n.NodeID()), 10)] = i
	}
	for k := range 6 {
		key := "hint-" + strconv.Itoa(k)
		r, err := c.client(k%3, testNS, testSecret).Acquire(ctx, connect.NewRequest(&paxlockv1.AcquireRequest{Key: key, Owner: "o"}))
		if err != nil {
			t.Fatalf("%s: %v", key, err)
		}
		h := r.Header()
		if got, want := h.Get(NodeHeader), strconv.FormatUint(uint64(c.nodes[k%3].NodeID()), 10); got != want {
			t.Fatalf("%s: %s %q, want %q", key, NodeHeader, got, want)
		}
		groups := 0
		if _, err := fmt.Sscanf(h.Get(GroupHeader), "%d/%d", new(int), &groups); err != nil || groups <= 0 {
			t.Fatalf("%s: %s %q: %v", key, GroupHeader, h.Get(GroupHeader), err)
		}
		if want := fmt.Sprintf("%d/%d", wire.GroupOf(wire.KeyHash(testNS, key), groups), groups); h.Get(GroupHeader) != want {
			t.Fatalf("%s: %s %q, want %q", key, GroupHeader, h.Get(GroupHeader), want)
		}
		m, ok := index[h.Get(MasterHeader)]
		if !ok {
			t.Fatalf("%s: %s %q names no node", key, MasterHeader, h.Get(MasterHeader))
		}
		rel, err := c.client(m, testNS, testSecret).Release(ctx, connect.NewRequest(&paxlockv1.ReleaseRequest{Key: key, Owner: "o", Token: r.Msg.Token}))
		if err != nil {
			t.Fatalf("%s: release at the hinted master: %v", key, err)
		}
		if rel.Header().Get(MasterHeader) != rel.Header().Get(NodeHeader) {
			t.Fatalf("%s: the hinted master's answer names master %q, itself %q", key, rel.Header().Get(MasterHeader), rel.Header().Get(NodeHeader))
		}
		_, err = c.client(k%3, testNS, testSecret).Release(ctx, connect.NewRequest(&paxlockv1.ReleaseRequest{Key: key, Owner: "o", Token: r.Msg.Token}))
		var ce *connect.Error
		if !errors.As(err, &ce) || ce.Meta().Get(MasterHeader) == "" {
			t.Fatalf("%s: a second release: %v, want an error carrying %s", key, err, MasterHeader)
		}
	}
}
