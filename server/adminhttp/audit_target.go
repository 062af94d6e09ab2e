package adminhttp

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
)

// What an audit record says of a request: its action, from the route;
// its namespace and target, from the path and from the body's fields
// named here only, so that a secret, a verifier or a credential in a
// body never reaches the log.

// auditAction names the change r asks for, and reports false for a
// request that changes nothing (GET, HEAD, OPTIONS) or is a relayed
// record (POST /audit).
func auditAction(r *http.Request) (string, bool) {
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return "", false
	}
	seg := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	del := r.Method == http.MethodDelete
	switch {
	case r.URL.Path == "/audit":
		return "", false
	case r.URL.Path == "/locks/unlock" || r.URL.Path == "/cluster/unlock":
		return "force_unlock", true
	case r.URL.Path == "/namespaces":
		return pick(del, "namespace_delete", "namespace_put"), true
	case len(seg) == 3 && seg[0] == "namespaces" && seg[2] == "quota":
		return "quota_set", true
	case r.URL.Path == "/drain":
		return pick(del, "undrain", "drain"), true
	case r.URL.Path == "/members":
		return "member_add", true
	case len(seg) == 2 && seg[0] == "members":
		return "member_remove", true
	case len(seg) == 3 && seg[0] == "members" && seg[1] == "groups":
		return "group_members_change", true
	case len(seg) == 3 && seg[0] == "registry":
		return "registry_" + strings.TrimSuffix(seg[1], "s") + pick(del, "_delete", "_put"), true
	case len(seg) == 3 && seg[0] == "moves":
		return "move_" + seg[2], true
	case r.URL.Path == "/backup":
		return "backup", true
	case r.URL.Path == "/debug/partition":
		return "fault_partition", true
	}
	return "request " + r.Method + " " + r.URL.Path, true
}

func pick(b bool, yes, no string) string {
	if b {
		return yes
	}
	return no
}

// auditBody is the part of a change's body a record may name.
type auditBody struct {
	Namespace string          `json:"namespace"`
	Name      string          `json:"name"`
	Key       string          `json:"key"`
	ID        json.RawMessage `json:"id"`
	Held      json.RawMessage `json:"held"`
	Waiters   json.RawMessage `json:"waiters"`
	Rate      json.RawMessage `json:"rate"`
	Burst     json.RawMessage `json:"burst"`
}

// auditTarget returns the namespace and target of r with body (its whole
// body, or nil when unread).
func auditTarget(r *http.Request, body []byte) (ns, target string) {
	var b auditBody
	if len(body) > 0 {
		_ = json.Unmarshal(body, &b) // a body that does not parse names nothing
	}
	seg := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	switch {
	case r.URL.Path == "/locks/unlock" || r.URL.Path == "/cluster/unlock":
		return b.Namespace, b.Key
	case r.URL.Path == "/namespaces":
		if r.Method == http.MethodDelete {
			return r.URL.Query().Get("name"), ""
		}
		return b.Name, ""
	case len(seg) == 3 && seg[0] == "namespaces":
		return seg[1], fmt.Sprintf("held=%s waiters=%s rate=%s burst=%s", num(b.Held), num(b.Waiters), num(b.Rate), num(b.Burst))
	case r.URL.Path == "/members":
		return "", "node " + num(b.ID)
	case len(seg) == 2 && seg[0] == "members":
		return "", "node " + seg[1]
	case len(seg) == 3 && seg[0] == "members":
		return "", "group " + seg[2]
	case len(seg) == 3 && seg[0] == "registry" && seg[1] == "clusters":
		return "", seg[2]
	case len(seg) == 3 && (seg[0] == "registry" || seg[0] == "moves"):
		return seg[1+boolInt(seg[0] == "registry")], ""
	}
	return "", ""
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// num is a JSON number field as text, 0 when absent, "?" when it is not
// a number.
func num(m json.RawMessage) string {
	if len(m) == 0 {
		return "0"
	}
	var n json.Number
	if json.Unmarshal(m, &n) != nil {
		return "?"
	}
	return n.String()
}

// auditActor names who asked r: a client certificate's subject, else the
// admin token (the endpoint has one token: its holder is not named
// further), else the open endpoint.
func auditActor(r *http.Request, token string) string {
	if r.TLS != nil && len(r.TLS.PeerCertificates) > 0 {
		return "cert:" + r.TLS.PeerCertificates[0].Subject.String()
	}
	if token != "" {
		return "admin token"
	}
	return "open endpoint"
}
