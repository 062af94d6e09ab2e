package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/paxlock/paxlock/client"
)

// TestCheckCommand runs check against one in-process node: exit 0 for the
// holder's token (in decimal or hex), 3 for another token and for the
// token once released, 2 for usage errors, 1 when the cluster refuses the
// client; -o json prints the documented fields.
func TestCheckCommand(t *testing.T) {
	t.Setenv(SecretEnv, "")
	for _, args := range [][]string{{"check", "k"}, {"check", "k", "x"}, {"check", "k", "0"}, {"check", "k", "1", "2"}} {
		if code, _, _ := runCtl(t, "", args...); code != 2 {
			t.Errorf("%q: exit %d, want 2", args, code)
		}
	}
	clientAddr, _ := startOpsNode(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := client.New(ctx, client.Config{Registry: []string{clientAddr}, Namespace: "ops", Secret: "ops-secret"})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	m := c.Mutex("db:1", client.TTL(time.Minute))
	if err := m.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	tok := m.Token()
	t.Setenv(SecretEnv, "ops-secret")
	flags := []string{"-registry", clientAddr, "-namespace", "ops"}
	check := func(token string, json bool) (int, string, string) {
		args := append([]string{"check", "db:1", token}, flags...)
		if json {
			args = append(args, "-o", "json")
		}
		return runCtl(t, "", args...)
	}
	var out checkOutput
	code, stdout, stderr := check(fmt.Sprint(tok), true)
	if err := json.Unmarshal([]byte(stdout), &out); code != 0 || err != nil || !out.Current || out.Token != tok || out.Key != "db:1" ||
		!out.State.Held || out.State.Token != tok || out.State.Holder != m.Owner().String() {
		t.Fatalf("check of the holder's token: exit %d, %q (%v), stderr %q", code, stdout, err, stderr)
	}
	if code, stdout, _ := check(fmt.Sprintf("%#x", tok), false); code != 0 || !strings.Contains(stdout, "is current") {
		t.Fatalf("check in hex: exit %d, %q", code, stdout)
	}
	out = checkOutput{}
	code, stdout, _ = check(fmt.Sprint(tok+1), true)
	if err := json.Unmarshal([]byte(stdout), &out); code != exitNotCurrent || err != nil || out.Current || out.State.Token != tok {
		t.Fatalf("check of another token: exit %d, %q (%v)", code, stdout, err)
	}
	if err := m.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	code, stdout, _ = check(fmt.Sprint(tok), false)
	if code != exitNotCurrent || !strings.Contains(stdout, "not current (free)") {
		t.Fatalf("check after the release: exit %d, %q", code, stdout)
	}
	t.Setenv(SecretEnv, "wrong")
	if code, _, _ := runCtl(t, "", append([]string{"check", "db:1", "1", "-timeout", "5s"}, flags...)...); code != 1 {
		t.Errorf("check with a wrong secret: exit %d, want 1", code)
	}
}
