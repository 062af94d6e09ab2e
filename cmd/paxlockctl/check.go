package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/paxlock/paxlock/client"
)

// exitNotCurrent is check's exit status when the token is not current:
// distinct from 1 (the command failed) and 2 (usage), so that a script
// can tell "no" from "could not ask".
const exitNotCurrent = 3

// errNotCurrent is check's answer "no", which run turns into
// exitNotCurrent after the record was printed.
var errNotCurrent = errors.New("token not current")

// parseToken reads check's TOKEN argument: a fencing token in decimal (as
// lock and state print it) or in hex with 0x.
func parseToken(s string) (uint64, error) {
	tok, err := strconv.ParseUint(s, 0, 64)
	if err != nil || tok == 0 {
		return 0, fmt.Errorf("%w: TOKEN %q: want a fencing token, a positive integer (decimal, or hex with 0x)", errUsage, s)
	}
	return tok, nil
}

// checkCmd asks the master of key's group whether token is a current
// hold's fencing token, prints the answer and returns errNotCurrent when
// it is not. Like state, it connects within timeout, and the client waits
// for a master (retrying through an election) within the same limit.
func checkCmd(ctx context.Context, p printer, cfg client.Config, key string, token uint64, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	c, err := client.New(ctx, cfg)
	if err != nil {
		return err
	}
	defer func() { _ = c.Close() }() // the command's own result is what it reports
	tc, err := c.CheckTokenState(ctx, key, token)
	if err != nil {
		return err
	}
	if err := p.emit(checkRecord(key, token, tc)); err != nil {
		return err
	}
	if !tc.Current {
		return errNotCurrent
	}
	return nil
}

// checkOutput is check's output.
type checkOutput struct {
	Key   string `json:"key"`
	Token uint64 `json:"token"`
	// Current says whether Token is a current hold's fencing token.
	Current bool `json:"current"`
	// State is the hold with Token when current, else the key's state
	// (as state prints it: held false when free).
	State stateOutput `json:"state"`
}

func checkRecord(key string, token uint64, tc client.TokenCheck) checkOutput {
	return checkOutput{Key: key, Token: token, Current: tc.Current, State: stateRecord(tc.State)}
}

func (o checkOutput) table(w io.Writer) error {
	var err error
	switch {
	case o.Current:
		_, err = fmt.Fprintf(w, "%s: token %d is current (held by %s, %s left)\n", o.Key, o.Token, o.State.Holder,
			time.Duration(o.State.TTLLeftMs)*time.Millisecond)
	case o.State.Held && o.State.Token == o.Token:
		// The hold is there with no time left: force-unlocked and
		// awaiting its holder's release, or expiring now.
		_, err = fmt.Fprintf(w, "%s: token %d is not current (held by %s with no time left: force-unlocked, or its TTL ran out; it goes once its holder releases it or its deadline passes)\n", o.Key, o.Token, o.State.Holder)
	case o.State.Held:
		_, err = fmt.Fprintf(w, "%s: token %d is not current (held by %s with token %d)\n", o.Key, o.Token, o.State.Holder, o.State.Token)
	case o.State.DelayLeftMs > 0:
		_, err = fmt.Fprintf(w, "%s: token %d is not current (free, in a lock-delay for %s)\n", o.Key, o.Token,
			time.Duration(o.State.DelayLeftMs)*time.Millisecond)
	default:
		_, err = fmt.Fprintf(w, "%s: token %d is not current (free)\n", o.Key, o.Token)
	}
	return err
}
