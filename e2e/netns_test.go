package e2e

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
)

// The chaos suite's network: each node runs in its own network namespace
// with its own address, so a partition is a packet filter between two
// hosts rather than a switch inside paxlockd.
//
//	test process (this namespace): pxchaos0 10.231.0.1/24
//	        │ veth
//	pxchaos-hub: bridge br0 ── veth ── pxchaos-n<i>: eth0 10.231.0.1<i>/24
//
// The bridge lives in a namespace of its own (pxchaos-hub) rather than in
// the host's: the host may filter bridged traffic (Docker sets the FORWARD
// policy to DROP and enables bridge-nf-call-iptables), and the hub's fresh
// tables accept everything. Nothing but the pxchaos0 veth is created in
// the host's namespace, and it disappears with the hub. Partitions are
// iptables rules in the INPUT chain of a node's namespace (dropping what
// it receives from one address: one-way; both sides: symmetric), gone with
// the namespace. All names start with pxchaos, so leftovers of a run that
// was killed are found and removed at the start of the next.
const (
	netPrefix = "pxchaos-"
	hubNS     = netPrefix + "hub"
	hostVeth  = "pxchaos0"
	netBase   = "10.231.0."
	hostIP    = netBase + "1"
)

// netLab is the namespaces of one schedule's nodes.
type netLab struct {
	n int
}

// nodeNS returns node i's namespace (nodes count from 1).
func nodeNS(i int) string { return netPrefix + "n" + strconv.Itoa(i) }

// nodeIP returns node i's address.
func nodeIP(i int) string { return netBase + strconv.Itoa(10+i) }

func run(name string, args ...string) error {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// netnsUsable says why network namespaces cannot be used here, or nil.
func netnsUsable() error {
	if os.Geteuid() != 0 {
		return errors.New("the chaos suite needs root: it creates network namespaces, veth pairs, a bridge and iptables rules")
	}
	for _, tool := range []string{"ip", "iptables"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("the chaos suite needs %s (iproute2, iptables): %w", tool, err)
		}
	}
	probe := netPrefix + "probe"
	if err := run("ip", "netns", "add", probe); err != nil {
		return fmt.Errorf("cannot create a network namespace: %w", err)
	}
	defer func() { _ = run("ip", "netns", "del", probe) }() // cleanNet removes it otherwise
	if err := run("ip", "netns", "exec", probe, "iptables", "-A", "INPUT", "-s", hostIP, "-j", "DROP"); err != nil {
		return fmt.Errorf("cannot add an iptables rule in a network namespace: %w", err)
	}
	return nil
}

// cleanNet removes everything named pxchaos: it kills the processes left
// in such namespaces, deletes the namespaces and the host's veth.
func cleanNet() error {
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		return fmt.Errorf("ip netns list: %w", err)
	}
	var errs []error
	for _, line := range strings.Split(string(out), "\n") {
		name, _, _ := strings.Cut(strings.TrimSpace(line), " ")
		if !strings.HasPrefix(name, netPrefix) {
			continue
		}
		pids, _ := exec.Command("ip", "netns", "pids", name).Output()
		for _, f := range strings.Fields(string(pids)) {
			if pid, err := strconv.Atoi(f); err == nil {
				// It may be gone already; ip netns del follows either way.
				_ = syscall.Kill(pid, syscall.SIGCONT)
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		if err := run("ip", "netns", "del", name); err != nil {
			errs = append(errs, err)
		}
	}
	// Deleting the hub frees the veth asynchronously; do not wait for it.
	if exec.Command("ip", "link", "show", hostVeth).Run() == nil {
		if err := run("ip", "link", "del", hostVeth); err != nil && exec.Command("ip", "link", "show", hostVeth).Run() == nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// newNetLab creates the hub, the host's link to it, and n node namespaces.
func newNetLab(n int) (*netLab, error) {
	steps := [][]string{
		{"ip", "netns", "add", hubNS},
		{"ip", "-n", hubNS, "link", "set", "lo", "up"},
		{"ip", "-n", hubNS, "link", "add", "br0", "type", "bridge"},
		{"ip", "-n", hubNS, "link", "set", "br0", "up"},
		{"ip", "link", "add", hostVeth, "type", "veth", "peer", "name", "host", "netns", hubNS},
		{"ip", "-n", hubNS, "link", "set", "host", "master", "br0", "up"},
		{"ip", "addr", "add", hostIP + "/24", "dev", hostVeth},
		{"ip", "link", "set", hostVeth, "up"},
	}
	for i := 1; i <= n; i++ {
		ns, hubEnd := nodeNS(i), "n"+strconv.Itoa(i)
		steps = append(steps,
			[]string{"ip", "netns", "add", ns},
			[]string{"ip", "-n", ns, "link", "set", "lo", "up"},
			[]string{"ip", "-n", hubNS, "link", "add", hubEnd, "type", "veth", "peer", "name", "eth0", "netns", ns},
			[]string{"ip", "-n", hubNS, "link", "set", hubEnd, "master", "br0", "up"},
			[]string{"ip", "-n", ns, "addr", "add", nodeIP(i) + "/24", "dev", "eth0"},
			[]string{"ip", "-n", ns, "link", "set", "eth0", "up"},
		)
	}
	for _, s := range steps {
		if err := run(s[0], s[1:]...); err != nil {
			return nil, errors.Join(err, cleanNet())
		}
	}
	return &netLab{n: n}, nil
}

// drop makes node i drop every packet it receives from the given
// addresses (node addresses or hostIP): a one-way cut.
func (l *netLab) drop(i int, from ...string) error {
	for _, addr := range from {
		if err := run("ip", "netns", "exec", nodeNS(i), "iptables", "-A", "INPUT", "-s", addr, "-j", "DROP"); err != nil {
			return err
		}
	}
	return nil
}

// heal removes every cut of every node.
func (l *netLab) heal() error {
	var errs []error
	for i := 1; i <= l.n; i++ {
		errs = append(errs, run("ip", "netns", "exec", nodeNS(i), "iptables", "-F", "INPUT"))
	}
	return errors.Join(errs...)
}
