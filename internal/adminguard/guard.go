// Package adminguard keeps web pages an operator opens from using an
// admin HTTP endpoint (a node's or a registry's) through the operator's
// browser: cross-site request forgery and DNS rebinding.
//
// Wrap refuses, before any handler or token check runs:
//   - a request whose Host is not a name the endpoint is known by (403):
//     a page served from a rebound DNS name reaches the endpoint under
//     that name, so its same-origin reads (GET /backup) are refused;
//   - a request whose Origin names another host, or whose Sec-Fetch-Site
//     is cross-site or same-site (403): another origin's page, another
//     port on the same host included, may neither change nor read;
//     top-level navigations (a link to the console) pass;
//   - a changing request (POST, PUT, DELETE, PATCH) whose Content-Type is
//     not application/json (415): no CORS-simple request (a form, a
//     text/plain fetch) can change anything, and a JSON one from another
//     origin needs a preflight the endpoint never answers.
//
// /healthz and /readyz pass untouched: probes name the endpoint by
// whatever address they reach it at.
package adminguard

import (
	"crypto/subtle"
	"encoding/json"
	"mime"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
)

// AnyHost in an allowed host list lets every Host through (the DNS
// rebinding check is off; Origin, Sec-Fetch-Site and Content-Type are
// still checked).
const AnyHost = "*"

// Hosts decides whether a request's Host names the endpoint. IP
// literals, localhost and *.localhost are always allowed; Static names
// the endpoint's configured names (its listen address's host, its
// advertised addresses' hosts, an operator's list, which may hold
// AnyHost); Dynamic, if set, is asked for other names (a cluster's
// current members).
type Hosts struct {
	Static  []string
	Dynamic func(host string) bool
}

// normHost lowercases a host name and drops a trailing dot.
func normHost(h string) string { return strings.TrimSuffix(strings.ToLower(h), ".") }

// HostOf returns the host part of addr (host:port, [v6]:port, a bare
// host, or a URL), lowercased; "" for an unspecified one (":9101",
// "0.0.0.0").
func HostOf(addr string) string {
	if strings.Contains(addr, "://") {
		if u, err := url.Parse(addr); err == nil {
			addr = u.Host
		}
	}
	h := addr
	if hh, _, err := net.SplitHostPort(addr); err == nil {
		h = hh
	}
	h = normHost(strings.Trim(h, "[]"))
	if ip, err := netip.ParseAddr(h); err == nil && ip.IsUnspecified() {
		return ""
	}
	return h
}

// allowed reports whether host (from a Host header) names the endpoint.
func (hs Hosts) allowed(hostport string) bool {
	h := HostOf(hostport)
	if h == "" {
		return false
	}
	if _, err := netip.ParseAddr(h); err == nil {
		return true
	}
	if h == "localhost" || strings.HasSuffix(h, ".localhost") {
		return true
	}
	for _, s := range hs.Static {
		if s == AnyHost || normHost(s) == h {
			return true
		}
	}
	return hs.Dynamic != nil && hs.Dynamic(h)
}

// Error is the JSON body of a refusal.
type Error struct {
	Error string `json:"error"`
}

func refuse(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(Error{Error: msg})
}

// Changing reports whether method changes state (and so must carry a
// JSON body type).
func Changing(method string) bool {
	switch method {
	case http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodPatch:
		return true
	}
	return false
}

// Wrap returns next behind the checks the package comment lists.
func Wrap(hosts Hosts, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" || r.URL.Path == "/readyz" {
			next.ServeHTTP(w, r)
			return
		}
		if !hosts.allowed(r.Host) {
			refuse(w, http.StatusForbidden, "forbidden: Host "+r.Host+" does not name this admin endpoint (add it to admin_allowed_hosts)")
			return
		}
		if msg := crossSite(r); msg != "" {
			refuse(w, http.StatusForbidden, "forbidden: "+msg)
			return
		}
		if Changing(r.Method) {
			mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
			if err != nil || mt != "application/json" {
				refuse(w, http.StatusUnsupportedMediaType, "unsupported media type: a "+r.Method+" must carry Content-Type: application/json (with or without a body)")
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// crossSite returns why r comes from another origin's page ("" when it
// does not): an Origin other than the request's own host, or a
// Sec-Fetch-Site other than same-origin or none. A GET or HEAD that is a
// top-level navigation passes (the browser shows the answer to the
// operator, not to the page that linked it).
func crossSite(r *http.Request) string {
	if (r.Method == http.MethodGet || r.Method == http.MethodHead) && r.Header.Get("Sec-Fetch-Mode") == "navigate" {
		return ""
	}
	if o := r.Header.Get("Origin"); o != "" {
		u, err := url.Parse(o)
		if err != nil || u.Host == "" || !strings.EqualFold(u.Host, r.Host) {
			return "Origin " + o + " is not this endpoint's"
		}
	}
	switch s := r.Header.Get("Sec-Fetch-Site"); s {
	case "", "same-origin", "none":
	default:
		return "Sec-Fetch-Site " + s + ": only same-origin requests are served"
	}
	return ""
}

// RequireToken wraps next so that a request must carry
// "Authorization: Bearer <token>" (compared in constant time), or gets
// 401 with a WWW-Authenticate challenge; public, if set, names the
// requests served without it. token "" returns next unchanged (an open
// endpoint).
func RequireToken(token string, public func(*http.Request) bool, next http.Handler) http.Handler {
	if token == "" {
		return next
	}
	want := []byte(token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if public != nil && public(r) {
			next.ServeHTTP(w, r)
			return
		}
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || subtle.ConstantTimeCompare([]byte(got), want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="paxlock admin"`)
			http.Error(w, "unauthorized: send Authorization: Bearer <admin token>", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}
