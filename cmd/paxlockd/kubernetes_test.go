package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/paxlock/paxlock/internal/pki"
	"github.com/paxlock/paxlock/server"
)

// k8sDir holds the Kubernetes manifests.
const k8sDir = "../../deploy/kubernetes"

// k8sObjects reads every manifest the kustomization lists, keyed by
// kind/name.
func k8sObjects(t *testing.T) map[string]map[string]any {
	t.Helper()
	var kust struct {
		Namespace string   `yaml:"namespace"`
		Resources []string `yaml:"resources"`
	}
	readYAML(t, filepath.Join(k8sDir, "kustomization.yaml"), &kust)
	if kust.Namespace == "" || len(kust.Resources) == 0 {
		t.Fatalf("kustomization.yaml: namespace %q, resources %v", kust.Namespace, kust.Resources)
	}
	objs := map[string]map[string]any{}
	for _, r := range kust.Resources {
		b, err := os.ReadFile(filepath.Join(k8sDir, r))
		if err != nil {
			t.Fatal(err)
		}
		dec := yaml.NewDecoder(bytes.NewReader(b))
		for {
			var o map[string]any
			if err := dec.Decode(&o); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Fatalf("%s: %v", r, err)
			}
			key := fmt.Sprintf("%s/%s", o["kind"], dig(t, o, "metadata", "name"))
			if _, dup := objs[key]; dup {
				t.Fatalf("%s defined twice", key)
			}
			objs[key] = o
		}
	}
	objs["Kustomization/"] = map[string]any{"namespace": kust.Namespace}
	return objs
}

func readYAML(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// dig walks maps and lists (by index) of a decoded manifest.
func dig(t *testing.T, v any, path ...any) any {
	t.Helper()
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, ok := v.(map[string]any)
			if !ok {
				t.Fatalf("manifest: %v: not a map at %q", path, k)
			}
			v = m[k]
		case int:
			l, ok := v.([]any)
			if !ok || k >= len(l) {
				t.Fatalf("manifest: %v: no item %d", path, k)
			}
			v = l[k]
		}
	}
	return v
}

func str(t *testing.T, v any, path ...any) string {
	t.Helper()
	s, _ := dig(t, v, path...).(string)
	return s
}

// TestKubernetesManifests checks the StatefulSet's contract with the node
// (pods started in parallel, DNS names published before readiness,
// probes on the admin port, the PodDisruptionBudget keeping a quorum),
// then renders each pod's configuration — the ConfigMap's file with the
// pod's flags and host name, the Secret's certificates generated for the
// pods' names — and checks it with paxlockd -check-config as the pod
// would start. A pod whose ordinal has no entry in the nodes list is
// refused.
func TestKubernetesManifests(t *testing.T) {
	objs := k8sObjects(t)
	ns := str(t, objs["Kustomization/"], "namespace")
	sts, ok := objs["StatefulSet/paxlock"]
	if !ok {
		t.Fatal("no StatefulSet paxlock")
	}
	if p := str(t, sts, "spec", "podManagementPolicy"); p != "Parallel" {
		t.Errorf("podManagementPolicy %q, want Parallel (no pod is ready before a quorum runs)", p)
	}
	svcName := str(t, sts, "spec", "serviceName")
	svc, ok := objs["Service/"+svcName]
	if !ok {
		t.Fatalf("the StatefulSet's serviceName %q names no Service", svcName)
	}
	if str(t, svc, "spec", "clusterIP") != "None" || dig(t, svc, "spec", "publishNotReadyAddresses") != true {
		t.Errorf("Service %s: want headless (clusterIP None) with publishNotReadyAddresses", svcName)
	}
	labels, _ := dig(t, sts, "spec", "template", "metadata", "labels").(map[string]any)
	for _, sel := range []any{dig(t, svc, "spec", "selector"), dig(t, objs["PodDisruptionBudget/paxlock"], "spec", "selector", "matchLabels")} {
		for k, v := range sel.(map[string]any) {
			if labels[k] != v {
				t.Errorf("selector %v does not match the pods' labels %v", sel, labels)
			}
		}
	}
	replicas, _ := dig(t, sts, "spec", "replicas").(int)
	if mu, _ := dig(t, objs["PodDisruptionBudget/paxlock"], "spec", "maxUnavailable").(int); mu < 1 || replicas-mu <= replicas/2 {
		t.Errorf("PodDisruptionBudget maxUnavailable %d of %d pods: a quorum must stay", mu, replicas)
	}
	c := dig(t, sts, "spec", "template", "spec", "containers", 0)
	for probe, path := range map[string]string{"livenessProbe": "/healthz", "readinessProbe": "/readyz", "startupProbe": "/healthz"} {
		if got := str(t, c, probe, "httpGet", "path"); got != path || str(t, c, probe, "httpGet", "port") != "admin" {
			t.Errorf("%s: path %q on port %q, want %s on admin", probe, got, str(t, c, probe, "httpGet", "port"), path)
		}
	}

	// The files each pod sees.
	mounts := map[string]string{} // volume name → mount path
	for _, m := range dig(t, c, "volumeMounts").([]any) {
		mounts[str(t, m, "name")] = str(t, m, "mountPath")
	}
	var args []string
	for _, a := range dig(t, c, "args").([]any) {
		args = append(args, a.(string))
	}
	i := slices.Index(args, "-config")
	if i < 0 || i+1 >= len(args) || args[i+1] != mounts["config"] {
		t.Fatalf("args %q: -config must name the ConfigMap's mount %q", args, mounts["config"])
	}
	cmName := str(t, objs["StatefulSet/paxlock"], "spec", "template", "spec", "volumes", 0, "configMap", "name")
	conf := str(t, objs["ConfigMap/"+cmName], "data", filepath.Base(mounts["config"]))
	if conf == "" {
		t.Fatalf("ConfigMap %s has no %s", cmName, filepath.Base(mounts["config"]))
	}
	var cfg server.Config
	if err := server.DecodeStrict([]byte(conf), &cfg); err != nil {
		t.Fatalf("the ConfigMap's configuration: %v", err)
	}
	if len(cfg.Nodes) != replicas {
		t.Fatalf("%d nodes in the configuration, %d replicas", len(cfg.Nodes), replicas)
	}
	var hosts []string
	for j, n := range cfg.Nodes {
		want := fmt.Sprintf("paxlock-%d.%s.%s.svc.cluster.local", j, svcName, ns)
		if n.ID != uint32(j+1) || !strings.HasPrefix(n.Peer, want+":") || !strings.HasPrefix(n.Client, want+":") {
			t.Errorf("node %d: %+v, want id %d on %s (the pod's DNS name)", j, n, j+1, want)
		}
		hosts = append(hosts, want)
	}

	dir := t.TempDir()
	certs := filepath.Join(dir, "certs")
	if _, err := pki.WriteDev(certs, pki.DevOptions{Cluster: "paxlock", Nodes: replicas, Hosts: hosts}); err != nil {
		t.Fatal(err)
	}
	rendered := strings.ReplaceAll(conf, mounts["certs"], certs)
	rendered = strings.ReplaceAll(rendered, mounts["data"], filepath.Join(dir, "data"))
	path := filepath.Join(dir, "paxlockd.json")
	if err := os.WriteFile(path, []byte(rendered), 0o600); err != nil {
		t.Fatal(err)
	}
	check := slices.Clone(args)
	check[i], check[i+1] = "-check-config", path
	for ord := 0; ord <= replicas; ord++ {
		host := fmt.Sprintf("%s-%d", str(t, sts, "metadata", "name"), ord)
		t.Run(host, func(t *testing.T) {
			t.Setenv("HOSTNAME", host)
			code, out := runPaxlockd(t, check...)
			switch {
			case ord < replicas && code != 0:
				t.Fatalf("pod %s: paxlockd %q exit %d: %s", host, check, code, out)
			case ord == replicas && code == 0:
				t.Fatalf("pod %s, beyond the nodes list: paxlockd -check-config accepted it: %s", host, out)
			}
		})
	}
}

func TestIDFromHostname(t *testing.T) {
	for host, want := range map[string]uint32{"paxlock-0": 1, "paxlock-2": 3, "lock-svc-10.paxlock.ns.svc": 11} {
		if got, err := idFromHostname(host); err != nil || got != want {
			t.Errorf("idFromHostname(%q) = %d, %v; want %d", host, got, err, want)
		}
	}
	for _, bad := range []string{"paxlock", "paxlock-", "paxlock-x", "-", "paxlock-99999999999"} {
		if _, err := idFromHostname(bad); err == nil {
			t.Errorf("idFromHostname(%q): no error", bad)
		}
	}
}
