package adminapi

import (
	"fmt"
	"strconv"
	"strings"
)

// The body of GET /clients: the client sessions the nodes serve, a page
// at a time, so that a node with tens of thousands of sessions answers
// a bounded page.

// ClientsLimit is GET /clients' default page size, MaxClientsLimit its
// largest (?limit=).
const (
	ClientsLimit    = 100
	MaxClientsLimit = 1000
)

// ClientPage is GET /clients?node=&namespace=&after=&limit=: client
// sessions in the order of ClientCursor (by node, then longest connected
// first), after the cursor After, at most the limit. Next is the after
// of the next page, "" when this is the last. Missing names the nodes
// whose sessions could not be read (they are left out of the page).
type ClientPage struct {
	Clients []ClientSession `json:"clients"`
	Next    string          `json:"next,omitempty"`
	Missing []uint32        `json:"missing,omitempty"`
}

// ClientCursor is a session's place in a ClientPage's order: its node,
// its connection time and client id, and its address (two connections
// of one client at one instant).
type ClientCursor struct {
	Node      uint32
	Connected int64 // unix nanoseconds
	Client    string
	Remote    string
}

// CursorOf is s's cursor.
func CursorOf(s ClientSession) ClientCursor {
	return ClientCursor{Node: s.Node, Connected: s.Connected.UnixNano(), Client: s.Client, Remote: s.Remote}
}

// String is the cursor as GET /clients' after and Next carry it.
func (c ClientCursor) String() string {
	return fmt.Sprintf("%d/%d/%s/%s", c.Node, c.Connected, c.Client, c.Remote)
}

// Compare orders cursors: by node, connection time, client, address.
func (c ClientCursor) Compare(d ClientCursor) int {
	switch {
	case c.Node != d.Node:
		return cmpInt(int64(c.Node), int64(d.Node))
	case c.Connected != d.Connected:
		return cmpInt(c.Connected, d.Connected)
	case c.Client != d.Client:
		return strings.Compare(c.Client, d.Client)
	}
	return strings.Compare(c.Remote, d.Remote)
}

func cmpInt(a, b int64) int {
	if a < b {
		return -1
	}
	return 1
}

// ParseClientCursor reads a cursor written by ClientCursor.String.
func ParseClientCursor(s string) (ClientCursor, error) {
	f := strings.SplitN(s, "/", 4)
	if len(f) != 4 {
		return ClientCursor{}, fmt.Errorf("client cursor %q: want NODE/CONNECTED/CLIENT/REMOTE", s)
	}
	node, err := strconv.ParseUint(f[0], 10, 32)
	if err != nil {
		return ClientCursor{}, fmt.Errorf("client cursor %q: node: %w", s, err)
	}
	at, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		return ClientCursor{}, fmt.Errorf("client cursor %q: connected: %w", s, err)
	}
	return ClientCursor{Node: uint32(node), Connected: at, Client: f[2], Remote: f[3]}, nil
}
