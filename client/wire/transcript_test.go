package wire

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
)

const transcriptFile = "testdata/session.txt"

// TestTranscript checks testdata/session.txt, a whole recorded session
// (the root module's clienttests/transcript_test.go records its frames): every frame decodes,
// encodes back to the same bytes and shows the fields it decodes to;
// every response answers an earlier request of the client's, and pushes
// carry request id 0. With -update it writes the decoded fields of each
// frame from its hex.
func TestTranscript(t *testing.T) {
	b, err := os.ReadFile(transcriptFile)
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	var header strings.Builder
	for _, line := range strings.SplitAfter(text, "\n") {
		if !strings.HasPrefix(line, "#") && strings.TrimSpace(line) != "" {
			break
		}
		header.WriteString(line)
	}
	records := parseVectors(t, text)
	if len(records) < 10 {
		t.Fatalf("%s: %d frames, want a whole session", transcriptFile, len(records))
	}
	var out strings.Builder
	out.WriteString(header.String())
	asked := map[uint64]bool{}
	for i, r := range records {
		where := fmt.Sprintf("%s:%d: frame %s", transcriptFile, r.line, r.name)
		if r.kind != "frame" {
			t.Fatalf("%s: record kind %q", where, r.kind)
		}
		raw, err := hex.DecodeString(strings.ReplaceAll(r.fields["hex"], " ", ""))
		if err != nil {
			t.Fatalf("%s: hex: %v", where, err)
		}
		f, n, err := ParseFrame(raw, 0)
		if err != nil || n != len(raw) {
			t.Fatalf("%s: ParseFrame: n=%d of %d, %v", where, n, len(raw), err)
		}
		m, err := Decode(f.Type, f.Body)
		if err != nil {
			t.Fatalf("%s: Decode: %v", where, err)
		}
		again, err := AppendFrame(nil, f.Type, f.ReqID, m)
		if err != nil || !bytes.Equal(again, raw) {
			t.Errorf("%s: re-encodes to %x (%v), want %x", where, again, err, raw)
		}
		body, err := genericFields(f.Body)
		if err != nil {
			t.Fatalf("%s: body: %v", where, err)
		}
		typ := fmt.Sprintf("0x%02x %s", uint8(f.Type), f.Type)
		dir := r.fields["dir"]
		switch {
		case dir == "c->s":
			asked[f.ReqID] = true
		case dir != "s->c":
			t.Errorf("%s: dir %q, want c->s or s->c", where, dir)
		case f.ReqID == 0 && f.Type == TypeResponse:
			t.Errorf("%s: a response with request id 0", where)
		case f.ReqID != 0 && !asked[f.ReqID]:
			t.Errorf("%s: answers request %d, which the client never sent", where, f.ReqID)
		}
		if !*updateVectors {
			for k, want := range map[string]string{"type": typ, "reqid": strconv.FormatUint(f.ReqID, 10), "fields": fieldNames[f.Type], "body": body} {
				if r.fields[k] != want {
					t.Errorf("%s: %s %q, the frame decodes to %q (go test ./wire -run TestTranscript -update)", where, k, r.fields[k], want)
				}
			}
		}
		fmt.Fprintf(&out, "frame %s\ndir %s\ntype %s\nreqid %d\nfields %s\nbody %s\nhex %s\n", r.name, dir, typ, f.ReqID, fieldNames[f.Type], body, spacedHex(raw))
		if i < len(records)-1 {
			out.WriteString("\n")
		}
	}
	if *updateVectors {
		if err := os.WriteFile(transcriptFile, []byte(out.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
