package wire

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestZZTiming(t *testing.T) {
	dir := os.Getenv("ZZDIR")
	if dir == "" {
		t.Skip()
	}
	typ := TypeGranted
	if strings.HasSuffix(dir, "View") {
		typ = TypeView
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*"))
	for _, f := range files {
		data, _ := os.ReadFile(f)
		lines := strings.Split(string(data), "\n")
		s := strings.TrimSuffix(strings.TrimPrefix(lines[1], "[]byte("), ")")
		b, err := strconv.Unquote(s)
		if err != nil {
			t.Fatal(err)
		}
		st := time.Now()
		for i := 0; i < 100; i++ {
			m := NewMessage(typ)
			if err := DecodeInto([]byte(b), m); err == nil {
				checkRoundTrip(t, typ, m)
			}
		}
		if d := time.Since(st); d > 5*time.Millisecond {
			t.Logf("%s: %v per 100, len %d: % x", filepath.Base(f), d, len(b), []byte(b)[:min(len(b), 40)])
		}
	}
}
