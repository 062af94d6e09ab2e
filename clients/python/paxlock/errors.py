"""The exceptions of the paxlock client, one per way a call can fail."""


class PaxlockError(Exception):
    """A call the lock service refused or could not answer.

    code is the Connect/gRPC code ("failed_precondition", "unavailable",
    ...), status the lock service's own status ("LOCK_OCCUPIED", ...,
    from the Paxlock-Status header), message the node's explanation.
    """

    def __init__(self, code, status, message):
        super().__init__(f"paxlock: {status or code}: {message}")
        self.code = code
        self.status = status
        self.message = message


class AuthError(PaxlockError):
    """Wrong or missing namespace or secret (UNAUTHENTICATED)."""


class LockOccupied(PaxlockError):
    """A try-lock of a key another owner holds, or in its lock-delay."""


class LockTimeout(PaxlockError):
    """A blocking acquire's wait ran out in the queue."""


class NotOwner(PaxlockError):
    """Renew or Release by another owner or with a stale token."""


class LockNotFound(PaxlockError):
    """No such hold: released, expired or never taken."""


class Revoked(PaxlockError):
    """The hold was force-unlocked by an operator: it is lost."""


class InvalidArgument(PaxlockError):
    """A field out of range: empty key or owner, TTL, weight, value size."""


class Overloaded(PaxlockError):
    """A bound of the node was reached; retry after a while."""


class Unavailable(PaxlockError):
    """No master within the node's wait, or the node's session ended with
    the request in flight: retry with the same owner."""


class LockLost(Exception):
    """The hold is lost: its validity passed, the master ended it, or a
    renewal was refused. Stop the protected work."""


_BY_CODE = {
    "unauthenticated": AuthError,
    "failed_precondition": LockOccupied,
    "deadline_exceeded": LockTimeout,
    "permission_denied": NotOwner,
    "not_found": LockNotFound,
    "aborted": Revoked,
    "invalid_argument": InvalidArgument,
    "resource_exhausted": Overloaded,
    "unavailable": Unavailable,
}


def error_for(code, status, message):
    """The exception of a Connect error code."""
    return _BY_CODE.get(code, PaxlockError)(code, status, message)
