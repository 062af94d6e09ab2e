package freeport

import (
	"net"
	"testing"
)

// TestLoopbackDistinctAndFree takes many addresses in several calls: none
// repeats, each is below the ephemeral range and can be listened on.
func TestLoopbackDistinctAndFree(t *testing.T) {
	seen := map[string]bool{}
	for range 5 {
		addrs, err := Loopback(40)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range addrs {
			if seen[a] {
				t.Fatalf("%s handed out twice", a)
			}
			seen[a] = true
			_, port, _ := net.SplitHostPort(a)
			if port < "20000" || port > "29999" || len(port) != 5 {
				t.Fatalf("%s outside 20000-29999", a)
			}
			ln, err := net.Listen("tcp", a)
			if err != nil {
				t.Fatalf("%s not free: %v", a, err)
			}
			_ = ln.Close()
		}
	}
}
