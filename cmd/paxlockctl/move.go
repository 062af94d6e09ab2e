// This file is namespace move: moving a namespace to another cluster
// of a meta cluster's registry, and the move's status and abort.

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/paxlock/paxlock/adminapi"
)

const moveUsage = "want namespace move NAME -to CLUSTER | namespace move status NAME | namespace move abort NAME (with -admin naming the meta cluster's nodes)"

// movePoll is how often move and abort read the move's record while they
// wait for it to end: the admin API has no push, and a move's steps take
// milliseconds to seconds.
const movePoll = 200 * time.Millisecond

func runMove(ctx context.Context, o *options, p printer, args []string) error {
	switch {
	case len(args) == 1 && o.to != "":
	case len(args) == 2 && (args[0] == "status" || args[0] == "abort"):
	default:
		return fmt.Errorf("%w: %s", errUsage, moveUsage)
	}
	ac, err := o.adminAPI()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	switch args[0] {
	case "status":
		m, ok, err := currentMove(ctx, ac, args[1])
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("namespace %q has no move on record", args[1])
		}
		return p.emit(moveOutput(m))
	case "abort":
		return abortMove(ctx, p, ac, args[1])
	}
	return startMove(ctx, p, ac, args[0], o.to)
}

// currentMove returns namespace ns's move record, if it has one.
func currentMove(ctx context.Context, ac *adminClient, ns string) (adminapi.RegistryMove, bool, error) {
	reg, err := fetchRegistry(ctx, ac)
	if err != nil {
		return adminapi.RegistryMove{}, false, err
	}
	for _, m := range reg.Moves {
		if m.Namespace == ns {
			return m, true, nil
		}
	}
	return adminapi.RegistryMove{}, false, nil
}

// startMove records a move of ns to cluster `to` (state prepare; the
// registry that holds the mover lock drives it) and waits until it ends.
func startMove(ctx context.Context, p printer, ac *adminClient, ns, to string) error {
	reg, err := fetchRegistry(ctx, ac)
	if err != nil {
		return err
	}
	from := ""
	for _, n := range reg.Namespaces {
		if n.Name == ns {
			from = n.Cluster
		}
	}
	switch {
	case from == "":
		return fmt.Errorf("namespace %q is not in the registry's tables", ns)
	case from == to:
		return fmt.Errorf("namespace %q is on cluster %q already", ns, to)
	}
	m := adminapi.RegistryMove{Namespace: ns, ID: 1, From: from, To: to, State: adminapi.MovePrepare}
	for _, cur := range reg.Moves {
		if cur.Namespace != ns {
			continue
		}
		if !cur.State.Finished() {
			return fmt.Errorf("a move of %q is under way (move %d, %s): see namespace move status %s", ns, cur.ID, cur.State, ns)
		}
		m.ID, m.Token = cur.ID+1, cur.Token
	}
	if err := putMove(ctx, ac, m); err != nil {
		return err
	}
	return waitMove(ctx, p, ac, ns, m.ID)
}

// abortMove asks for the abort of ns's move, allowed until its flip, and
// waits until it is rolled back.
func abortMove(ctx context.Context, p printer, ac *adminClient, ns string) error {
	m, ok, err := currentMove(ctx, ac, ns)
	switch {
	case err != nil:
		return err
	case !ok || m.State.Finished():
		return fmt.Errorf("namespace %q has no move under way", ns)
	case m.State.Flipped():
		return fmt.Errorf("the move of %q has flipped (%s): it can only complete", ns, m.State)
	}
	if m.State != adminapi.MoveAborting {
		m.State = adminapi.MoveAborting
		if err := putMove(ctx, ac, m); err != nil {
			return err
		}
	}
	return waitMove(ctx, p, ac, ns, m.ID)
}

func putMove(ctx context.Context, ac *adminClient, m adminapi.RegistryMove) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	code, body, err := ac.change(ctx, http.MethodPut, "/registry/moves/"+url.PathEscape(m.Namespace), b)
	switch {
	case err != nil:
		return fmt.Errorf("namespace move: %w", err)
	case code != http.StatusNoContent:
		return fmt.Errorf("namespace move: HTTP %d: %s", code, body)
	}
	return nil
}

// waitMove waits until move id of ns has ended and prints its record; at
// the deadline it prints the record as it stands and says the move goes
// on.
func waitMove(ctx context.Context, p printer, ac *adminClient, ns string, id uint64) error {
	t := time.NewTicker(movePoll)
	defer t.Stop()
	var last adminapi.RegistryMove
	for {
		m, ok, err := currentMove(ctx, ac, ns)
		if err == nil && ok && m.ID == id {
			last = m
			if m.State.Finished() {
				return p.emit(moveOutput(m))
			}
		}
		select {
		case <-ctx.Done():
			_ = p.emit(moveOutput(last))
			return fmt.Errorf("the move of %q has not ended (it goes on; see namespace move status %s): %w", ns, ns, ctx.Err())
		case <-t.C:
		}
	}
}

// moveOutput is a move's record as namespace move prints it.
type moveOutput adminapi.RegistryMove

func (o moveOutput) table(w io.Writer) error {
	if o.Namespace == "" {
		return errors.New("no move on record")
	}
	_, err := fmt.Fprintf(w, "%s\tmove %d\t%s -> %s\t%s\n", o.Namespace, o.ID, o.From, o.To, o.State)
	return err
}
