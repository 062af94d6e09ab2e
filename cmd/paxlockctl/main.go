// Command paxlockctl inspects and uses a paxlock cluster.
//
//	paxlockctl version
//	paxlockctl [-admin host:port,...] [-admin-ca FILE] [-admin-token-file FILE] status|wait
//	paxlockctl [-admin host:port,...] [-admin-ca FILE] [-admin-token-file FILE] namespace list|add NAME SECRET|remove NAME
//	paxlockctl [-out DIR] [-cluster NAME] [-nodes N] [-hosts H,...] certs
//	paxlockctl [-registry host:port,...] [-ca FILE] [-namespace N -secret S] lock KEY [HOLD]
//	paxlockctl [-registry host:port,...] [-ca FILE] [-namespace N -secret S] state KEY
//
// lock takes KEY (waiting in the server's queue if it is held), prints the
// fencing token, holds it for HOLD (default 5s) and releases it. state
// prints who holds KEY. Both authenticate with SCRAM-SHA-256 (the secret
// never crosses the network); with -ca they connect with TLS, verifying
// the nodes against that CA, and -registry must then list the nodes'
// client_tls_addr addresses.
//
// The admin commands speak HTTPS, verifying the nodes against the CA in
// -admin-ca, when that is set, and plain HTTP otherwise; they send the
// bearer token from the environment variable PAXLOCK_ADMIN_TOKEN, or else
// from -admin-token-file (never from the command line). When neither
// -admin-ca nor -admin-token-file is given and .run/certs/ (the
// development files of make run) holds ca.crt and admin.token, those are
// used; give either flag (even empty, -admin-ca "") to turn that off.
//
// certs writes a development CA, a certificate and key per node (named
// paxlock://CLUSTER/node/ID, with the -hosts for HTTPS), an admin token
// and a gossip key into -out (default .run/certs); it never overwrites a
// file.
//
// version prints the module version, VCS revision and time, and Go
// version paxlockctl was built from. wait returns once every group has a serving master (or fails after a
// minute). status asks every node's admin endpoint for its report and prints the
// members, which node masters each group, and lock counts per group.
package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/paxlock/paxlock/client"
	"github.com/paxlock/paxlock/internal/buildinfo"
	"github.com/paxlock/paxlock/internal/pki"
	"github.com/paxlock/paxlock/server"
)

func main() {
	admin := flag.String("admin", "127.0.0.1:7301,127.0.0.1:7302,127.0.0.1:7303", "comma-separated admin addresses of the nodes")
	registry := flag.String("registry", "127.0.0.1:7101,127.0.0.1:7102,127.0.0.1:7103", "comma-separated client addresses of the nodes")
	ns := flag.String("namespace", "default", "namespace")
	secret := flag.String("secret", "paxlock", "namespace secret")
	clientCA := flag.String("ca", "", "lock, state: CA certificate (PEM) to verify the nodes' TLS client listeners with; set, the client connects with TLS and -registry must list client_tls_addr addresses (make run: .run/certs/ca.crt, ports 7111-7113)")
	adminCA := flag.String("admin-ca", "", "CA certificate (PEM) to verify the admin endpoints' HTTPS with; unset: plain HTTP (see the doc for the .run/certs default)")
	tokenFile := flag.String("admin-token-file", "", "file holding the admin bearer token (PAXLOCK_ADMIN_TOKEN takes precedence)")
	out := flag.String("out", devCertsDir, "certs: directory to write into")
	cluster := flag.String("cluster", "paxlock", "certs: cluster name (the nodes' cluster_name)")
	nodes := flag.Int("nodes", 3, "certs: node certificates to issue (ids 1..N)")
	hosts := flag.String("hosts", "127.0.0.1,localhost", "certs: comma-separated host names and IPs the node certificates carry for HTTPS")
	flag.Usage = func() {
		fmt.Fprintf(os.Stderr, "usage: paxlockctl [flags] version|status|wait|namespace list|add NAME SECRET|remove NAME|lock KEY [HOLD]|state KEY|certs\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() < 1 {
		flag.Usage()
		os.Exit(2)
	}
	var err error
	adm := func() *adminClient {
		explicit := false // -admin-ca or -admin-token-file given, even empty: no defaults
		flag.Visit(func(f *flag.Flag) { explicit = explicit || f.Name == "admin-ca" || f.Name == "admin-token-file" })
		a, aerr := newAdminClient(strings.Split(*admin, ","), *adminCA, *tokenFile, explicit)
		if aerr != nil {
			fmt.Fprintln(os.Stderr, "paxlockctl:", aerr)
			os.Exit(1)
		}
		return a
	}
	switch flag.Arg(0) {
	case "version":
		fmt.Println(buildinfo.Line("paxlockctl"))
	case "certs":
		err = certsCmd(*out, *cluster, *nodes, strings.Split(*hosts, ","))
	case "status":
		err = status(adm())
	case "wait":
		err = wait(adm(), 60*time.Second)
	case "namespace":
		err = namespaceCmd(adm(), flag.Args()[1:])
	case "lock", "state":
		if flag.NArg() < 2 {
			flag.Usage()
			os.Exit(2)
		}
		err = lockCmd(strings.Split(*registry, ","), *ns, *secret, *clientCA, flag.Args())
	default:
		flag.Usage()
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "paxlockctl:", err)
		os.Exit(1)
	}
}

func (a *adminClient) fetchStatus(addr string) (server.Status, error) {
	var st server.Status
	req, err := a.request(http.MethodGet, addr, "/status", nil)
	if err != nil {
		return st, err
	}
	resp, err := a.do(req, 3*time.Second)
	if err != nil {
		return st, err
	}
	defer func() { _ = resp.Body.Close() }() // read to the end or abandoned: nothing to report
	if resp.StatusCode != http.StatusOK {
		return st, fmt.Errorf("%s: %s", addr, resp.Status)
	}
	return st, json.NewDecoder(resp.Body).Decode(&st)
}

func status(ac *adminClient) error {
	var reports []server.Status
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tCLIENT\tADMIN\tHEALTH\tMASTERS\tCONNS")
	for _, a := range ac.addrs {
		st, err := ac.fetchStatus(a)
		if err != nil {
			fmt.Fprintf(tw, "?\t?\t%s\tdown (%v)\t\t\n", a, err)
			continue
		}
		n := 0
		for _, g := range st.Groups {
			if g.Serving {
				n++
			}
		}
		health := "up"
		if st.StorageFailed {
			health = "storage failed: " + st.StorageError
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d\t%d\n", st.Node, st.Client, a, health, n, st.Conns)
		reports = append(reports, st)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(reports) == 0 {
		return fmt.Errorf("no node answered")
	}
	fmt.Println()
	tw = tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "GROUP\tMASTER\tEPOCH\tAPPLIED\tLOCKS")
	for g := range reports[0].Groups {
		master, epoch, applied, locks := uint32(0), uint64(0), uint64(0), int64(0)
		for _, r := range reports {
			gs := r.Groups[g]
			if gs.Serving {
				master, locks = r.Node, gs.Locks
			}
			epoch = max(epoch, gs.Epoch)
			applied = max(applied, gs.Applied)
		}
		m := "none"
		if master != 0 {
			m = fmt.Sprint(master)
		}
		fmt.Fprintf(tw, "%d\t%s\t%d\t%d\t%d\n", g, m, epoch, applied, locks)
	}
	return tw.Flush()
}

// wait polls the nodes' admin endpoints until every group has a serving
// master.
func wait(ac *adminClient, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		serving := map[int]bool{}
		groups := 0
		for _, a := range ac.addrs {
			st, err := ac.fetchStatus(a)
			if err != nil {
				continue
			}
			groups = len(st.Groups)
			for _, g := range st.Groups {
				if g.Serving {
					serving[g.Group] = true
				}
			}
		}
		if groups > 0 && len(serving) == groups {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("after %v, %d of %d groups have a master", limit, len(serving), groups)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func lockCmd(registry []string, ns, secret, caFile string, args []string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cfg := client.Config{Registry: registry, Namespace: ns, Secret: secret}
	if caFile != "" {
		pool, err := pki.LoadCAPool(caFile)
		if err != nil {
			return err
		}
		cfg.TLS = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	c, err := client.New(ctx, cfg)
	if err != nil {
		return err
	}
	defer func() { _ = c.Close() }() // the command's own result is what it reports
	key := args[1]
	if args[0] == "state" {
		st, err := c.State(ctx, key)
		if err != nil {
			return err
		}
		if !st.Held {
			fmt.Printf("%s: free (%d waiting)\n", key, st.QueueLen)
			return nil
		}
		fmt.Printf("%s: held by %s, token %d, %s left, %d waiting\n", key, st.Holder, st.Token, st.TTLLeft.Round(time.Millisecond), st.QueueLen)
		return nil
	}
	hold := 5 * time.Second
	if len(args) > 2 {
		if hold, err = time.ParseDuration(args[2]); err != nil {
			return fmt.Errorf("hold: %w", err)
		}
	}
	m := c.Mutex(key, client.TTL(max(hold+5*time.Second, 10*time.Second)), client.AutoRenew())
	start := time.Now()
	if err := m.Lock(ctx); err != nil {
		return err
	}
	fmt.Printf("locked %s after %s, fencing token %d; holding for %s\n", key, time.Since(start).Round(time.Millisecond), m.Token(), hold)
	select {
	case <-time.After(hold):
	case <-m.Lost():
		return fmt.Errorf("lock on %s lost", key)
	}
	if err := m.Unlock(ctx); err != nil {
		return err
	}
	fmt.Printf("released %s\n", key)
	return nil
}

// namespaceCmd lists, adds or removes namespaces through any node's admin
// endpoint (a node that cannot make the change redirects to one that can).
func namespaceCmd(ac *adminClient, args []string) error {
	if len(args) == 0 {
		return fmt.Errorf("namespace: want list, add NAME SECRET or remove NAME")
	}
	var lastErr error
	for _, a := range ac.addrs {
		var req *http.Request
		var err error
		switch {
		case args[0] == "list":
			req, err = ac.request(http.MethodGet, a, "/namespaces", nil)
		case args[0] == "add" && len(args) == 3:
			body, _ := json.Marshal(map[string]string{"name": args[1], "secret": args[2]})
			req, err = ac.request(http.MethodPost, a, "/namespaces", bytes.NewReader(body))
		case args[0] == "remove" && len(args) == 2:
			req, err = ac.request(http.MethodDelete, a, "/namespaces?name="+url.QueryEscape(args[1]), nil)
		default:
			return fmt.Errorf("namespace: want list, add NAME SECRET or remove NAME")
		}
		if err != nil {
			return err
		}
		resp, err := ac.do(req, 15*time.Second)
		if err != nil {
			lastErr = err
			continue
		}
		b, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close() // read to the end: nothing to report
		switch {
		case resp.StatusCode == http.StatusOK && args[0] == "list":
			var names []string
			if err := json.Unmarshal(b, &names); err != nil {
				return err
			}
			for _, n := range names {
				fmt.Println(n)
			}
			return nil
		case resp.StatusCode == http.StatusNoContent:
			fmt.Printf("namespace %s: %s done\n", args[1], args[0])
			return nil
		case resp.StatusCode == http.StatusServiceUnavailable:
			lastErr = fmt.Errorf("%s: %s", a, strings.TrimSpace(string(b)))
			continue
		default:
			return fmt.Errorf("%s: %s: %s", a, resp.Status, strings.TrimSpace(string(b)))
		}
	}
	return fmt.Errorf("namespace %s: no node could do it: %w", args[0], lastErr)
}
