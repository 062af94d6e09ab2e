package adminhttp

import (
	"log/slog"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/paxlock/paxlock/internal/adminguard"
)

// Config is what the admin endpoint's handler is built from.
type Config struct {
	// Node answers the endpoints.
	Node Node
	// Token is the admin token ("": the endpoint is open); PublicRead
	// serves the read-only reports without it (see Public).
	Token      string
	PublicRead bool
	// Hosts are the names the endpoint answers to (adminguard).
	Hosts adminguard.Hosts
	// HTTPS: the endpoint and its peers' are HTTPS (redirects name it).
	HTTPS bool
	// WriteTimeout is the admin write timeout a stream extends before
	// each write (0: none).
	WriteTimeout time.Duration
	// MemberChangeTimeout bounds one group's change of acceptors, and a
	// member change's wait for group 0's master.
	MemberChangeTimeout time.Duration
	// Done ends the streams (/events) when the node shuts down.
	Done <-chan struct{}
	// Metrics serves /metrics; Partition, when set, /debug/partition.
	Metrics   http.Handler
	Partition http.HandlerFunc
	// Log receives the changes made through the endpoint.
	Log *slog.Logger
	// Audit, when set, keeps the audit log of the changes made through
	// the endpoint and serves GET /audit (audit.go).
	Audit AuditNode
}

// handler serves the endpoints of one Config.
type handler struct {
	Config
}

// New returns the admin endpoint's handler: its routes behind the token
// (RequireToken) and adminguard's checks (JSON-only changes, Origin and
// Sec-Fetch-Site from this endpoint only, a Host that names it).
func New(cfg Config) http.Handler {
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	h := &handler{Config: cfg}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	mux.HandleFunc("/status", h.status)
	mux.HandleFunc("GET /{$}", consolePage)
	mux.HandleFunc("GET /console", consolePage)
	mux.HandleFunc("GET /console/{file}", consoleAsset)
	mux.HandleFunc("GET /cluster", h.cluster)
	mux.HandleFunc("GET /events", h.events)
	mux.HandleFunc("GET /cluster/locks/{ns}/{key...}", h.consoleInspect)
	mux.HandleFunc("POST /cluster/unlock", h.consoleUnlock)
	mux.HandleFunc("/namespaces", h.namespaces)
	h.registryRoutes(mux)
	mux.HandleFunc("GET /namespaces/quotas", h.quotas)
	mux.HandleFunc("GET /namespaces/{name}/quota", h.quota)
	mux.HandleFunc("PUT /namespaces/{name}/quota", h.quota)
	mux.HandleFunc("/locks/unlock", h.forceUnlock)
	mux.HandleFunc("GET /locks", h.listLocks)
	mux.HandleFunc("GET /locks/{ns}/{key...}", h.inspectKey)
	mux.HandleFunc("GET /clients", h.listClients)
	mux.HandleFunc("POST /drain", h.drain)
	mux.HandleFunc("/members", h.members)
	mux.HandleFunc("/backup", h.backup)
	mux.HandleFunc("GET /backup/image", h.image)
	mux.HandleFunc("DELETE /members/{id}", h.memberDelete)
	mux.HandleFunc("POST /members/groups/{g}", h.groupChange)
	mux.HandleFunc("DELETE /drain", h.undrain)
	h.moveRoutes(mux)
	mux.HandleFunc("GET /audit", h.auditRead)
	mux.HandleFunc("POST /audit", h.auditRelay)
	mux.HandleFunc("/healthz", healthz)
	mux.HandleFunc("/readyz", h.readyz)
	if cfg.Partition != nil {
		mux.HandleFunc("/debug/partition", cfg.Partition)
	}
	if cfg.Metrics != nil {
		mux.Handle("/metrics", cfg.Metrics)
	}
	return RequireToken(cfg.Token, cfg.PublicRead, adminguard.Wrap(cfg.Hosts, h.audited(mux)))
}
