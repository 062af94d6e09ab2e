package adminhttp

import (
	"bytes"
	"embed"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"path"
	"slices"
	"strconv"
	"time"

	"github.com/paxlock/paxlock/adminapi"
)

// The web console: a page (console/, embedded) that shows the whole
// cluster, and the JSON it reads, which the node serving the page
// gathers itself (Node.ClusterStatus), so that the browser talks to one
// origin with one certificate and sends the token (if any) to it only.

//go:embed console
var consoleFiles embed.FS

const (
	// consoleInterval is how often /events looks for a change.
	consoleInterval = time.Second
	// consoleHeartbeat is how often, at most, /events sends something
	// on an unchanged cluster, so that proxies and the page see it
	// alive; a write timeout under twice that brings it down to half the
	// timeout (heartbeat), as a proxy in front is often given the same.
	consoleHeartbeat = 15 * time.Second
)

// heartbeat is how long /events stays silent on an unchanged cluster:
// consoleHeartbeat, or half the write timeout when that is shorter, never
// under consoleInterval.
func heartbeat(writeTimeout time.Duration) time.Duration {
	d := consoleHeartbeat
	if writeTimeout > 0 && writeTimeout/2 < d {
		d = writeTimeout / 2
	}
	return max(d, consoleInterval)
}

// consolePage serves the console's page; consoleAsset its script and
// style sheet.
func consolePage(w http.ResponseWriter, _ *http.Request) {
	serveConsoleFile(w, "console/index.html")
}

func consoleAsset(w http.ResponseWriter, r *http.Request) {
	serveConsoleFile(w, "console/"+r.PathValue("file"))
}

func serveConsoleFile(w http.ResponseWriter, name string) {
	b, err := fs.ReadFile(consoleFiles, name)
	if err != nil {
		http.Error(w, "404 page not found", http.StatusNotFound)
		return
	}
	ct := "text/html; charset=utf-8"
	switch path.Ext(name) {
	case ".js":
		ct = "text/javascript; charset=utf-8"
	case ".css":
		ct = "text/css; charset=utf-8"
	}
	hd := w.Header()
	hd.Set("Content-Type", ct)
	hd.Set("Cache-Control", "no-cache")
	hd.Set("X-Content-Type-Options", "nosniff")
	// Everything comes from this origin; nothing may be framed.
	hd.Set("Content-Security-Policy", "default-src 'self'; frame-ancestors 'none'")
	_, _ = w.Write(b)
}

// cluster answers GET /cluster with the adminapi.ClusterStatus.
func (h *handler) cluster(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(h.Node.ClusterStatus(r.Context()))
}

// events streams the adminapi.ClusterStatus as server-sent events: one
// "status" event at once, then one whenever it changed (looked at every
// consoleInterval), and a comment line now and then on a quiet cluster.
// It ends with the request or when the node shuts down (Config.Done).
func (h *handler) events(rw http.ResponseWriter, r *http.Request) {
	w := NewStreamWriter(rw, h.WriteTimeout)
	hd := rw.Header()
	hd.Set("Content-Type", "text/event-stream")
	hd.Set("Cache-Control", "no-store")
	hd.Set("X-Accel-Buffering", "no")
	rw.WriteHeader(http.StatusOK)
	if err := w.Flush(); err != nil {
		return
	}
	tick := time.NewTicker(consoleInterval)
	defer tick.Stop()
	var last []byte
	quiet, silence := time.Now(), heartbeat(h.WriteTimeout)
	for {
		cs := h.Node.ClusterStatus(r.Context())
		b, err := json.Marshal(cs)
		if err != nil {
			return
		}
		at := cs.Time
		b2, err := json.Marshal(unmoving(cs))
		if err != nil {
			return
		}
		switch {
		case !bytes.Equal(b2, last):
			last = b2
			quiet = time.Now()
			_, err = fmt.Fprintf(w, "event: status\nid: %s\ndata: %s\n\n", strconv.FormatInt(at.UnixMilli(), 10), b)
		case time.Since(quiet) >= silence:
			quiet = time.Now()
			_, err = io.WriteString(w, ": quiet\n\n")
		}
		if err == nil {
			err = w.Flush()
		}
		if err != nil {
			return
		}
		select {
		case <-r.Context().Done():
			return
		case <-h.Done:
			return
		case <-tick.C:
		}
	}
}

// unmoving is cs without what moves on an unchanged cluster (the time,
// the nodes' uptimes), for /events to tell a change.
func unmoving(cs adminapi.ClusterStatus) adminapi.ClusterStatus {
	cs.Time = time.Time{}
	cs.Nodes = slices.Clone(cs.Nodes)
	for i := range cs.Nodes {
		cs.Nodes[i].UptimeMs = 0
	}
	return cs
}
