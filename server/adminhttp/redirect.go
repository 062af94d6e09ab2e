package adminhttp

import (
	"fmt"
	"net/http"
)

// redirectTo redirects r to node id's admin endpoint (307, so a POST
// stays a POST and keeps its body; HTTPS when Config.HTTPS says so). It
// reports false when id is this node, unknown, or has no admin address.
func (h *handler) redirectTo(w http.ResponseWriter, r *http.Request, id uint32) bool {
	addr := h.Node.AdminAddr(id)
	if addr == "" {
		return false
	}
	scheme := "http://"
	if h.HTTPS {
		scheme = "https://"
	}
	http.Redirect(w, r, scheme+addr+r.URL.RequestURI(), http.StatusTemporaryRedirect)
	return true
}

// redirectToSystemMaster answers a change that only group 0's master can
// propose (to the namespace table, the registry tables): a redirect to
// that node, or 503 naming it when its admin address is unknown.
func (h *handler) redirectToSystemMaster(w http.ResponseWriter, r *http.Request, table string) {
	m := h.Node.SystemMaster()
	if !h.redirectTo(w, r, m) {
		http.Error(w, fmt.Sprintf("this node does not master the %s (master: node %d); retry there", table, m), http.StatusServiceUnavailable)
	}
}
