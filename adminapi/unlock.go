package adminapi

// ForceUnlocked is the answer of POST /locks/unlock: the holds removed.
type ForceUnlocked struct {
	Namespace string         `json:"namespace"`
	Key       string         `json:"key"`
	Released  []ReleasedHold `json:"released"`
	// Pending: a hold is revoked but not removed yet, because its holder
	// has not acknowledged within the request's wait; the master removes
	// it when the holder does, or at the latest when its TTL runs out
	// (HTTP 202).
	Pending bool `json:"pending,omitempty"`
}

// ReleasedHold is one hold a force-unlock removed.
type ReleasedHold struct {
	Client uint64 `json:"client"`
	Owner  uint64 `json:"owner"`
	Token  uint64 `json:"token"`
}
