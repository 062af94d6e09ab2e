package apiserver

import (
	"bytes"
	"io"
	"math"
	"net/http"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	paxlockv1 "github.com/paxlock/paxlock/api/paxlock/v1"
	"github.com/paxlock/paxlock/client/wire"
)

// TestSmallAnswersUncompressed: a caller that accepts gzip (as every
// Connect and gRPC client does by default) gets a lock call's small
// answer uncompressed, so the node spends no gzip writer on it.
func TestSmallAnswersUncompressed(t *testing.T) {
	c := cluster(t)
	req, err := http.NewRequestWithContext(tctx(t), http.MethodPost, "http://"+c.apis[0].Addr()+"/paxlock.v1.LockService/Acquire",
		bytes.NewBufferString(`{"key": "gzip", "owner": "me", "ttl_ms": 10000}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	// Set by hand, the header turns off the transport's transparent
	// decompression, so the answer's Content-Encoding is seen as sent.
	req.Header.Set("Accept-Encoding", "gzip")
	req.SetBasicAuth(testNS, testSecret)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("acquire: %d %q", resp.StatusCode, b)
	}
	if enc := resp.Header.Get("Content-Encoding"); enc != "" {
		t.Fatalf("a %d-byte answer sent with Content-Encoding %q", len(b), enc)
	}
}

// TestLargestAnswersUnderCompressMin: the largest protobuf answer of
// every method (a key of wire.MaxKeyLen, a value of wire.MaxValueLen, the longest
// holder name, every number at its widest, a MultiAcquire's tokens for
// wire.MaxMultiKeys keys) is under compressMinBytes, so dropping the
// accept headers of protobuf callers (uncompressedAnswers) never sends
// uncompressed an answer that gzip would have been used for.
func TestLargestAnswersUnderCompressMin(t *testing.T) {
	key := strings.Repeat("k", wire.MaxKeyLen)
	value := bytes.Repeat([]byte{0xff}, wire.MaxValueLen)
	holder := strings.Repeat("f", 16) + "/" + strings.Repeat("f", 16)
	const big = math.MaxUint64
	tokens := make([]uint64, wire.MaxMultiKeys)
	for i := range tokens {
		tokens[i] = big
	}
	st := &paxlockv1.LockState{Held: true, Kind: paxlockv1.LockKind(math.MaxInt32), Token: big, Holder: holder, Value: value,
		TtlLeftMs: math.MaxUint32, QueueLen: math.MaxUint32, Readers: math.MaxUint32, Permits: math.MaxUint32,
		InUse: math.MaxUint32, LockDelayLeftMs: math.MaxUint32, IsOwner: true}
	for _, m := range []proto.Message{
		&paxlockv1.StateResponse{State: st},
		&paxlockv1.CheckTokenResponse{Current: true, State: st},
		&paxlockv1.WatchEvent{Key: key, Kind: paxlockv1.WatchEventKind(math.MaxInt32), Token: big, Holder: holder, Value: value},
		&paxlockv1.HoldEvent{Key: key, Kind: paxlockv1.WatchEventKind(math.MaxInt32), Token: big},
		&paxlockv1.MultiAcquireResponse{Tokens: tokens, TtlMs: math.MaxUint32, ValidityMs: math.MaxUint32},
	} {
		if n := proto.Size(m); n >= compressMinBytes {
			t.Errorf("%T: %d bytes, not under %d", m, n, compressMinBytes)
		}
	}
}
