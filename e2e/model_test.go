package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// The checker must reject what the service must never do.
func TestModelRejectsViolations(t *testing.T) {
	acq := func(owner int, call, ret int64, tok uint64) porcupine.Operation {
		return porcupine.Operation{ClientId: owner, Input: lockInput{Key: "k", Owner: owner, Acquire: true}, Call: call, Output: lockOutput{OK: true, Token: tok}, Return: ret}
	}
	rel := func(owner int, call, ret int64, tok uint64) porcupine.Operation {
		return porcupine.Operation{ClientId: owner, Input: lockInput{Key: "k", Owner: owner, Token: tok}, Call: call, Output: lockOutput{OK: true}, Return: ret}
	}
	cases := map[string][]porcupine.Operation{
		"double grant":     {acq(1, 0, 10, 5), acq(2, 20, 30, 6)},
		"token went back":  {acq(1, 0, 10, 5), rel(1, 20, 30, 5), acq(2, 40, 50, 4)},
		"foreign release":  {acq(1, 0, 10, 5), rel(2, 20, 30, 5)},
		"release of stale": {acq(1, 0, 10, 5), rel(1, 20, 30, 5), rel(1, 40, 50, 5)},
	}
	for name, h := range cases {
		if porcupine.CheckOperationsTimeout(lockModel.ToModel(), h, 10*time.Second) != porcupine.Illegal {
			t.Errorf("%s: accepted", name)
		}
	}
	ok := []porcupine.Operation{acq(1, 0, 10, 5), rel(1, 20, 30, 5), acq(2, 40, 50, 9), acq(2, 60, 70, 9)}
	if porcupine.CheckOperationsTimeout(lockModel.ToModel(), ok, 10*time.Second) != porcupine.Ok {
		t.Error("a valid history was rejected")
	}
}

// The read-write model must reject what a read-write lock must never do,
// and accept readers sharing the lock (and a grant's shared token).
func TestRWModelRejectsViolations(t *testing.T) {
	op := func(owner int, read bool, o rwOp, call, ret int64, tok uint64, ok bool) porcupine.Operation {
		in := rwInput{Key: "k", Owner: owner, Read: read, Op: o}
		out := lockOutput{OK: ok}
		if o == rwAcquire {
			out.Token = tok
		} else {
			in.Token = tok
		}
		return porcupine.Operation{ClientId: owner, Input: in, Call: call, Output: out, Return: ret}
	}
	w := func(owner int, o rwOp, call, ret int64, tok uint64) porcupine.Operation {
		return op(owner, false, o, call, ret, tok, true)
	}
	r := func(owner int, o rwOp, call, ret int64, tok uint64) porcupine.Operation {
		return op(owner, true, o, call, ret, tok, true)
	}
	lost := porcupine.Operation{ClientId: 1, Input: rwInput{Key: "k", Owner: 1, Op: rwRelease, Token: 5}, Call: 20, Output: lockOutput{Unknown: true}, Return: forever}
	bad := map[string][]porcupine.Operation{
		"two writers":          {w(1, rwAcquire, 0, 10, 5), w(2, rwAcquire, 20, 30, 6)},
		"reader under writer":  {w(1, rwAcquire, 0, 10, 5), r(2, rwAcquire, 20, 30, 6)},
		"writer under reader":  {r(1, rwAcquire, 0, 10, 5), w(2, rwAcquire, 20, 30, 6)},
		"writer token reused":  {w(1, rwAcquire, 0, 10, 5), w(1, rwRelease, 20, 30, 5), w(2, rwAcquire, 40, 50, 5)},
		"reader token back":    {r(1, rwAcquire, 0, 10, 5), r(1, rwRelease, 20, 30, 5), r(2, rwAcquire, 40, 50, 4)},
		"renew by non-holder":  {w(1, rwAcquire, 0, 10, 5), w(2, rwRenew, 20, 30, 5)},
		"release of stale":     {w(1, rwAcquire, 0, 10, 5), w(1, rwRelease, 20, 30, 5), w(1, rwRelease, 40, 50, 5)},
		"renew after release":  {r(1, rwAcquire, 0, 10, 5), r(1, rwRelease, 20, 30, 5), r(1, rwRenew, 40, 50, 5)},
		"writer renews as rdr": {w(1, rwAcquire, 0, 10, 5), r(1, rwRenew, 20, 30, 5)},
	}
	for name, h := range bad {
		if porcupine.CheckOperationsTimeout(rwModel.ToModel(), h, 10*time.Second) != porcupine.Illegal {
			t.Errorf("%s: accepted", name)
		}
	}
	good := map[string][]porcupine.Operation{
		"readers share":      {r(1, rwAcquire, 0, 10, 5), r(2, rwAcquire, 20, 30, 6), r(1, rwRelease, 40, 50, 5), w(3, rwAcquire, 35, 70, 8), r(2, rwRelease, 55, 60, 6)},
		"shared grant token": {w(1, rwAcquire, 0, 10, 5), r(2, rwAcquire, 5, 40, 7), r(3, rwAcquire, 6, 40, 7), w(1, rwRelease, 20, 30, 5)},
		"lost hold expires":  {w(1, rwAcquire, 0, 10, 5), lost, w(2, rwAcquire, 30, 40, 6)},
		"failed ops no-ops":  {w(1, rwAcquire, 0, 10, 5), op(2, false, rwAcquire, 20, 30, 0, false), op(2, false, rwRenew, 20, 30, 5, false)},
		"renew by holder":    {r(1, rwAcquire, 0, 10, 5), r(1, rwRenew, 20, 30, 5), r(1, rwRelease, 40, 50, 5)},
		"owner takes again":  {w(1, rwAcquire, 0, 10, 5), lost, w(1, rwAcquire, 30, 40, 6)},
		"reader after lost":  {w(1, rwAcquire, 0, 10, 5), lost, r(2, rwAcquire, 30, 40, 6), r(3, rwAcquire, 45, 50, 7)},
		"renewed then freed": {w(1, rwAcquire, 0, 10, 5), w(1, rwRenew, 12, 14, 5), w(1, rwRelease, 20, 30, 5), w(2, rwAcquire, 40, 50, 9)},
	}
	for name, h := range good {
		if res := porcupine.CheckOperationsTimeout(rwModel.ToModel(), h, 10*time.Second); res != porcupine.Ok {
			t.Errorf("%s: a valid history was rejected (%v)", name, res)
		}
	}
}

// The exclusive model rejects a renewal by an owner that does not hold.
func TestModelRejectsForeignRenew(t *testing.T) {
	h := []porcupine.Operation{
		{ClientId: 1, Input: lockInput{Key: "k", Owner: 1, Acquire: true}, Call: 0, Output: lockOutput{OK: true, Token: 5}, Return: 10},
		{ClientId: 2, Input: lockInput{Key: "k", Owner: 2, Renew: true, Token: 5}, Call: 20, Output: lockOutput{OK: true}, Return: 30},
	}
	if porcupine.CheckOperationsTimeout(lockModel.ToModel(), h, 10*time.Second) != porcupine.Illegal {
		t.Error("a renewal by a non-holder was accepted")
	}
	h[1].Input = lockInput{Key: "k", Owner: 1, Renew: true, Token: 5}
	if porcupine.CheckOperationsTimeout(lockModel.ToModel(), h, 10*time.Second) != porcupine.Ok {
		t.Error("the holder's renewal was rejected")
	}
}

// checkTokens and checkHolds find what they are for, and only that.
func TestHistoryChecks(t *testing.T) {
	h := &history{
		grants: []grant{
			{key: "a", owner: 1, token: 5, call: 0, ret: 10},
			{key: "a", owner: 2, token: 5, call: 20, ret: 30}, // not above 5
			{key: "a", owner: 3, token: 9, call: 25, ret: 40},
			{key: "b", owner: 1, token: 7, call: 0, ret: 10},
			{key: "b", owner: 2, token: 7, call: 5, ret: 15}, // overlapping: a shared grant
		},
		holds: []hold{
			{key: "a", owner: 1, token: 5, start: 10, end: 20},
			{key: "a", owner: 2, token: 6, start: 15, end: 25}, // overlaps owner 1
			{key: "b", owner: 1, token: 7, read: true, start: 10, end: 20},
			{key: "b", owner: 2, token: 7, read: true, start: 15, end: 25},
			{key: "c", owner: 1, token: 1, start: 10, end: 20},
			{key: "c", owner: 2, token: 2, start: 20, end: 30},
		},
	}
	if v := checkTokens(h); len(v) != 1 || !strings.Contains(v[0], "owner 2 granted token 5") {
		t.Errorf("checkTokens: %q, want one violation by owner 2", v)
	}
	if v := checkHolds(h); len(v) != 1 || !strings.Contains(v[0], "key a") {
		t.Errorf("checkHolds: %q, want one violation on key a", v)
	}
}

// checkAnswers finds stale and wrong answers, and accepts true ones.
func TestCheckAnswers(t *testing.T) {
	h := &history{
		grants: []grant{{key: "a", owner: 1, token: 5, call: 0, ret: 10}, {key: "a", owner: 2, token: 9, call: 50, ret: 60}},
		holds: []hold{
			{key: "a", owner: 1, token: 5, start: 10, end: 20, freed: 25},
			{key: "a", owner: 2, token: 9, start: 60, end: 80},
		},
		answers: []answer{
			{key: "a", call: 12, ret: 18, held: true, token: 5, what: "state"}, // true
			{key: "a", call: 21, ret: 24, held: false, what: "state"},          // may be: the release was under way
			{key: "a", call: 30, ret: 35, held: true, token: 5, what: "try-lock"},
			{key: "a", call: 12, ret: 18, held: false, what: "state"},
			{key: "a", call: 40, ret: 45, held: true, token: 9, what: "state"},
			{key: "a", call: 62, ret: 70, held: true, token: 7, what: "state"},
		},
	}
	v := checkAnswers(h)
	want := []string{"named token 5, released", "said free while owner 1", "named token 9, whose acquire", "said held with token 7 while owner 2"}
	if len(v) != len(want) {
		t.Fatalf("checkAnswers: %d violations %q, want %d", len(v), v, len(want))
	}
	for i, w := range want {
		if !strings.Contains(v[i], w) {
			t.Errorf("violation %d: %q, want it to say %q", i, v[i], w)
		}
	}
}

// The semaphore model must reject more permits granted than the total,
// a token going back and releases of what is not held, and accept
// holders sharing the permits (and a grant's shared token).
func TestSemModelRejectsViolations(t *testing.T) {
	acq := func(owner, n int, call, ret int64, tok uint64) porcupine.Operation {
		return porcupine.Operation{ClientId: owner, Input: semInput{Key: "s", Owner: owner, Acquire: true, Permits: n, Total: 3}, Call: call, Output: lockOutput{OK: true, Token: tok}, Return: ret}
	}
	rel := func(owner int, call, ret int64, tok uint64) porcupine.Operation {
		return porcupine.Operation{ClientId: owner, Input: semInput{Key: "s", Owner: owner, Token: tok}, Call: call, Output: lockOutput{OK: true}, Return: ret}
	}
	lost := porcupine.Operation{ClientId: 1, Input: semInput{Key: "s", Owner: 1, Token: 5}, Call: 20, Output: lockOutput{Unknown: true}, Return: forever}
	bad := map[string][]porcupine.Operation{
		"over the total":    {acq(1, 2, 0, 10, 5), acq(2, 2, 20, 30, 6)},
		"over by singles":   {acq(1, 1, 0, 10, 5), acq(2, 1, 20, 30, 6), acq(3, 1, 31, 35, 7), acq(4, 1, 40, 50, 8)},
		"token went back":   {acq(1, 1, 0, 10, 5), rel(1, 20, 30, 5), acq(2, 1, 40, 50, 4)},
		"token reused":      {acq(1, 1, 0, 10, 5), rel(1, 20, 30, 5), acq(2, 1, 40, 50, 5)},
		"foreign release":   {acq(1, 1, 0, 10, 5), rel(2, 20, 30, 5)},
		"release of stale":  {acq(1, 1, 0, 10, 5), rel(1, 20, 30, 5), rel(1, 40, 50, 5)},
		"two grants at one": {acq(1, 1, 0, 10, 5), acq(1, 1, 20, 30, 6)},
		"over past a lost":  {acq(1, 1, 0, 10, 5), lost, acq(2, 2, 30, 40, 6), acq(3, 2, 45, 50, 7)},
	}
	for name, h := range bad {
		if porcupine.CheckOperationsTimeout(semModel.ToModel(), h, 10*time.Second) != porcupine.Illegal {
			t.Errorf("%s: accepted", name)
		}
	}
	good := map[string][]porcupine.Operation{
		"sharing":            {acq(1, 2, 0, 10, 5), acq(2, 1, 20, 30, 6), rel(1, 40, 50, 5), acq(3, 2, 45, 70, 8)},
		"shared grant token": {acq(1, 3, 0, 10, 5), acq(2, 1, 5, 40, 7), acq(3, 2, 6, 40, 7), rel(1, 20, 30, 5)},
		"lost hold frees":    {acq(1, 3, 0, 10, 5), lost, acq(2, 3, 30, 40, 6)},
		"lost hold ends":     {acq(1, 1, 0, 10, 5), lost, acq(2, 2, 30, 40, 6), acq(3, 1, 45, 50, 7)},
		"failed is a noop":   {acq(1, 3, 0, 10, 5), {ClientId: 2, Input: semInput{Key: "s", Owner: 2, Acquire: true, Permits: 1, Total: 3}, Call: 20, Output: lockOutput{}, Return: 30}},
	}
	for name, h := range good {
		if res := porcupine.CheckOperationsTimeout(semModel.ToModel(), h, 10*time.Second); res != porcupine.Ok {
			t.Errorf("%s: a valid history was rejected (%v)", name, res)
		}
	}
	uses := []semUse{{key: "s", owner: 1, permits: 2, start: 0, end: 10}, {key: "s", owner: 2, permits: 1, start: 5, end: 20}, {key: "s", owner: 3, permits: 1, start: 10, end: 30}}
	if v := checkPermits(uses, 3); len(v) != 0 {
		t.Errorf("checkPermits on a valid run: %q", v)
	}
	if v := checkPermits(append(uses, semUse{key: "s", owner: 4, permits: 2, start: 15, end: 16}), 3); len(v) != 1 {
		t.Errorf("checkPermits: %q, want one violation", v)
	}
}
