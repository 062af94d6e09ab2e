package adminhttp

import (
	"net/http"

	"github.com/paxlock/paxlock/internal/adminguard"
)

// RequireToken wraps the admin endpoint's handler: with a token, every
// request but /healthz, /readyz and the console's page (which holds no
// data: its script asks for the token and sends it) — and, with public
// read, GET /status, /metrics, /namespaces, /cluster and /events — must
// carry "Authorization: Bearer <token>", or gets 401 with
// WWW-Authenticate.
func RequireToken(token string, publicRead bool, next http.Handler) http.Handler {
	return adminguard.RequireToken(token, func(r *http.Request) bool { return Public(r, publicRead) }, next)
}

// Public reports whether r may be served without the token.
func Public(r *http.Request, publicRead bool) bool {
	switch r.URL.Path {
	case "/healthz", "/readyz":
		return true
	case "/", "/console", "/console/index.html", "/console/console.js", "/console/locks.js", "/console/elections.js", "/console/console.css":
		return r.Method == http.MethodGet || r.Method == http.MethodHead
	case "/status", "/metrics", "/cluster", "/events":
		return publicRead
	case "/namespaces":
		return publicRead && (r.Method == http.MethodGet || r.Method == http.MethodHead)
	}
	return false
}
