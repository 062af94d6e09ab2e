package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/paxlock/paxlock/client"
	"github.com/paxlock/paxlock/client/wire"
)

// This file holds the holder view: what the test's clients BELIEVE they
// hold, beside what the servers did (history_test.go checks that).
//
// A holder records, on the history's monotonic clock, the instant its
// acquire returned success (the hold's start) and, while it works, the
// instant just BEFORE each look at its belief (Mutex.Held and a
// non-blocking receive from Lost) that answered "still held". A belief,
// once gone, never comes back for the same hold, so the holder believed
// at every instant from its start to its last "held" sample: the hold's
// believed interval. It is a subset of what the holder really believed
// (the acquire returned before the start was read; each "held" answer was
// given after its sample's instant), which is what makes an overlap the
// checker finds a real one:
//
//   - exclusive and read-write keys: holds A and B of distinct owners and
//     conflicting kinds (anything beside a writer or an exclusive holder),
//     A starting no later than B, overlap when A has a "held" sample
//     strictly after B's start: both believed at B's start;
//   - semaphores: at some hold's start, the holds believed then (started
//     before, a "held" sample after) hold more permits than the total.
//
// A force-unlock (the admin endpoint's POST /locks/unlock, as paxlockctl
// unlock --force) excuses nothing: it revokes the holds of the key (their
// holders are told Lost, their renewals are refused), and the master
// removes a hold, and only then grants the key to anyone else, once its
// holder's client acknowledged (it marks the hold lost first) or the
// hold's deadline passed (design invariant I9). So a revoked holder, like
// any other, must have stopped believing before another owner's acquire
// returns, and the overlap checks above count its beliefs as they count
// any. Besides, a force-unlock answered 200 has removed every hold its
// answer lists: a listed hold must not be believed at any sample taken
// after the answer returned ("revoked"). Any other answer (202: revoked,
// still waiting for the holder; 503: mastership moved, the revocation was
// dropped; 500; none at all) makes no claim about when a hold ended: it
// is recorded and quoted in reports, and changes no check.
//
// Besides overlaps the checker reports beliefs past the holder's own
// validity ("stale"): a holder that renews by hand (no AutoRenew) knows
// every acquire and renewal it sent, so its client can count the hold
// valid until at most the return of the last one that succeeded plus the
// TTL it asked for (a shorter TTL shortens it: the server counts the
// renewal's TTL from its arrival, and the client from its send), or
// later only if a renewal whose outcome is unknown asked for more. A
// "held" sample after that is a client bug whether or not anyone took the
// key meanwhile; so is a Held that says held after Lost was seen closed
// ("inconsistent"). Every finding fails the run.

// holdKind is what a believed hold is of.
type holdKind uint8

const (
	holdExclusive holdKind = iota
	holdRead
	holdWrite
	holdSemaphore
)

func (k holdKind) String() string {
	return [...]string{"exclusive", "read", "write", "semaphore"}[k]
}

// excludes reports whether two owners may not both believe they hold one
// key in kinds a and b (semaphores count permits instead).
func excludes(a, b holdKind) bool { return a != holdRead || b != holdRead }

// believedHold is one grant as its holder believed it. Times are on the
// history's clock (ns since its base; 0 means none: every hold starts
// after the base).
type believedHold struct {
	key     string
	kind    holdKind
	permits int // semaphore: permits taken
	owner   wire.Owner
	worker  int
	token   uint64        // the client's Token() right after the acquire
	ttl     time.Duration // asked by the acquire
	auto    bool          // AutoRenew: renewals unseen, no validity bound
	call    int64         // the acquire was called
	start   int64         // read just after the acquire returned success
	// held are the instants before each look at the belief that answered
	// held, in order.
	held    []int64
	falseAt int64 // the first look that answered not held
	renews  []renewal
	pauses  []span
	unlock  int64 // Unlock (or Release) was called
	unlockE string
	// inconsistent is the first instant Held said held after Lost had
	// been seen closed.
	inconsistent int64
}

// renewal is one Renew a holder sent by hand.
type renewal struct {
	call, ret int64
	ttl       time.Duration
	ok        bool
}

// span is a stretch of time, [from, to].
type span struct{ from, to int64 }

// last is the hold's last "held" sample (the end of its believed
// interval); the hold must have one.
func (b *believedHold) last() int64 { return b.held[len(b.held)-1] }

// witness returns the hold's first "held" sample strictly after t.
func (b *believedHold) witness(t int64) (int64, bool) {
	i := sort.Search(len(b.held), func(i int) bool { return b.held[i] > t })
	if i == len(b.held) {
		return 0, false
	}
	return b.held[i], true
}

// validBound returns the latest instant at which the hold's client could
// count it valid: the last acquire or renewal that succeeded returned
// before the client's count began, and the server counts the TTL asked
// from the request's arrival. A renewal whose outcome is unknown may have
// been applied: one asking for more moves the bound later. AutoRenew
// holds renew unseen: they have no bound (false).
func (b *believedHold) validBound() (int64, bool) {
	if b.auto {
		return 0, false
	}
	bound := b.start + int64(b.ttl)
	for _, r := range b.renews {
		if r.ok {
			bound = r.ret + int64(r.ttl)
		} else {
			bound = max(bound, r.ret+int64(r.ttl))
		}
	}
	return bound, true
}

// ms is n milliseconds on the history's clock.
func ms(n int) int64 { return int64(n) * int64(time.Millisecond) }

// at formats an instant of the history's clock.
func at(t int64) string {
	if t >= forever {
		return "never"
	}
	return fmt.Sprintf("%.3fs", time.Duration(t).Seconds())
}

// describe says everything recorded about the hold, on one line.
func (b *believedHold) describe() string {
	var s strings.Builder
	fmt.Fprintf(&s, "worker %d (client %d, owner %d) token %d %s", b.worker, b.owner.Client, b.owner.ID, b.token, b.kind)
	if b.kind == holdSemaphore {
		fmt.Fprintf(&s, " of %d permits", b.permits)
	}
	renew := "renewed by hand"
	if b.auto {
		renew = "AutoRenew"
	}
	fmt.Fprintf(&s, ", TTL %v %s: acquire called %s, returned %s", b.ttl, renew, at(b.call), at(b.start))
	if len(b.held) > 0 {
		fmt.Fprintf(&s, "; believed %s..%s (%d held samples)", at(b.start), at(b.last()), len(b.held))
	} else {
		s.WriteString("; no held sample")
	}
	if b.falseAt != 0 {
		fmt.Fprintf(&s, ", first not-held sample %s", at(b.falseAt))
	}
	for _, r := range b.renews {
		res := "ok"
		if !r.ok {
			res = "failed"
		}
		fmt.Fprintf(&s, "; Renew(%v) %s..%s %s", r.ttl, at(r.call), at(r.ret), res)
	}
	for _, p := range b.pauses {
		fmt.Fprintf(&s, "; paused (no renewal, no sample) %s..%s", at(p.from), at(p.to))
	}
	if bound, ok := b.validBound(); ok {
		fmt.Fprintf(&s, "; validity bound %s", at(bound))
	}
	if b.unlock != 0 {
		fmt.Fprintf(&s, "; Unlock called %s", at(b.unlock))
		if b.unlockE != "" {
			fmt.Fprintf(&s, " (%s)", b.unlockE)
		}
	}
	return s.String()
}

// revocation is one force-unlock request that reached a node.
type revocation struct {
	key       string
	call, ret int64 // ret is forever when no answer came back
	// status is the answer's HTTP status, 0 if none came back. Only 200
	// makes a claim the checks use: every hold its answer lists had been
	// removed, so its holder had stopped believing, before ret.
	status   int
	released []revokedHold
	answer   string
}

// exact reports whether r's answer claims that the holds it lists ended
// before it returned (HTTP 200).
func (r revocation) exact() bool { return r.status == http.StatusOK }

// pending reports whether r was answered 202: revoked, its holder had not
// acknowledged yet; the key is freed later.
func (r revocation) pending() bool { return r.status == http.StatusAccepted }

// revokedHold is a hold a force-unlock's answer lists.
type revokedHold struct {
	owner wire.Owner
	token uint64
}

// means reports whether the listed hold x may be b: a Semaphore does not
// say its owner (see hvWorkload.step), so any of its client's holds with
// the token may be the one listed.
func (x revokedHold) means(b *believedHold) bool {
	same := x.owner == b.owner || b.kind == holdSemaphore && x.owner.Client == b.owner.Client
	return same && x.token == b.token
}

func (r revocation) String() string {
	var rel []string
	for _, x := range r.released {
		rel = append(rel, fmt.Sprintf("client %d owner %d token %d", x.owner.Client, x.owner.ID, x.token))
	}
	claim := "no claim about when its holds ended"
	if r.exact() {
		claim = "each listed hold ended before the answer"
	}
	return fmt.Sprintf("force-unlock of %q called %s, answered %s (%s), listing [%s]: %s", r.key, at(r.call), at(r.ret), r.answer, strings.Join(rel, ", "), claim)
}

// holderView collects the believed holds of one run and its fault log.
type holderView struct {
	base time.Time // the history's: one clock for both

	mu      sync.Mutex
	holds   []*believedHold
	revokes []revocation
	totals  map[string]int // semaphore key -> its permit total
	notes   []note         // the fault schedule, for reports
}

// note is one line of the fault log.
type note struct {
	at  int64
	msg string
}

func newHolderView(base time.Time) *holderView {
	return &holderView{base: base, totals: map[string]int{}}
}

func (hv *holderView) now() int64 { return int64(time.Since(hv.base)) }

// note adds a line to the fault log the reports quote.
func (hv *holderView) note(format string, args ...any) {
	n := note{at: hv.now(), msg: fmt.Sprintf(format, args...)}
	hv.mu.Lock()
	hv.notes = append(hv.notes, n)
	hv.mu.Unlock()
}

// begin records a hold whose acquire returned; the caller (its one
// worker) fills in the rest as it goes. The checks read it only after the
// workers are done.
func (hv *holderView) begin(b believedHold) *believedHold {
	p := &b
	hv.mu.Lock()
	hv.holds = append(hv.holds, p)
	hv.mu.Unlock()
	return p
}

func (hv *holderView) revoked(r revocation) {
	hv.mu.Lock()
	hv.revokes = append(hv.revokes, r)
	hv.mu.Unlock()
}

// setTotal records a semaphore's permit total.
func (hv *holderView) setTotal(key string, n int) {
	hv.mu.Lock()
	hv.totals[key] = n
	hv.mu.Unlock()
}

// belief answers whether a holder still believes it holds its key.
type belief func() bool

// sample asks believe and records the answer at the instant before the
// call; it reports the answer.
func (hv *holderView) sample(b *believedHold, believe belief) bool {
	t := hv.now()
	if believe() {
		b.held = append(b.held, t)
		return true
	}
	if b.falseAt == 0 {
		b.falseAt = t
	}
	return false
}

// clientBelief is what the client says: Lost not closed (a non-blocking
// look, first) and held() true. A held() that still says held once Lost
// was seen closed is recorded in b as an inconsistency.
func (hv *holderView) clientBelief(b *believedHold, held func() bool, lost <-chan struct{}) belief {
	return func() bool {
		gone := false
		select {
		case <-lost:
			gone = true
		default:
		}
		h := held()
		if gone && h && b.inconsistent == 0 {
			b.inconsistent = hv.now()
		}
		return h && !gone
	}
}

// hvFinding is one thing the checker found.
type hvFinding struct {
	kind string // overlap, permits, stale, revoked, inconsistent
	key  string
	at   int64 // the instant it is about (the fault log is quoted to here)
	text string
}

// check runs every holder-view check. Call it once the workers are done.
func (hv *holderView) check() []hvFinding {
	hv.mu.Lock()
	defer hv.mu.Unlock()
	var out []hvFinding
	byKey := map[string][]*believedHold{}
	for _, b := range hv.holds {
		if b.inconsistent != 0 {
			out = append(out, hvFinding{kind: "inconsistent", key: b.key, at: b.inconsistent, text: fmt.Sprintf(
				"key %q: Held() said held at %s after Lost() had been seen closed: %s", b.key, at(b.inconsistent), b.describe())})
		}
		if len(b.held) == 0 {
			continue
		}
		byKey[b.key] = append(byKey[b.key], b)
		if bound, ok := b.validBound(); ok {
			if w, ok := b.witness(bound); ok {
				out = append(out, hvFinding{kind: "stale", key: b.key, at: w, text: fmt.Sprintf(
					"key %q: stale belief: held at %s, %v past the latest validity its client could count (%s): %s",
					b.key, at(w), time.Duration(w-bound), at(bound), b.describe())})
			}
		}
	}
	for _, r := range hv.revokes {
		if r.exact() {
			out = append(out, hv.revokedFindings(r)...)
		}
	}
	keys := make([]string, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, key := range keys {
		hs := byKey[key]
		sort.SliceStable(hs, func(i, j int) bool { return hs[i].start < hs[j].start })
		total, sem := hv.totals[key]
		var active []*believedHold // started before, believed after the current start
		for _, b := range hs {
			active = slices.DeleteFunc(active, func(a *believedHold) bool { return a.last() <= b.start })
			var with []*believedHold // other owners' holds believed at b.start
			for _, a := range active {
				if a.owner != b.owner {
					with = append(with, a)
				}
			}
			if sem {
				if f, ok := hv.permitsFinding(key, total, b, with); ok {
					out = append(out, f)
				}
			} else {
				for _, a := range with {
					if excludes(a.kind, b.kind) {
						out = append(out, hv.overlapFinding(key, a, b))
					}
				}
			}
			active = append(active, b)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].at < out[j].at })
	return out
}

// revokedFindings reports the holds that r, answered 200, lists and that
// were believed at a sample taken after its answer returned. A listed
// hold is one whose acquire was called before the answer; when the
// listing may mean several holds (a semaphore's, see revokedHold.means),
// it is a finding only if each of them was believed after the answer.
func (hv *holderView) revokedFindings(r revocation) []hvFinding {
	var out []hvFinding
	for _, x := range r.released {
		var cands []*believedHold
		for _, b := range hv.holds {
			if b.key == r.key && b.call < r.ret && x.means(b) {
				cands = append(cands, b)
			}
		}
		var first int64 // the first of the candidates' samples after the answer
		for _, b := range cands {
			w, ok := b.witness(r.ret)
			if !ok {
				first = 0
				break
			}
			if first == 0 || w < first {
				first = w
			}
		}
		if first == 0 {
			continue
		}
		var s strings.Builder
		fmt.Fprintf(&s, "key %q: revoked hold still believed at %s, after the force-unlock's 200 answer listing it returned at %s", r.key, at(first), at(r.ret))
		if len(cands) > 1 {
			fmt.Fprintf(&s, " (each of the %d holds it may mean was believed after it)", len(cands))
		}
		for _, b := range cands {
			w, _ := b.witness(r.ret)
			fmt.Fprintf(&s, "\n    believed at %s: %s", at(w), b.describe())
		}
		// The context quotes r with the key's other force-unlocks.
		out = append(out, hvFinding{kind: "revoked", key: r.key, at: first, text: s.String() + hv.context(r.key, first)})
	}
	return out
}

// pastValidity reports whether a believed at t past any validity its
// client could count.
func pastValidity(a *believedHold, t int64) bool {
	bound, ok := a.validBound()
	return ok && t > bound
}

// overlapFinding reports that a and b both believed they held key at
// b's start.
func (hv *holderView) overlapFinding(key string, a, b *believedHold) hvFinding {
	w, _ := a.witness(b.start)
	why := ""
	if pastValidity(a, b.start) {
		bound, _ := a.validBound()
		why = fmt.Sprintf(" (the first was %v past its validity bound then)", time.Duration(b.start-bound))
	}
	text := fmt.Sprintf("key %q: overlap: two holders believed they held it at %s%s: token %d was still believed at %s, after token %d's acquire returned at %s\n    first:  %s\n    second: %s",
		key, at(b.start), why, a.token, at(w), b.token, at(b.start), a.describe(), b.describe())
	return hvFinding{kind: "overlap", key: key, at: w, text: text + hv.context(key, w)}
}

// permitsFinding reports the holds believed at b's start if they add up
// to more than total permits.
func (hv *holderView) permitsFinding(key string, total int, b *believedHold, with []*believedHold) (hvFinding, bool) {
	used, legit := b.permits, b.permits
	last := b.start
	for _, a := range with {
		used += a.permits
		if !pastValidity(a, b.start) {
			legit += a.permits
		}
		w, _ := a.witness(b.start)
		last = max(last, w)
	}
	if used <= total {
		return hvFinding{}, false
	}
	var s strings.Builder
	fmt.Fprintf(&s, "semaphore %q: %d of %d permits believed held at %s, when token %d's acquire returned", key, used, total, at(b.start), b.token)
	if legit <= total {
		fmt.Fprintf(&s, " (%d of them by holders past their validity bound then)", used-legit)
	}
	for _, a := range append(with, b) {
		fmt.Fprintf(&s, "\n    %s", a.describe())
	}
	return hvFinding{kind: "permits", key: key, at: last, text: s.String() + hv.context(key, last)}, true
}

// context quotes the other holds of key believed in the 3 s up to t, the
// force-unlocks of key and the fault log up to t.
func (hv *holderView) context(key string, t int64) string {
	var s strings.Builder
	var near []string
	for _, b := range hv.holds {
		if b.key == key && b.call <= t && (len(b.held) > 0 && b.last() >= t-ms(3000) || b.start >= t-ms(3000)) {
			near = append(near, fmt.Sprintf("\n      %s", b.describe()))
		}
	}
	if len(near) > 0 {
		fmt.Fprintf(&s, "\n    holds of the key near then (%d):", len(near))
		if len(near) > 20 {
			near = append(near[:10], near[len(near)-10:]...)
		}
		s.WriteString(strings.Join(near, ""))
	}
	for _, r := range hv.revokes {
		if r.key == key && r.call <= t {
			fmt.Fprintf(&s, "\n    %s", r)
		}
	}
	s.WriteString("\n    faults so far:")
	n := 0
	for _, x := range hv.notes {
		if x.at <= t {
			fmt.Fprintf(&s, "\n      %s %s", at(x.at), x.msg)
			n++
		}
	}
	if n == 0 {
		s.WriteString(" none")
	}
	return s.String()
}

// hvStats counts what a holder view saw and found.
type hvStats struct {
	holds, believed, samples int
	renewals, shorter        int
	pauses                   int
	// revocations counts the force-unlocks sent: exact were answered
	// 200 (their answers listing listed holds), pending 202.
	revocations, exact, listed, pending int
	findings                            int
}

func (s *hvStats) add(o hvStats) {
	s.holds += o.holds
	s.believed += o.believed
	s.samples += o.samples
	s.renewals += o.renewals
	s.shorter += o.shorter
	s.pauses += o.pauses
	s.revocations += o.revocations
	s.exact += o.exact
	s.listed += o.listed
	s.pending += o.pending
	s.findings += o.findings
}

func (s hvStats) String() string {
	return fmt.Sprintf("%d holds (%d believed past their start, %d held samples), %d renewals by hand (%d shorter than the TTL before), %d pauses past the validity, %d force-unlocks (%d answered 200 listing %d holds, %d answered 202 pending, %d otherwise or not at all), %d findings",
		s.holds, s.believed, s.samples, s.renewals, s.shorter, s.pauses, s.revocations, s.exact, s.listed, s.pending, s.revocations-s.exact-s.pending, s.findings)
}

// summary counts what hv recorded and what its checks find.
func (hv *holderView) summary() hvStats {
	st := hv.stats()
	st.findings = len(hv.check())
	return st
}

// stats counts what hv recorded; findings are filled in by verdict.
func (hv *holderView) stats() hvStats {
	hv.mu.Lock()
	defer hv.mu.Unlock()
	var st hvStats
	for _, b := range hv.holds {
		st.holds++
		if len(b.held) > 0 {
			st.believed++
		}
		st.samples += len(b.held)
		st.pauses += len(b.pauses)
		cur := b.ttl
		for _, r := range b.renews {
			st.renewals++
			if r.ttl < cur {
				st.shorter++
			}
			if r.ok {
				cur = r.ttl
			}
		}
	}
	for _, r := range hv.revokes {
		st.revocations++
		switch {
		case r.exact():
			st.exact++
			st.listed += len(r.released)
		case r.pending():
			st.pending++
		}
	}
	return st
}

// maxReported is how many findings a verdict spells out in full.
const maxReported = 5

// verdict checks hv and returns its findings, each of which fails the
// run, in full for the first few. Force-unlocks answered other than 200
// go to logf: they make no claim, and their holds were checked like any.
func (hv *holderView) verdict(logf func(string, ...any)) ([]string, hvStats) {
	found := hv.check()
	st := hv.stats()
	hv.mu.Lock()
	for _, r := range hv.revokes {
		if !r.exact() {
			logf("holder view: %s", r)
		}
	}
	hv.mu.Unlock()
	st.findings = len(found)
	var fail []string
	for i, f := range found {
		if i >= maxReported {
			fail = append(fail, fmt.Sprintf("holder view: %s (details only for the first %d)", firstLine(f.text), maxReported))
			continue
		}
		fail = append(fail, "holder view: "+f.text)
	}
	return fail, st
}

func firstLine(s string) string {
	first, _, _ := strings.Cut(s, "\n")
	return first
}

// hvWorkload runs holders that record what they believe into hv: each
// takes an exclusive lock, one side of a read-write lock or some of a
// semaphore's permits, with a random TTL (1-3 s); with AutoRenew, or
// renewing by hand with random TTLs (1-4 s, shorter or longer than the
// last); works while looking at its belief every 5-25 ms; sometimes
// stops renewing for longer than its validity (a stand-in for a GC pause)
// and looks again; then releases. Another goroutine force-unlocks random
// keys through the nodes' admin endpoints, which revokes the holders'
// holds: their clients must see them lost before anyone else is granted.
type hvWorkload struct {
	hv       *holderView
	ns       string
	clients  []*client.Client
	xKeys    []string // exclusive
	rwKeys   []string // read-write
	semKey   string
	semTotal int
	// admins returns the nodes' admin addresses for force-unlocks (nil:
	// none).
	admins func() []string
	http   *http.Client
}

// newHVWorkload returns a workload on keys prefix-x0, prefix-x1, prefix-rw
// and semaphore prefix-sem (2 permits), through clients.
func newHVWorkload(hv *holderView, prefix string, clients []*client.Client, admins func() []string) *hvWorkload {
	w := &hvWorkload{
		hv: hv, ns: "e2e", clients: clients,
		xKeys: []string{prefix + "-x0", prefix + "-x1"}, rwKeys: []string{prefix + "-rw"},
		semKey: prefix + "-sem", semTotal: 2, admins: admins,
		http: hvHTTPClient(),
	}
	hv.setTotal(w.semKey, w.semTotal)
	return w
}

// hvHTTPClient is the HTTP client of force-unlocks: a fresh connection
// per request (a kept one may lead to a node that went away), and an
// answer awaited longer than the handler's own limit (10 s) and any pause
// a fault makes: a request whose answer never came may act at any time
// later.
func hvHTTPClient() *http.Client {
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
}

// run starts workers holders (ids firstID...) and, with admins, the
// force-unlocker, until quit closes. seed seeds their choices.
func (w *hvWorkload) run(ctx context.Context, workers, firstID int, seed uint64, quit <-chan struct{}, wg *sync.WaitGroup) {
	for i := range workers {
		id := firstID + i
		rng := rand.New(rand.NewPCG(seed, uint64(id)|0x4f<<32))
		cl := w.clients[i%len(w.clients)]
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-quit:
					return
				default:
				}
				w.step(ctx, id, cl, rng, quit)
			}
		}()
	}
	if w.admins == nil {
		return
	}
	rng := rand.New(rand.NewPCG(seed, 0xf0ce))
	wg.Add(1)
	go func() {
		defer wg.Done()
		keys := append(append(slices.Clone(w.xKeys), w.rwKeys...), w.semKey)
		for {
			t := time.NewTimer(1500*time.Millisecond + time.Duration(rng.IntN(1500))*time.Millisecond)
			select {
			case <-quit:
				t.Stop()
				return
			case <-t.C:
			}
			addrs := w.admins()
			rng.Shuffle(len(addrs), func(i, j int) { addrs[i], addrs[j] = addrs[j], addrs[i] })
			w.forceUnlock(ctx, keys[rng.IntN(len(keys))], addrs)
		}
	}()
}

// hvHandle is the part of a Mutex or Semaphore a holder uses.
type hvHandle struct {
	acquire func(ctx context.Context) error
	release func(ctx context.Context) error
	renew   func(ctx context.Context, ttl time.Duration) error // nil: cannot renew by hand
	held    func() bool
	lost    func() <-chan struct{}
	token   func() uint64
	owner   wire.Owner
}

func mutexHandle(m *client.Mutex, block bool) hvHandle {
	acq := m.TryLock
	if block {
		acq = m.Lock
	}
	return hvHandle{acquire: acq, release: m.Unlock, renew: m.Renew, held: m.Held, lost: m.Lost, token: m.Token, owner: m.Owner()}
}

func semHandle(s *client.Semaphore, n int, block bool, owner wire.Owner) hvHandle {
	acq := func(ctx context.Context) error { return s.TryAcquire(ctx, n) }
	if block {
		acq = func(ctx context.Context) error { return s.Acquire(ctx, n) }
	}
	return hvHandle{acquire: acq, release: s.Release, held: func() bool { return s.Held() > 0 }, lost: s.Lost, token: s.Token, owner: owner}
}

// randTTL returns a TTL in [lo, hi) in whole milliseconds.
func randTTL(rng *rand.Rand, lo, hi time.Duration) time.Duration {
	return lo + time.Duration(rng.Int64N(int64((hi-lo)/time.Millisecond)))*time.Millisecond
}

// step is one hold of worker id; once quit closes it stops working and
// releases at once.
func (w *hvWorkload) step(ctx context.Context, id int, cl *client.Client, rng *rand.Rand, quit <-chan struct{}) {
	hv := w.hv
	ttl := randTTL(rng, time.Second, 3*time.Second)
	auto := rng.IntN(3) == 0
	opts := []client.Option{client.TTL(ttl)}
	if auto {
		opts = append(opts, client.AutoRenew())
	}
	block := rng.IntN(2) == 0
	b := believedHold{worker: id, ttl: ttl, auto: auto, permits: 1}
	var h hvHandle
	switch r := rng.IntN(20); {
	case r < 9:
		b.key, b.kind = w.xKeys[rng.IntN(len(w.xKeys))], holdExclusive
		h = mutexHandle(cl.Mutex(b.key, opts...), block)
	case r < 15:
		b.key = w.rwKeys[rng.IntN(len(w.rwKeys))]
		rw := cl.RWMutex(b.key, opts...)
		if rng.IntN(3) < 2 {
			b.kind, h = holdRead, mutexHandle(rw.Reader(), block)
		} else {
			b.kind, h = holdWrite, mutexHandle(rw.Writer(), block)
		}
	default:
		b.key, b.kind, b.permits = w.semKey, holdSemaphore, 1+rng.IntN(2)
		// A Semaphore does not say its owner: its holds are told apart
		// by an owner id made up here (each handle is its own owner on
		// the server too), with the client's real id.
		h = semHandle(cl.Semaphore(b.key, w.semTotal, opts...), b.permits, block, wire.Owner{Client: cl.ID(), ID: 1<<63 | uint64(id)<<32 | rng.Uint64()>>32})
	}
	b.owner = h.owner
	lctx, cancel := context.WithTimeout(ctx, time.Duration(1+rng.IntN(3))*time.Second)
	b.call = hv.now()
	err := h.acquire(lctx)
	b.start = hv.now()
	cancel()
	if err != nil {
		if !errors.Is(err, client.ErrLocked) {
			time.Sleep(20 * time.Millisecond) // the cluster is in trouble: do not spin
		}
		return
	}
	b.token = h.token()
	hold := hv.begin(b)
	believe := hv.clientBelief(hold, h.held, h.lost())
	believed := hv.sample(hold, believe)

	// Work, looking at the belief, renewing by hand if so made.
	cur := ttl
	lastRenew := time.Now()
	renewAfter := time.Duration(float64(cur) * (0.2 + 0.5*rng.Float64()))
	end := time.Now().Add(time.Duration(rng.Int64N(int64(ttl) * 3 / 2)))
	stopping := func() bool {
		select {
		case <-quit:
			return true
		default:
			return false
		}
	}
	for believed && time.Now().Before(end) && !stopping() {
		time.Sleep(time.Duration(5+rng.IntN(21)) * time.Millisecond)
		if believed = hv.sample(hold, believe); !believed {
			break
		}
		if auto || h.renew == nil || time.Since(lastRenew) < renewAfter {
			continue
		}
		next := randTTL(rng, time.Second, 4*time.Second)
		rctx, rcancel := context.WithTimeout(ctx, 2*time.Second)
		r := renewal{call: hv.now(), ttl: next}
		err := h.renew(rctx, next)
		r.ret, r.ok = hv.now(), err == nil
		rcancel()
		hold.renews = append(hold.renews, r)
		if r.ok {
			cur = next
		}
		lastRenew = time.Now()
		renewAfter = time.Duration(float64(cur) * (0.2 + 0.5*rng.Float64()))
	}
	// A GC pause: no renewal and no look until past any validity the
	// client could count, then back to work: the belief must be gone.
	if believed && !auto && rng.IntN(4) == 0 && !stopping() {
		bound, _ := hold.validBound()
		from := hv.now()
		if d := time.Duration(bound-from) + time.Duration(200+rng.IntN(600))*time.Millisecond; d > 0 {
			time.Sleep(d)
		}
		hold.pauses = append(hold.pauses, span{from, hv.now()})
		for range 3 {
			hv.sample(hold, believe)
			time.Sleep(10 * time.Millisecond)
		}
	}
	uctx, ucancel := context.WithTimeout(ctx, 3*time.Second)
	hold.unlock = hv.now()
	if err := h.release(uctx); err != nil {
		hold.unlockE = err.Error()
	}
	ucancel()
}

// forceUnlocked is the answer of POST /locks/unlock (server.ForceUnlocked).
type forceUnlocked struct {
	Released []struct {
		Client uint64 `json:"client"`
		Owner  uint64 `json:"owner"`
		Token  uint64 `json:"token"`
	} `json:"released"`
	Pending bool `json:"pending"`
}

// forceUnlockTries bounds how many times forceUnlock sends its request.
const forceUnlockTries = 4

// forceUnlock frees key as paxlockctl unlock --force does, through the
// admin endpoint of the node that says it serves the key's group (a node
// that does not serve it redirects, 307, to the master it knows, and the
// HTTP client follows), and sends it again, up to forceUnlockTries times
// in all, while the answer is 503 (mastership moved: a revocation that
// node made was dropped) or no node could be reached that serves the
// group. It records every request that was sent and returns the last
// one's record; false if none was sent.
func (w *hvWorkload) forceUnlock(ctx context.Context, key string, addrs []string) (revocation, bool) {
	var last revocation
	sent := false
	for try := range forceUnlockTries {
		if try > 0 {
			t := time.NewTimer(250 * time.Millisecond)
			select {
			case <-ctx.Done():
				t.Stop()
				return last, sent
			case <-t.C:
			}
		}
		r, ok := w.forceUnlockOnce(ctx, key, addrs)
		if ok {
			w.hv.revoked(r)
			last, sent = r, true
			if r.status != http.StatusServiceUnavailable {
				return last, sent
			}
		}
	}
	return last, sent
}

// forceUnlockOnce sends one force-unlock of key to the first of addrs
// that says it serves the key's group; false if none does or the request
// could not be sent.
func (w *hvWorkload) forceUnlockOnce(ctx context.Context, key string, addrs []string) (revocation, bool) {
	addr := ""
	for _, a := range addrs {
		if w.serves(ctx, a, key) {
			addr = a
			break
		}
	}
	if addr == "" {
		return revocation{}, false
	}
	body, err := json.Marshal(map[string]string{"namespace": w.ns, "key": key})
	if err != nil {
		panic(err) // two strings always marshal
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+"/locks/unlock", bytes.NewReader(body))
	if err != nil {
		return revocation{}, false
	}
	req.Header.Set("Content-Type", "application/json")
	r := revocation{key: key, call: w.hv.now()}
	resp, err := w.http.Do(req)
	if err != nil {
		var op *net.OpError
		if errors.As(err, &op) && op.Op == "dial" {
			return revocation{}, false // never sent
		}
		// Sent, no answer: it may act at any time later.
		r.ret, r.answer = forever, err.Error()
		return r, true
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	resp.Body.Close()
	r.ret, r.status = w.hv.now(), resp.StatusCode
	r.answer = fmt.Sprintf("HTTP %d", resp.StatusCode)
	var out forceUnlocked
	switch err := json.Unmarshal(b, &out); {
	case err == nil:
		for _, x := range out.Released {
			r.released = append(r.released, revokedHold{owner: wire.Owner{Client: x.Client, ID: x.Owner}, token: x.Token})
		}
		if out.Pending {
			r.answer += ", pending"
		}
	case r.exact():
		// A 200 whose listing cannot be read claims nothing here.
		r.status = 0
		r.answer += fmt.Sprintf(", unreadable body: %v", err)
	default:
		r.answer += ": " + strings.TrimSpace(string(b))
	}
	return r, true
}

// serves reports whether the node of admin address addr says it serves
// key's group.
func (w *hvWorkload) serves(ctx context.Context, addr, key string) bool {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	served, groups := adminServed(ctx, w.http, addr)
	return groups > 0 && slices.Contains(served, wire.GroupOf(wire.KeyHash(w.ns, key), groups))
}
