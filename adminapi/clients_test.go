package adminapi

import "testing"

// FuzzParseClientCursor: GET /clients' after is outside input: the parser
// never panics, and a cursor it accepts prints back to one that parses to
// the same cursor.
func FuzzParseClientCursor(f *testing.F) {
	f.Add("2/1700000000123456789/1f/10.0.0.1:5000")
	f.Add("1/0//")
	f.Add("x/1/a/b")
	f.Fuzz(func(t *testing.T, s string) {
		c, err := ParseClientCursor(s)
		if err != nil {
			return
		}
		d, err := ParseClientCursor(c.String())
		if err != nil || d != c {
			t.Fatalf("%q: parsed %+v, printed %q, parsed again %+v (%v)", s, c, c.String(), d, err)
		}
	})
}
