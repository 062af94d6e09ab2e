package wire

import "testing"

var (
	benchAcquire = Acquire{
		Key: "order:1234567", Owner: Owner{Client: 0x9e3779b97f4a7c15, ID: 42},
		Weight: 1, TTLMs: 30000, MaxWaitMs: 5000, WaitID: 77,
	}
	benchResponse = Response{Status: StatusSuccess, Token: MakeToken(1, 123456)}
	benchOccupied = Response{
		Status: StatusLockOccupied, Token: MakeToken(1, 123456),
		Holder: Owner{Client: 0x9e3779b97f4a7c15, ID: 42}, TTLLeftMs: 12000, QueueLen: 3,
	}
)

// TestHotPathAllocs pins the allocation counts the benchmarks report:
// encoding allocates nothing, decoding only the strings it returns.
func TestHotPathAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts differ under the race detector")
	}
	c := NewCodec()
	buf := make([]byte, 0, 256)
	frame, _ := c.AppendFrame(nil, TypeAcquire, 1, &benchAcquire)
	resp, _ := c.AppendFrame(nil, TypeResponse, 1, &benchOccupied)
	var a Acquire
	var r Response
	cases := []struct {
		name string
		want float64
		fn   func()
	}{
		{"encode Acquire", 0, func() { _, _ = c.AppendFrame(buf[:0], TypeAcquire, 1, &benchAcquire) }},
		{"encode Response", 0, func() { _, _ = c.AppendFrame(buf[:0], TypeResponse, 1, &benchOccupied) }},
		{"parse+decode Acquire", 1, func() {
			f, _, _ := ParseFrame(frame, 0)
			_ = c.DecodeInto(f.Body, &a)
		}},
		{"parse+decode Response", 0, func() {
			f, _, _ := ParseFrame(resp, 0)
			_ = c.DecodeInto(f.Body, &r)
		}},
		{"pooled AppendFrame", 0, func() { _, _ = AppendFrame(buf[:0], TypeResponse, 1, &benchResponse) }},
	}
	for _, tc := range cases {
		if got := testing.AllocsPerRun(200, tc.fn); got != tc.want {
			t.Errorf("%s: %v allocs, want %v", tc.name, got, tc.want)
		}
	}
}

func BenchmarkAcquireEncode(b *testing.B) {
	c := NewCodec()
	buf := make([]byte, 0, 256)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		buf, _ = c.AppendFrame(buf[:0], TypeAcquire, uint64(i), &benchAcquire)
	}
	b.SetBytes(int64(len(buf)))
}

func BenchmarkAcquireDecode(b *testing.B) {
	c := NewCodec()
	frame, _ := c.AppendFrame(nil, TypeAcquire, 1, &benchAcquire)
	var a Acquire
	b.ReportAllocs()
	for b.Loop() {
		f, _, _ := ParseFrame(frame, 0)
		if err := c.DecodeInto(f.Body, &a); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkAcquireRoundTrip(b *testing.B) {
	c := NewCodec()
	buf := make([]byte, 0, 256)
	var a Acquire
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		buf, _ = c.AppendFrame(buf[:0], TypeAcquire, uint64(i), &benchAcquire)
		f, _, _ := ParseFrame(buf, 0)
		if err := c.DecodeInto(f.Body, &a); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkReleaseRoundTrip encodes and decodes the other half of a lock
// pair, into a reused value as the server does.
func BenchmarkReleaseRoundTrip(b *testing.B) {
	c := NewCodec()
	rel := Release{Key: benchAcquire.Key, Owner: benchAcquire.Owner, Token: MakeToken(1, 123456)}
	buf := make([]byte, 0, 256)
	var got Release
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		buf, _ = c.AppendFrame(buf[:0], TypeRelease, uint64(i), &rel)
		f, _, _ := ParseFrame(buf, 0)
		if err := c.DecodeInto(f.Body, &got); err != nil {
			b.Fatal(err)
		}
	}
	b.SetBytes(int64(len(buf)))
}

func benchResponseRoundTrip(b *testing.B, r *Response) {
	c := NewCodec()
	buf := make([]byte, 0, 256)
	var got Response
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		buf, _ = c.AppendFrame(buf[:0], TypeResponse, uint64(i), r)
		f, _, _ := ParseFrame(buf, 0)
		if err := c.DecodeInto(f.Body, &got); err != nil {
			b.Fatal(err)
		}
	}
	b.SetBytes(int64(len(buf)))
}

func BenchmarkResponseRoundTripSuccess(b *testing.B)  { benchResponseRoundTrip(b, &benchResponse) }
func BenchmarkResponseRoundTripOccupied(b *testing.B) { benchResponseRoundTrip(b, &benchOccupied) }

// BenchmarkDecodeNew measures the dispatcher, which allocates the message.
func BenchmarkDecodeNew(b *testing.B) {
	c := NewCodec()
	frame, _ := c.AppendFrame(nil, TypeAcquire, 1, &benchAcquire)
	f, _, _ := ParseFrame(frame, 0)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.Decode(f.Type, f.Body); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkPooledAppendFrame(b *testing.B) {
	buf := make([]byte, 0, 256)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		buf, _ = AppendFrame(buf[:0], TypeResponse, uint64(i), &benchResponse)
	}
}

func BenchmarkKeyHash(b *testing.B) {
	b.ReportAllocs()
	var sink uint64
	for b.Loop() {
		sink += KeyHash("orders", "order:1234567")
	}
	_ = sink
}
