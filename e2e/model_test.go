package e2e

import (
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
