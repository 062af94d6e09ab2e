package apiserver

import (
	"bytes"
	"io"
	"net/http"
	"testing"
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
