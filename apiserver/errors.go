package apiserver

import (
	"errors"
	"fmt"

	"connectrpc.com/connect"

	paxlockv1 "github.com/paxlock/paxlock/api/paxlock/v1"
	"github.com/paxlock/paxlock/client/wire"
)

// StatusHeader names the metadata every error of the service carries:
// the lock service's status name (LOCK_OCCUPIED, TOKEN_ERROR...), also in
// the error's ErrorInfo detail.
const StatusHeader = "Paxlock-Status"

// codeOf is the Connect code of a lock-service status that is not
// SUCCESS.
func codeOf(s wire.Status) connect.Code {
	switch s {
	case wire.StatusLockOccupied:
		return connect.CodeFailedPrecondition
	case wire.StatusLockDeleted:
		return connect.CodeNotFound
	case wire.StatusLockChangedOwner, wire.StatusTokenError:
		return connect.CodePermissionDenied
	case wire.StatusRevoked:
		return connect.CodeAborted
	case wire.StatusAuthFailed:
		return connect.CodeUnauthenticated
	case wire.StatusBadRequest:
		return connect.CodeInvalidArgument
	case wire.StatusOverloaded:
		return connect.CodeResourceExhausted
	case wire.StatusTimeout, wire.StatusNoMaster, wire.StatusMasterRedirect, wire.StatusMoving:
		return connect.CodeUnavailable
	case wire.StatusMoved:
		return connect.CodeFailedPrecondition
	}
	return connect.CodeInternal
}

// statusError is the Connect error of answer r to op on key: its code
// (codeOf), a message naming the status, and the ErrorInfo detail and
// StatusHeader metadata.
func statusError(op, key string, r *wire.Response) error {
	msg := fmt.Sprintf("%s %q: %s", op, key, r.Status)
	if r.Msg != "" {
		msg += ": " + r.Msg
	}
	switch r.Status {
	case wire.StatusLockChangedOwner:
		msg += " (held by another owner)"
	case wire.StatusTokenError:
		msg += " (not the hold's current token)"
	case wire.StatusLockDeleted:
		msg += " (no such hold: released, expired or never taken)"
	case wire.StatusMoved:
		msg += " (served by another cluster: " + r.Redirect + ")"
	}
	info := &paxlockv1.ErrorInfo{Status: r.Status.String(), RetryAfterMs: r.RetryAfterMs}
	if r.Status == wire.StatusLockOccupied {
		info.State = lockState(r, wire.Owner{})
	}
	return withInfo(connect.NewError(codeOf(r.Status), errors.New(msg)), info)
}

// withInfo adds info to e as its detail and StatusHeader.
func withInfo(e *connect.Error, info *paxlockv1.ErrorInfo) *connect.Error {
	if d, err := connect.NewErrorDetail(info); err == nil {
		e.AddDetail(d)
	}
	e.Meta().Set(StatusHeader, info.Status)
	return e
}

// apiError is a Connect error of the API's own (not a lock-service
// answer), with status as its ErrorInfo status.
func apiError(code connect.Code, status string, err error) *connect.Error {
	return withInfo(connect.NewError(code, err), &paxlockv1.ErrorInfo{Status: status})
}

// errSessionLost answers a call whose session into the node ended
// before its answer came: its outcome is unknown, and the same request
// by the same owner is safe to retry (a reacquire keeps its token).
var errSessionLost = errors.New("the node's session ended before the answer; retry with the same owner")
