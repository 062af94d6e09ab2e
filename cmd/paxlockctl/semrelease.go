// This file is sem release: inside the CMD of sem acquire, give back
// some of the permits the run form holds, keeping the rest, its token
// and its renewal (client.Semaphore.ReleasePermits).

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"

	"github.com/paxlock/paxlock/client"
)

// perform gives back req.Permits of the hold's permits, the last ones it
// holds, and says how many it keeps. Giving back every permit is not a
// sem release: the hold ends when CMD does.
func (h *semHold) perform(ctx context.Context, req holdRequest) holdReply {
	if req.Op != "release" {
		return holdReply{Exit: 2, Error: fmt.Sprintf("unknown request %q", req.Op)}
	}
	ids := h.s.PermitIDs()
	if len(ids) == 0 {
		return holdReply{Exit: exitLost, Error: "the permits are no longer held"}
	}
	if req.Permits < 1 || req.Permits >= len(ids) {
		return holdReply{Exit: 2, Error: fmt.Sprintf("COUNT %d: want 1 to %d, fewer than the %d permits held (every permit is given back when CMD ends)", req.Permits, len(ids)-1, len(ids))}
	}
	err := h.s.ReleasePermits(ctx, ids[len(ids)-req.Permits:]...)
	switch {
	case errors.Is(err, client.ErrLockLost) || errors.Is(err, client.ErrNotHeld):
		return holdReply{Exit: exitLost, Error: err.Error()}
	case err != nil:
		return holdReply{Exit: 1, Error: err.Error()}
	}
	return holdReply{Token: h.s.Token(), Permits: len(h.s.PermitIDs())}
}

// semReleaseEvent is sem release's output.
type semReleaseEvent struct {
	// Event is released_permits.
	Event string `json:"event"`
	Key   string `json:"key"`
	Token uint64 `json:"token"`
	// Permits is how many permits the hold keeps.
	Permits int `json:"permits"`
}

// table prints the permits kept alone, for n=$(paxlockctl sem release 1).
func (e semReleaseEvent) table(w io.Writer) error {
	_, err := fmt.Fprintln(w, e.Permits)
	return err
}

// runSemRelease is sem release COUNT: a request to the sem acquire whose
// command runs this paxlockctl.
func runSemRelease(ctx context.Context, o *options, p printer, args []string) error {
	if err := wantArgs(args, 1, 1, "sem release COUNT"); err != nil {
		return err
	}
	n, err := strconv.Atoi(args[0])
	if err != nil || n < 1 {
		return fmt.Errorf("%w: sem release: COUNT %q: want a number of permits, at least 1", errUsage, args[0])
	}
	rep, err := askHold(ctx, envSem, "sem release", "sem acquire NAME PERMITS", holdRequest{Op: "release", Permits: n})
	if err != nil {
		return err
	}
	if err := replyErr(o, "sem release", rep); err != nil {
		return err
	}
	return p.emit(semReleaseEvent{Event: "released_permits", Key: os.Getenv(envKey), Token: rep.Token, Permits: rep.Permits})
}

// runSem is sem: sem acquire runs a command under the permits (runHold),
// sem release gives some of them back from inside it.
func runSem(ctx context.Context, o *options, p printer, name string, args []string) error {
	if len(args) > 0 && args[0] == "release" {
		if o.argv != nil {
			return fmt.Errorf("%w: sem release runs no command", errUsage)
		}
		return runSemRelease(ctx, o, p, args[1:])
	}
	return runHold(ctx, o, p, name, args)
}
