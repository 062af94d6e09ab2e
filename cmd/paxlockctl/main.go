// Command paxlockctl inspects and uses a paxlock cluster.
//
//	paxlockctl [-admin host:port,...] status|wait
//
// wait returns once every group has a serving master (or fails after a
// minute). status asks every node's admin endpoint for its report and prints the
// members, which node masters each group, and lock counts per group.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/paxlock/paxlock/server"
)

func main() {
	admin := flag.String("admin", "127.0.0.1:7301,127.0.0.1:7302,127.0.0.1:7303", "comma-separated admin addresses of the nodes")
	flag.Usage = func() {
		fmt.Fprintf(os.Stderr, "usage: paxlockctl [flags] status|wait\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() < 1 {
		flag.Usage()
		os.Exit(2)
	}
	var err error
	switch flag.Arg(0) {
	case "status":
		err = status(strings.Split(*admin, ","))
	case "wait":
		err = wait(strings.Split(*admin, ","), 60*time.Second)
	default:
		flag.Usage()
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "paxlockctl:", err)
		os.Exit(1)
	}
}

func fetchStatus(addr string) (server.Status, error) {
	var st server.Status
	cl := http.Client{Timeout: 3 * time.Second}
	resp, err := cl.Get("http://" + addr + "/status")
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return st, fmt.Errorf("%s: %s", addr, resp.Status)
	}
	return st, json.NewDecoder(resp.Body).Decode(&st)
}

func status(addrs []string) error {
	var reports []server.Status
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tCLIENT\tADMIN\tHEALTH\tMASTERS\tCONNS")
	for _, a := range addrs {
		st, err := fetchStatus(a)
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
		fmt.Fprintf(tw, "%d\t%s\t%s\tup\t%d\t%d\n", st.Node, st.Client, a, n, st.Conns)
		reports = append(reports, st)
	}
	tw.Flush()
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
func wait(addrs []string, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		serving := map[int]bool{}
		groups := 0
		for _, a := range addrs {
			st, err := fetchStatus(a)
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
