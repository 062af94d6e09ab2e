package wire

import (
	"bytes"
	"errors"
	"math"
	"math/rand/v2"
	"reflect"
	"runtime"
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

// allTypes lists every defined type.
var allTypes = []Type{
	TypeHello, TypeAcquire, TypeRenew, TypeRelease, TypeState, TypeWatch,
	TypeUnwatch, TypeCancelWait, TypeHeartbeat, TypeGetView, TypeSubscribeView,
	TypeResponse, TypeView, TypeGranted, TypeLost, TypeWatchEvent, TypeViewChanged,
	TypeList, TypeMultiAcquire,
	TypeScramClientFirst, TypeScramClientFinal, TypeScramServerFirst, TypeScramServerFinal,
}

// randUint returns a random value up to max, biased to the boundaries of
// msgpack's integer encodings.
func randUint(r *rand.Rand, max uint64) uint64 {
	edges := []uint64{0, 1, 127, 128, 255, 256, 65535, 65536, math.MaxUint32, math.MaxUint32 + 1, math.MaxUint64}
	if r.IntN(2) == 0 {
		e := edges[r.IntN(len(edges))]
		if e <= max {
			return e
		}
		return max
	}
	v := r.Uint64() >> r.IntN(64)
	if max != math.MaxUint64 {
		v %= max + 1
	}
	return v
}

func randString(r *rand.Rand) string {
	lens := []int{0, 1, 5, 31, 32, 255, 256, 600}
	n := lens[r.IntN(len(lens))]
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.UintN(256))
	}
	return string(b)
}

// fill sets every field of the value v points to at random.
func fill(r *rand.Rand, v reflect.Value) {
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			v.Set(reflect.New(v.Type().Elem()))
		}
		fill(r, v.Elem())
	case reflect.Struct:
		for i := 0; i < v.NumField(); i++ {
			fill(r, v.Field(i))
		}
	case reflect.String:
		v.SetString(randString(r))
	case reflect.Bool:
		v.SetBool(r.IntN(2) == 1)
	case reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(randUint(r, uint64(1)<<(v.Type().Bits()-1)<<1-1))
	case reflect.Array:
		for i := 0; i < v.Len(); i++ {
			fill(r, v.Index(i))
		}
		if v.Type() == reflect.TypeFor[[16]byte]() && v.Index(0).Uint() == 0 {
			v.Index(0).SetUint(1) // a trace id is never zero when set (TraceContext.IsZero)
		}
	case reflect.Slice:
		n := r.IntN(6)
		if n == 0 {
			v.Set(reflect.Zero(v.Type()))
			return
		}
		s := reflect.MakeSlice(v.Type(), n, n)
		for i := 0; i < n; i++ {
			fill(r, s.Index(i))
		}
		v.Set(s)
	default:
		panic("fill: unhandled kind " + v.Kind().String())
	}
}

func randMessage(r *rand.Rand, typ Type) Message {
	m := NewMessage(typ)
	fill(r, reflect.ValueOf(m))
	return m
}

func TestRoundTripRandom(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	c := NewCodec()
	var buf []byte
	for _, typ := range allTypes {
		for i := 0; i < 300; i++ {
			m := randMessage(r, typ)
			var err error
			buf, err = c.AppendFrame(buf[:0], typ, uint64(i+1), m)
			if err != nil {
				t.Fatalf("%s: AppendFrame: %v", typ, err)
			}
			f, n, err := ParseFrame(buf, 0)
			if err != nil || n != len(buf) {
				t.Fatalf("%s: ParseFrame: n=%d of %d, %v", typ, n, len(buf), err)
			}
			if f.Type != typ || f.ReqID != uint64(i+1) {
				t.Fatalf("%s: header %v/%d", typ, f.Type, f.ReqID)
			}
			got, err := c.Decode(f.Type, f.Body)
			if err != nil {
				t.Fatalf("%s: Decode: %v\n%#v", typ, err, m)
			}
			if !reflect.DeepEqual(got, m) {
				t.Fatalf("%s: round trip\n got %#v\nwant %#v", typ, got, m)
			}
			// Through the msgpack package's own entry points too.
			b, err := msgpack.Marshal(m)
			if err != nil {
				t.Fatalf("%s: msgpack.Marshal: %v", typ, err)
			}
			if !bytes.Equal(b, f.Body) {
				t.Fatalf("%s: msgpack.Marshal differs from AppendFrame body", typ)
			}
			got2 := NewMessage(typ)
			if err := msgpack.Unmarshal(b, got2); err != nil || !reflect.DeepEqual(got2, m) {
				t.Fatalf("%s: msgpack.Unmarshal: %v", typ, err)
			}
		}
	}
}

func TestZeroMessagesRoundTrip(t *testing.T) {
	for _, typ := range allTypes {
		m := NewMessage(typ)
		frame, err := AppendFrame(nil, typ, 7, m)
		if err != nil {
			t.Fatalf("%s: %v", typ, err)
		}
		f, _, err := ParseFrame(frame, 0)
		if err != nil {
			t.Fatal(err)
		}
		got, err := Decode(typ, f.Body)
		if err != nil || !reflect.DeepEqual(got, m) {
			t.Fatalf("%s: %v %#v", typ, err, got)
		}
	}
}

func TestResponseTrimsTrailingZeros(t *testing.T) {
	cases := []struct {
		r    Response
		size int // body bytes
	}{
		{Response{}, 2},                                        // [0]
		{Response{Token: 1 << 40}, 1 + 1 + 9},                  // [0, u64]
		{Response{Status: StatusLockWait, QueueLen: 3}, 1 + 6}, // six small fields
		{Response{Status: StatusMasterRedirect, Redirect: "10.0.0.1:7000"}, 1 + 9 + 1 + 13},
	}
	for _, tc := range cases {
		b, err := AppendBody(nil, &tc.r)
		if err != nil {
			t.Fatal(err)
		}
		if len(b) != tc.size {
			t.Errorf("%+v: %d bytes, want %d (% x)", tc.r, len(b), tc.size, b)
		}
		var got Response
		if err := DecodeInto(b, &got); err != nil || !reflect.DeepEqual(got, tc.r) {
			t.Errorf("%+v: got %+v, %v", tc.r, got, err)
		}
	}
	// Every prefix length round-trips.
	full := Response{StatusError, 1, Owner{2, 3}, 4, 5, KindWrite, 7, 8, "r", 9, "m", "v",
		[]LockInfo{{Key: "a", Holder: Owner{1, 2}, Token: 3, Kind: KindRead, Readers: 2, TTLLeftMs: 4, QueueLen: 5, Value: "x"}, {Key: "b", Permits: 2, Limit: 3}}, 10, 11, []uint64{12, 13}, 14, true}
	for i := 0; i < reflect.TypeOf(full).NumField(); i++ {
		r := full
		v := reflect.ValueOf(&r).Elem()
		for j := i + 1; j < v.NumField(); j++ {
			v.Field(j).Set(reflect.Zero(v.Field(j).Type()))
		}
		b, _ := AppendBody(nil, &r)
		var got Response
		if err := DecodeInto(b, &got); err != nil || !reflect.DeepEqual(got, r) {
			t.Fatalf("prefix %d: got %+v want %+v: %v", i, got, r, err)
		}
	}
}

// rawArray encodes a msgpack array of the given values with the msgpack
// package's generic encoder.
func rawArray(t testing.TB, vals ...any) []byte {
	t.Helper()
	b, err := msgpack.Marshal(vals)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestDecodeToleratesExtraFields(t *testing.T) {
	want := Acquire{Key: "k", Owner: Owner{1, 2}, Kind: KindRead, Flags: FlagReentrant,
		Weight: 3, TTLMs: 4, MaxWaitMs: 5, WaitID: 6, Redirects: 7}
	extras := []any{
		"a string", []byte{1, 2, 3}, -5, 3.5, float32(1.5), true, nil,
		[]any{1, []any{2, "x", map[string]any{"k": []any{1}}}},
		map[string]any{"a": 1, "b": "c"},
		msgpack.RawMessage{0xd4, 0x01, 0x02},                   // fixext1
		msgpack.RawMessage{0xc7, 0x03, 0x05, 0x01, 0x02, 0x03}, // ext8
		uint64(math.MaxUint64), int64(math.MinInt64),
	}
	vals := append([]any{"k", 1, 2, 1, 1, 3, 4, 5, 6, 7, "", 0, 0, 0, 0, nil, 0}, extras...) // nil: no Trace; 0: no MaxHoldMs
	body := rawArray(t, vals...)
	var got Acquire
	if err := DecodeInto(body, &got); err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Fatalf("got %+v want %+v", got, want)
	}
}

// TestRedirectsIsOptional checks that Redirects and Hello.Via cost nothing
// when zero (the body is what a peer without them sends) and round-trip
// when set, on every routed request.
func TestRedirectsIsOptional(t *testing.T) {
	routed := []Routed{&Acquire{}, &Renew{}, &Release{}, &State{}, &Watch{}, &Unwatch{}, &CancelWait{}}
	for _, m := range routed {
		zero, err := AppendBody(nil, m)
		if err != nil {
			t.Fatal(err)
		}
		m.SetRedirectCount(ForwardNow)
		set, err := AppendBody(nil, m)
		if err != nil {
			t.Fatal(err)
		}
		if len(set) != len(zero)+2 { // 0xcc 0xff
			t.Fatalf("%T: %d bytes with Redirects, %d without", m, len(set), len(zero))
		}
		got := reflect.New(reflect.TypeOf(m).Elem()).Interface().(Routed)
		if err := DecodeInto(set, got); err != nil || got.RedirectCount() != ForwardNow || got.RoutingKey() != m.RoutingKey() {
			t.Fatalf("%T: %v, redirects %d", m, err, got.RedirectCount())
		}
		if err := DecodeInto(zero, got); err != nil || got.RedirectCount() != 0 {
			t.Fatalf("%T without the field: %v, redirects %d", m, err, got.RedirectCount())
		}
	}
	h := &Hello{Namespace: "n", ClientID: 1}
	plain, _ := AppendBody(nil, h)
	// A client key is written after Via, whether Via is set or not.
	keyed := &Hello{Namespace: "n", ClientID: ClientIDOf(testKey), ClientKey: testKey}
	for _, via := range []uint32{0, 3} {
		keyed.Via = via
		b, _ := AppendBody(nil, keyed)
		var got Hello
		if err := DecodeInto(b, &got); err != nil || got != *keyed {
			t.Fatalf("Hello with a key and Via %d: %+v %v", via, got, err)
		}
	}
	h.Via = 3
	via, _ := AppendBody(nil, h)
	var got Hello
	if err := DecodeInto(via, &got); err != nil || got != *h || len(via) != len(plain)+1 {
		t.Fatalf("Hello.Via: %+v %v (%d vs %d bytes)", got, err, len(via), len(plain))
	}
}

// testKey is a valid client key.
const testKey = "0123456789abcdef"

// TestClientIDOf checks that a client id is a function of its key alone.
func TestClientIDOf(t *testing.T) {
	a, b := ClientIDOf(testKey), ClientIDOf(testKey+"x")
	if a == 0 || b == 0 || a == b || ClientIDOf(testKey) != a {
		t.Fatalf("ClientIDOf: %x %x", a, b)
	}
}

// TestGrantedTTLIsCompatible checks Granted's TTLMs both ways: a push from a
// server that predates the field (six fields) decodes with TTLMs 0, and a
// push without a TTL is encoded as the six fields an older client expects,
// while one with a TTL appends it.
func TestGrantedTTLIsCompatible(t *testing.T) {
	old := &Granted{WaitID: 3, Key: "k", Status: StatusSuccess, Token: MakeToken(1, 9), Owner: Owner{1, 2}}
	plain, err := AppendBody(nil, old)
	if err != nil {
		t.Fatal(err)
	}
	if plain[0] != 0x96 {
		t.Fatalf("Granted without a TTL: array header %#x, want 6 fields (0x96)", plain[0])
	}
	withTTL := *old
	withTTL.TTLMs = 10000
	ext, err := AppendBody(nil, &withTTL)
	if err != nil {
		t.Fatal(err)
	}
	if ext[0] != 0x97 || len(ext) != len(plain)+3 { // 0xcd 0x27 0x10
		t.Fatalf("Granted with a TTL: % x", ext)
	}
	var got Granted
	if err := DecodeInto(plain, &got); err != nil || got != *old {
		t.Fatalf("six-field Granted: %+v %v", got, err)
	}
	if err := DecodeInto(ext, &got); err != nil || got != withTTL {
		t.Fatalf("Granted with TTLMs: %+v %v", got, err)
	}
	// A later version's body, one more field after TTLMs, still decodes
	// (older decoders skip TTLMs the same way; see
	// TestDecodeToleratesExtraFields).
	future := append([]byte{0x98}, ext[1:]...)
	future = append(future, 0xc3)
	if err := DecodeInto(future, &got); err != nil || got != withTTL {
		t.Fatalf("Granted with a field after TTLMs: %+v %v", got, err)
	}
}

func TestDecodeToleratesMissingFields(t *testing.T) {
	var got Acquire
	if err := DecodeInto(rawArray(t, "k", 9), &got); err != nil {
		t.Fatal(err)
	}
	if want := (Acquire{Key: "k", Owner: Owner{Client: 9}}); got != want {
		t.Fatalf("got %+v", got)
	}
	// DecodeInto overwrites every field of a reused value.
	got = Acquire{Key: "old", Weight: 9, WaitID: 7}
	if err := DecodeInto([]byte{0x90}, &got); err != nil || got != (Acquire{}) {
		t.Fatalf("got %+v, %v", got, err)
	}
}

func TestDecodeErrors(t *testing.T) {
	cases := []struct {
		name string
		typ  Type
		body []byte
	}{
		{"empty body", TypeAcquire, nil},
		{"string body", TypeAcquire, []byte{0xa1, 'k'}},
		{"map body", TypeResponse, []byte{0x80}},
		{"nil body", TypeResponse, []byte{0xc0}},
		{"trailing bytes", TypeState, append(rawArray(t, "k"), 0x01)},
		{"truncated", TypeState, rawArray(t, "key")[:3]},
		{"string for uint", TypeAcquire, rawArray(t, "k", "x")},
		{"uint8 overflow", TypeAcquire, rawArray(t, "k", 1, 1, 256)},
		{"uint32 overflow", TypeAcquire, rawArray(t, "k", 1, 1, 0, 0, 1, uint64(1)<<32)},
		{"negative into u8", TypeResponse, rawArray(t, -1)},
		{"uint for string", TypeState, rawArray(t, 5)},
		{"bad bool", TypeView, rawArray(t, 1, nil, []any{[]any{1, "a", 7}})},
		{"too many groups", TypeView, append([]byte{0x93, 0x01, 0xdd, 0, 0, 0x04, 0x01}, make([]byte, 1025)...)},
		{"truncated extra", TypeState, []byte{0x92, 0xa1, 'k', 0xdb, 0, 0, 1, 0}},
		{"huge extra array", TypeState, []byte{0x94, 0xa1, 'k', 0x00, 0x00, 0xdd, 0xff, 0xff, 0xff, 0xff}},
		{"invalid code in extra", TypeState, []byte{0x94, 0xa1, 'k', 0x00, 0x00, 0xc1}},
		{"group not array", TypeView, rawArray(t, 1, []any{5})},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m, err := Decode(tc.typ, tc.body)
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("got %v, %v; want ErrMalformed", m, err)
			}
		})
	}
	if _, err := Decode(Type(0x3f), rawArray(t)); !errors.Is(err, ErrUnknownType) {
		t.Fatalf("unknown type: %v", err)
	}
}

// TestDeepNestingIsCheap checks that skipping deeply nested extra fields
// neither recurses nor takes long.
func TestDeepNestingIsCheap(t *testing.T) {
	const depth = 1 << 19
	body := []byte{0x94, 0xa1, 'k', 0x00, 0x00} // Key, Redirects, Token, then the nest
	body = append(body, bytes.Repeat([]byte{0x91}, depth)...)
	body = append(body, 0x01)
	var s State
	if err := DecodeInto(body, &s); err != nil || s.Key != "k" {
		t.Fatalf("%+v %v", s, err)
	}
	// The same nesting, cut short, is an error.
	if err := DecodeInto(body[:len(body)-1], &s); !errors.Is(err, ErrMalformed) {
		t.Fatalf("truncated: %v", err)
	}
}

func TestViewDecodeNilListsAndHelpers(t *testing.T) {
	var v View
	if err := DecodeInto(rawArray(t, 3, nil, nil), &v); err != nil {
		t.Fatal(err)
	}
	if v.Version != 3 || v.Groups != nil || v.Nodes != nil {
		t.Fatalf("%+v", v)
	}
	v = View{Groups: []GroupView{{Master: 1, Addr: "a:1"}, {}}}
	if v.GroupCount() != 2 {
		t.Fatal("GroupCount")
	}
	if a, ok := v.MasterAddr(0); !ok || a != "a:1" {
		t.Fatal("MasterAddr(0)")
	}
	for _, g := range []int{-1, 1, 2} {
		if _, ok := v.MasterAddr(g); ok {
			t.Fatalf("MasterAddr(%d) ok", g)
		}
	}
}

func TestDecodeIntoFreshStrings(t *testing.T) {
	body, _ := AppendBody(nil, &State{Key: "abcd"})
	var s State
	if err := DecodeInto(body, &s); err != nil {
		t.Fatal(err)
	}
	copy(body, bytes.Repeat([]byte{'z'}, len(body)))
	if s.Key != "abcd" {
		t.Fatalf("decoded string aliases body: %q", s.Key)
	}
}

func TestValidate(t *testing.T) {
	own := Owner{Client: 1, ID: 2}
	ok := Acquire{Key: "k", Owner: own, Weight: 1}
	cases := []struct {
		name string
		r    Request
		want error
	}{
		{"acquire ok", &ok, nil},
		{"acquire blocking ok", &Acquire{Key: "k", Owner: own, Weight: 10, MaxWaitMs: WaitForever, WaitID: 1, Kind: KindWrite}, nil},
		{"acquire empty key", &Acquire{Owner: own, Weight: 1}, ErrInvalidKey},
		{"acquire long key", &Acquire{Key: strings.Repeat("k", MaxKeyLen+1), Owner: own, Weight: 1}, ErrInvalidKey},
		{"acquire max key", &Acquire{Key: strings.Repeat("k", MaxKeyLen), Owner: own, Weight: 1}, nil},
		{"acquire weight 0", &Acquire{Key: "k", Owner: own}, ErrInvalidWeight},
		{"acquire weight 11", &Acquire{Key: "k", Owner: own, Weight: 11}, ErrInvalidWeight},
		{"acquire kind", &Acquire{Key: "k", Owner: own, Weight: 1, Kind: 4}, ErrInvalidKind},
		{"semaphore no permits", &Acquire{Key: "k", Owner: own, Weight: 1, Kind: KindSemaphore, Limit: 3}, ErrInvalidField},
		{"semaphore permits over limit", &Acquire{Key: "k", Owner: own, Weight: 1, Kind: KindSemaphore, Permits: 4, Limit: 3}, ErrInvalidField},
		{"permits on a lock", &Acquire{Key: "k", Owner: own, Weight: 1, Permits: 1, Limit: 1}, ErrInvalidField},
		{"set permits blocking", &Acquire{Key: "k", Owner: own, Weight: 1, Kind: KindSemaphore, Flags: FlagSetPermits, Limit: 2, MaxWaitMs: 1, WaitID: 1}, ErrInvalidField},
		{"set permits zero", &Acquire{Key: "k", Owner: own, Weight: 1, Kind: KindSemaphore, Flags: FlagSetPermits}, ErrInvalidField},
		{"acquire no client", &Acquire{Key: "k", Owner: Owner{ID: 1}, Weight: 1}, ErrInvalidField},
		{"acquire blocking no wait id", &Acquire{Key: "k", Owner: own, Weight: 1, MaxWaitMs: 1}, ErrInvalidField},
		{"acquire downgrade ok", &Acquire{Key: "k", Owner: own, Weight: 1, Kind: KindRead, Flags: FlagDowngrade}, nil},
		{"semaphore ok", &Acquire{Key: "k", Owner: own, Weight: 1, Kind: KindSemaphore, Permits: 2, Limit: 2}, nil},
		{"set permits ok", &Acquire{Key: "k", Owner: own, Weight: 1, Kind: KindSemaphore, Flags: FlagSetPermits, Limit: 7}, nil},
		{"lock-delay over the limit", &Acquire{Key: "k", Owner: own, Weight: 1, LockDelayMs: MaxLockDelayMs + 1}, ErrInvalidField},
		{"lock-delay ok", &Acquire{Key: "k", Owner: own, Weight: 1, LockDelayMs: MaxLockDelayMs}, nil},
		{"max hold over the limit", &Acquire{Key: "k", Owner: own, Weight: 1, MaxHoldMs: MaxHoldLimitMs + 1}, ErrInvalidField},
		{"max hold below the ttl", &Acquire{Key: "k", Owner: own, Weight: 1, TTLMs: 30000, MaxHoldMs: 29999}, ErrInvalidField},
		{"max hold ok", &Acquire{Key: "k", Owner: own, Weight: 1, TTLMs: 30000, MaxHoldMs: MaxHoldLimitMs}, nil},
		{"max hold with the default ttl", &Acquire{Key: "k", Owner: own, Weight: 1, MaxHoldMs: 1}, nil},
		{"pass-on lock-delay over the limit", &Release{Key: "k", Owner: own, PassOnID: own.ID + 1, PassOnLockDelayMs: MaxLockDelayMs + 1}, ErrInvalidField},
		{"acquire downgrade to write", &Acquire{Key: "k", Owner: own, Weight: 1, Kind: KindWrite, Flags: FlagDowngrade}, ErrInvalidField},
		{"acquire downgrade blocking", &Acquire{Key: "k", Owner: own, Weight: 1, Kind: KindRead, Flags: FlagDowngrade, MaxWaitMs: 1, WaitID: 1}, ErrInvalidField},
		{"hello ok", &Hello{Namespace: "orders-v1.eu_west", ClientID: ClientIDOf(testKey), ClientKey: testKey}, nil},
		{"hello no key", &Hello{Namespace: "n", ClientID: 1}, ErrInvalidField},
		{"hello short key", &Hello{Namespace: "n", ClientID: ClientIDOf("short"), ClientKey: "short"}, ErrInvalidField},
		{"hello long key", &Hello{Namespace: "n", ClientID: ClientIDOf(strings.Repeat("k", MaxClientKeyLen+1)), ClientKey: strings.Repeat("k", MaxClientKeyLen+1)}, ErrInvalidField},
		{"hello max key", &Hello{Namespace: "n", ClientID: ClientIDOf(strings.Repeat("k", MaxClientKeyLen)), ClientKey: strings.Repeat("k", MaxClientKeyLen)}, nil},
		{"hello another's id", &Hello{Namespace: "n", ClientID: ClientIDOf(testKey) + 1, ClientKey: testKey}, ErrInvalidField},
		{"hello ns", &Hello{Namespace: "a b", ClientID: 1}, ErrInvalidNamespace},
		{"hello ns nul", &Hello{Namespace: "a\x00", ClientID: 1}, ErrInvalidNamespace},
		{"hello ns empty", &Hello{ClientID: 1}, ErrInvalidNamespace},
		{"hello ns long", &Hello{Namespace: strings.Repeat("n", MaxNamespaceLen+1), ClientID: 1}, ErrInvalidNamespace},
		{"hello client", &Hello{Namespace: "n"}, ErrInvalidField},
		{"hello secret", &Hello{Namespace: "n", ClientID: 1, Secret: strings.Repeat("s", MaxSecretLen+1)}, ErrInvalidField},
		{"renew ok", &Renew{Key: "k", Owner: own}, nil},
		{"renew key", &Renew{Owner: own}, ErrInvalidKey},
		{"release owner", &Release{Key: "k"}, ErrInvalidField},
		{"release pass-on ok", &Release{Key: "k", Owner: own, PassOnID: own.ID + 1, PassOnValue: "v"}, nil},
		{"release pass-on to itself", &Release{Key: "k", Owner: own, PassOnID: own.ID}, ErrInvalidField},
		{"release keep permits ok", &Release{Key: "k", Owner: own, KeepPermits: 2}, nil},
		{"release keep permits with a pass-on", &Release{Key: "k", Owner: own, PassOnID: own.ID + 1, KeepPermits: 2}, ErrInvalidField},
		{"release pass-on value", &Release{Key: "k", Owner: own, PassOnID: own.ID + 1, PassOnValue: strings.Repeat("v", MaxValueLen+1)}, ErrValueTooLarge},
		{"state key", &State{}, ErrInvalidKey},
		{"watch id", &Watch{Key: "k"}, ErrInvalidField},
		{"watch ok", &Watch{Key: "k", WatchID: 1}, nil},
		{"unwatch id", &Unwatch{Key: "k"}, ErrInvalidField},
		{"unwatch key", &Unwatch{WatchID: 1}, ErrInvalidKey},
		{"watch prefix whole namespace", &Watch{WatchID: 1, Flags: FlagPrefix}, nil},
		{"watch prefix long", &Watch{Key: strings.Repeat("p", MaxKeyLen+1), WatchID: 1, Flags: FlagPrefix}, ErrInvalidKey},
		{"watch prefix max wait", &Watch{Key: "p", WatchID: 1, Flags: FlagPrefix, MaxWaitMs: 5}, ErrInvalidField},
		{"unwatch prefix whole namespace", &Unwatch{WatchID: 1, Flags: FlagPrefix}, nil},
		{"cancel id", &CancelWait{Key: "k", Owner: own}, ErrInvalidField},
		{"cancel ok", &CancelWait{Key: "k", Owner: own, WaitID: 3}, nil},
		{"heartbeat", &Heartbeat{}, nil},
		{"getview", &GetView{}, nil},
		{"subscribe", &SubscribeView{}, nil},
	}
	for _, tc := range cases {
		err := tc.r.Validate()
		if tc.want == nil {
			if err != nil {
				t.Errorf("%s: %v", tc.name, err)
			}
			continue
		}
		if !errors.Is(err, tc.want) || !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: got %v, want %v", tc.name, err, tc.want)
		}
	}
}

// TestLyingLengthsAreCheap checks that a few bytes declaring a huge string,
// list or extra field are refused without allocating toward the declared
// size (found by FuzzDecodeGranted: a str32 header made the msgpack decoder
// allocate megabytes).
func TestLyingLengthsAreCheap(t *testing.T) {
	cases := []struct {
		typ  Type
		body []byte
	}{
		{TypeGranted, []byte{0x96, 0x30, 0xdb, 0x30, 0x30, 0x30, 0x30, 0x30}},
		{TypeState, []byte{0x91, 0xc6, 0x7f, 0xff, 0xff, 0xff}},               // bin32
		{TypeState, []byte{0x91, 0xda, 0xff, 0xff}},                           // str16
		{TypeState, []byte{0x91, 0xdb, 0xff}},                                 // cut header
		{TypeState, []byte{0x92, 0xa1, 'k', 0xc9, 0x7f, 0xff, 0xff, 0xff, 1}}, // ext32 extra
		{TypeView, []byte{0x93, 0x01, 0xdc, 0x03, 0xff}},                      // 1023 groups
		{TypeView, []byte{0x93, 0x01, 0x90, 0xdc, 0x03, 0xff, 0x93}},          // 1023 nodes
	}
	for _, tc := range cases {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		for i := 0; i < 20; i++ {
			if _, err := Decode(tc.typ, tc.body); !errors.Is(err, ErrMalformed) {
				t.Fatalf("% x: %v", tc.body, err)
			}
		}
		runtime.ReadMemStats(&after)
		if got := after.TotalAlloc - before.TotalAlloc; got > 64<<10 {
			t.Errorf("% x: 20 decodes allocated %d bytes", tc.body, got)
		}
	}
}

func TestHolderValueFields(t *testing.T) {
	// Without a value each message encodes as before (older peers and
	// stored corpora see the same bytes); with one it round-trips.
	acq := Acquire{Key: "k", Owner: Owner{1, 2}, WaitID: 3, MaxWaitMs: 5}
	old, _ := AppendBody(nil, &acq)
	if old[0] != 0x99 {
		t.Fatalf("Acquire without value: header %x, want nine fields", old[0])
	}
	acq.Value = "host=a pid=7"
	b, _ := AppendBody(nil, &acq)
	var got Acquire
	if err := DecodeInto(b, &got); err != nil || got != acq {
		t.Fatalf("Acquire with value: %+v %v", got, err)
	}
	ren := Renew{Key: "k", Owner: Owner{1, 2}, Token: 4, SetValue: true}
	b, _ = AppendBody(nil, &ren)
	var gr Renew
	if err := DecodeInto(b, &gr); err != nil || gr != ren {
		t.Fatalf("Renew clearing the value: %+v %v", gr, err)
	}
	ren.SetValue = false
	b, _ = AppendBody(nil, &ren)
	if err := DecodeInto(b, &gr); err != nil || gr != ren || b[0] != 0x95 {
		t.Fatalf("Renew keeping the value: %+v %v % x", gr, err, b)
	}
	ev := WatchEvent{WatchID: 1, Key: "k", Event: EventAcquired, Token: 5, Holder: Owner{1, 2}, Value: "v"}
	b, _ = AppendBody(nil, &ev)
	var ge WatchEvent
	if err := DecodeInto(b, &ge); err != nil || ge != ev {
		t.Fatalf("WatchEvent with value: %+v %v", ge, err)
	}
	big := Acquire{Key: "k", Owner: Owner{1, 2}, Weight: 1, Value: strings.Repeat("x", MaxValueLen+1)}
	if err := big.Validate(); !errors.Is(err, ErrValueTooLarge) || !errors.Is(err, ErrInvalid) {
		t.Fatalf("oversized value: %v", err)
	}
	big.Value = big.Value[1:]
	if err := big.Validate(); err != nil {
		t.Fatalf("value of MaxValueLen: %v", err)
	}
	bigRen := Renew{Key: "k", Owner: Owner{1, 2}, SetValue: true, Value: strings.Repeat("x", MaxValueLen+1)}
	if err := bigRen.Validate(); !errors.Is(err, ErrValueTooLarge) {
		t.Fatalf("oversized renew value: %v", err)
	}
}

// TestEventMoved checks the watch-moved event's number, which is on the
// wire and never changes, its name, and that a WatchEvent carrying it
// decodes to itself.
func TestEventMoved(t *testing.T) {
	if EventMoved != 6 || EventMoved.String() != "moved" {
		t.Fatalf("EventMoved = %d %q, want 6 \"moved\"", EventMoved, EventMoved)
	}
	ev := WatchEvent{WatchID: 7, Key: "k", Event: EventMoved}
	b, err := AppendBody(nil, &ev)
	if err != nil {
		t.Fatal(err)
	}
	var got WatchEvent
	if err := DecodeInto(b, &got); err != nil || got != ev {
		t.Fatalf("WatchEvent moved: %+v %v", got, err)
	}
}
