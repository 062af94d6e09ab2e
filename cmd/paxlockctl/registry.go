// This file is the commands on a meta cluster's registry tables: cluster
// list|add|remove, and namespace list|add|remove with -meta.

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"

	"github.com/paxlock/paxlock/adminapi"
)

const clusterUsage = "want cluster list|add NAME CLIENTS [ADMINS [CA_FILE]]|remove NAME (CLIENTS and ADMINS comma-separated host:port lists)"

func runCluster(ctx context.Context, o *options, p printer, _ string, args []string) error {
	switch {
	case len(args) == 1 && args[0] == "list":
	case len(args) >= 3 && len(args) <= 5 && args[0] == "add":
	case len(args) == 2 && args[0] == "remove":
	default:
		return fmt.Errorf("%w: %s", errUsage, clusterUsage)
	}
	ac, err := o.adminAPI()
	if err != nil {
		return err
	}
	return clusterCmd(ctx, p, ac, args)
}

// clusterCmd lists, adds (or changes) and removes the registry's clusters
// through the meta cluster's admin endpoints.
func clusterCmd(ctx context.Context, p printer, ac *adminClient, args []string) error {
	if args[0] == "list" {
		reg, err := fetchRegistry(ctx, ac)
		if err != nil {
			return err
		}
		return p.emit(clustersOutput{Clusters: reg.Clusters})
	}
	method, path, body := http.MethodDelete, "/registry/clusters/"+url.PathEscape(args[1]), []byte(nil)
	if args[0] == "add" {
		put := adminapi.RegistryClusterPut{Client: strings.Split(args[2], ",")}
		if len(args) > 3 && args[3] != "" {
			put.Admin = strings.Split(args[3], ",")
		}
		if len(args) > 4 {
			ca, err := os.ReadFile(args[4])
			if err != nil {
				return fmt.Errorf("cluster add: CA: %w", err)
			}
			put.CA = string(ca)
		}
		method = http.MethodPut
		body, _ = json.Marshal(put)
	}
	return registryChange(ctx, p, ac, "cluster", args, method, path, body)
}

// registryNamespaceCmd lists, adds (assigned to cluster; the secret goes
// to the meta node, which derives the verifier) and removes the
// registry's namespaces. args is already checked.
func registryNamespaceCmd(ctx context.Context, p printer, ac *adminClient, args []string, cluster, secret string) error {
	if args[0] == "list" {
		reg, err := fetchRegistry(ctx, ac)
		if err != nil {
			return err
		}
		return p.emit(assignmentsOutput{Namespaces: reg.Namespaces})
	}
	method, path, body := http.MethodDelete, "/registry/namespaces/"+url.PathEscape(args[1]), []byte(nil)
	if args[0] == "add" {
		method = http.MethodPut
		body, _ = json.Marshal(adminapi.RegistryNamespacePut{Cluster: cluster, Secret: secret})
	}
	return registryChange(ctx, p, ac, "namespace", args, method, path, body)
}

// registryChange sends one change and reports it.
func registryChange(ctx context.Context, p printer, ac *adminClient, what string, args []string, method, path string, body []byte) error {
	code, b, err := ac.change(ctx, method, path, body)
	switch {
	case err != nil:
		return fmt.Errorf("%s %s: %w", what, args[0], err)
	case code == http.StatusNoContent:
		return p.emit(registryChangeOutput{Kind: what, Name: args[1], Action: args[0], Done: true})
	}
	return fmt.Errorf("%s %s: HTTP %d: %s", what, args[0], code, strings.TrimSpace(string(b)))
}

// fetchRegistry reads the tables from the first node that answers, in
// pages of GET /registry, all of one version: it reads them again from
// the first page when the version changed between two pages, a few times
// at most.
func fetchRegistry(ctx context.Context, ac *adminClient) (adminapi.Registry, error) {
	const tries = 5
	var reg adminapi.Registry
	for range tries {
		var err error
		var same bool
		if reg, same, err = fetchRegistryOnce(ctx, ac); err != nil || same {
			return reg, err
		}
	}
	return reg, fmt.Errorf("registry: the tables changed while being read, %d times: try again", tries)
}

// fetchRegistryOnce reads every page once; same reports that they were
// all of one version.
func fetchRegistryOnce(ctx context.Context, ac *adminClient) (reg adminapi.Registry, same bool, err error) {
	after := ""
	for first := true; first || after != ""; first = false {
		code, b, err := ac.change(ctx, http.MethodGet, "/registry?limit="+strconv.Itoa(adminapi.RegistryPageLimit)+"&after="+url.QueryEscape(after), nil)
		switch {
		case err != nil:
			return reg, false, fmt.Errorf("registry: %w", err)
		case code != http.StatusOK:
			return reg, false, fmt.Errorf("registry: HTTP %d: %s", code, strings.TrimSpace(string(b)))
		}
		var page adminapi.Registry
		if err := json.Unmarshal(b, &page); err != nil {
			return reg, false, fmt.Errorf("registry: %w", err)
		}
		if !first && page.Version != reg.Version {
			return reg, false, nil
		}
		reg.Version = page.Version
		reg.Clusters = append(reg.Clusters, page.Clusters...)
		reg.Namespaces = append(reg.Namespaces, page.Namespaces...)
		reg.Moves = append(reg.Moves, page.Moves...)
		if page.Next != "" && page.Next == after {
			return reg, false, fmt.Errorf("registry: page cursor %q does not advance past %q", page.Next, after)
		}
		after = page.Next
	}
	return reg, true, nil
}

// clustersOutput is cluster list's output.
type clustersOutput struct {
	Clusters []adminapi.RegistryCluster `json:"clusters"`
}

func (o clustersOutput) table(w io.Writer) error {
	for _, c := range o.Clusters {
		if _, err := fmt.Fprintf(w, "%s\tclient=%s\tadmin=%s\n", c.Name, strings.Join(c.Client, ","), strings.Join(c.Admin, ",")); err != nil {
			return err
		}
	}
	return nil
}

// assignmentsOutput is namespace list -meta's output.
type assignmentsOutput struct {
	Namespaces []adminapi.RegistryNamespace `json:"namespaces"`
}

func (o assignmentsOutput) table(w io.Writer) error {
	for _, n := range o.Namespaces {
		if _, err := fmt.Fprintf(w, "%s\t%s\tepoch %d\n", n.Name, n.Cluster, n.Epoch); err != nil {
			return err
		}
	}
	return nil
}

// registryChangeOutput is the output of a change of the registry tables.
type registryChangeOutput struct {
	Kind   string `json:"kind"` // cluster or namespace
	Name   string `json:"name"`
	Action string `json:"action"` // add or remove
	Done   bool   `json:"done"`
}

func (o registryChangeOutput) table(w io.Writer) error {
	_, err := fmt.Fprintf(w, "%s %s: %s done\n", o.Kind, o.Name, o.Action)
	return err
}
