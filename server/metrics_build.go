package server

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/paxlock/paxlock/internal/buildinfo"
)

// buildInfoGauge is paxlock_build_info: 1, labelled with the build the
// node runs (version, VCS revision, Go version), the convention that lets
// a dashboard join any series to the version that produced it. A binary
// without build information reports version "unknown".
func buildInfoGauge() prometheus.Collector {
	in, ok := buildinfo.Current()
	version := in.Version
	if !ok || version == "" {
		version = "unknown"
	}
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "paxlock_build_info",
		Help: "Always 1; its labels are the build this node runs: the module version, the VCS revision (commit, empty when built without one) and the Go version.",
	}, []string{"version", "commit", "go"})
	g.WithLabelValues(version, in.Revision, in.GoVersion).Set(1)
	return g
}
