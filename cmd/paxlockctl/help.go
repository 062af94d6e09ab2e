// This file is paxlockctl's help: the usage, each command's own help
// (help COMMAND, COMMAND -h) with the flags it reads, and the
// environment variables that stand in for flags.

package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
)

// cmdHelp is one command's help: its forms, what it does, and the flags
// it reads beyond -o.
type cmdHelp struct {
	forms []string
	text  string
	flags []string
}

// Flag groups that several commands read.
var (
	clientFlags = []string{"registry", "namespace", "secret-file", "ca", "cert", "key", "timeout"}
	adminFlags  = []string{"admin", "admin-ca", "admin-token-file", "timeout"}
	holdFlags   = []string{"ttl", "wait", "kill-after", "lock-delay", "max-hold", "weight", "value"}
)

func join(groups ...[]string) []string { return slices.Concat(groups...) }

// helps is every command's help, by name.
var helps = map[string]cmdHelp{
	"version": {forms: []string{"version"},
		text: "Print the module version, VCS revision and time, and Go version paxlockctl was built from."},
	"status": {forms: []string{"status"},
		text:  "Ask every node's admin endpoint for its report; print the nodes (with their build version), which node masters each group, and lock counts per group.",
		flags: adminFlags},
	"members": {forms: []string{"members"},
		text:  "Print the configured members and whether each answers.",
		flags: adminFlags},
	"wait": {forms: []string{"wait [-balanced]"},
		text:  "Return once every group has a serving master (or fail after -timeout); with -balanced, once every node answers and the masters are spread evenly too, which a rolling restart waits for before it stops the next node.",
		flags: join(adminFlags, []string{"balanced"})},
	"namespace": {forms: []string{
		"namespace list|add NAME|remove NAME",
		"namespace set-quota NAME [-held N] [-waiters N] [-rate N] [-burst N]",
		"namespace -meta list|add NAME -cluster C|remove NAME",
		"namespace move NAME -to CLUSTER|move status NAME|move abort NAME"},
		text: "Change the namespace table (admin endpoints). add takes the new namespace's secret from " + SecretEnv + " or -secret-file, never from the command line. " +
			"With -meta the -admin nodes are a meta cluster's: list, add and remove the registry's namespaces, add assigning NAME to cluster -cluster. " +
			"move moves a namespace to another registry cluster, status prints its move, abort undoes one in progress.",
		flags: join(adminFlags, []string{"secret-file", "meta", "cluster", "to", "held", "waiters", "rate", "burst"})},
	"cluster": {forms: []string{"cluster list|add NAME CLIENTS [ADMINS [CA_FILE]]|remove NAME"},
		text:  "Change the registry's lock clusters, replicated in the meta cluster whose nodes -admin names: comma-separated client and admin addresses, and the CA of the cluster's admin HTTPS.",
		flags: adminFlags},
	"member": {forms: []string{"member list|add ID peer=… client=… [gossip=…] [admin=…]|remove ID"},
		text:  "Change the cluster's membership (admin endpoints).",
		flags: adminFlags},
	"unlock": {forms: []string{"unlock --force KEY"},
		text: "Free KEY (in -namespace) whoever holds it: the holder is told its lock was revoked, and the next waiter gets it once the holder's client has acknowledged or its TTL has run out, so that two holders never overlap; print the holds removed. " +
			"While the key's group has no master, or a holder has not acknowledged yet, ask again for up to -timeout.",
		flags: join(adminFlags, []string{"namespace", "force"})},
	"drain": {forms: []string{"drain NODE [-undo]"},
		text:  "Ask node NODE to hand the groups it masters to its peers and to master none until it restarts, for maintenance; exit status 1 if a group did not move within the node's drain_timeout. -undo undoes a drain without a restart.",
		flags: join(adminFlags, []string{"undo"})},
	"audit": {forms: []string{"audit [-since SEQ] [-action A] [-in NAMESPACE]"},
		text: "Print the audit log, oldest first, up to -limit records: every change asked of the admin endpoints (force-unlocks, namespaces, quotas, members, drains, moves, registry changes, backups) with its sequence number, the serving node's time, the node, who asked (the admin token or a client certificate's subject), from which address, the action, its namespace and target, and the outcome. " +
			"Any node answers from its own replica of lock group 0, which every node keeps in the same order; -since SEQ prints the records after SEQ (the last one printed: the next page).",
		flags: join(adminFlags, []string{"since", "action", "in", "limit"})},
	"backup": {forms: []string{"backup FILE"},
		text:  "Write a consistent backup of every group (from the first node that is ready) to FILE, which it never overwrites, after checking it whole; paxlockd -restore FILE seeds a new cluster from it.",
		flags: adminFlags},
	"certs": {forms: []string{"certs", "certs node ID [-renew]", "certs client NAMESPACE [-renew]"},
		text: "Write a development CA, a certificate and key per node, an admin token and a gossip key into -out (never overwriting a file); " +
			"certs node ID issues one node's certificate from the CA in -out, certs client NAMESPACE a client certificate for -cert and -key.",
		flags: []string{"out", "cluster", "nodes", "hosts", "renew"}},
	"locks": {forms: []string{"locks [PREFIX]"},
		text: "List the held locks whose keys start with PREFIX (all without one), in key order, up to -limit. " +
			"Given the admin token (PAXLOCK_ADMIN_TOKEN or -admin-token-file) and no namespace secret (neither PAXLOCK_SECRET nor -secret-file), it reads -namespace through the admin endpoints (GET /locks) instead of the client protocol: an operator sees any namespace without its secret.",
		flags: join(clientFlags, []string{"limit"}, adminFlags)},
	"clients": {forms: []string{"clients [NODE] [-in NAMESPACE]"},
		text: "List the client sessions the nodes serve (every node, or node NODE; of every namespace, or -in NAMESPACE), by node and longest connected first, up to -limit, through the admin endpoints (GET /clients, a page at a time): client id, namespace, address, TLS, the relaying node, how long connected. " +
			clientsNote + " A node that did not answer is named.",
		flags: join(adminFlags, []string{"in", "limit"})},
	"state": {forms: []string{"state KEY"},
		text:  "Print who holds KEY. Given the admin token and no namespace secret, as locks, it asks the key's master through the admin endpoints (GET /locks/{ns}/{key}) and prints every holder with its value, token, validity left and lock-delay, the lock-delay in force, and the waiter queue in the order it is served, with weights and time waited.",
		flags: join(clientFlags, adminFlags)},
	"check": {forms: []string{"check KEY TOKEN"},
		text:  "Ask whether TOKEN (decimal, or hex with 0x) is the fencing token of a current hold of KEY: exit status 0 when it is, 3 when it is not (released, expired, revoked, or KEY granted again since), 1 when the cluster could not be asked.",
		flags: clientFlags},
	"watch": {forms: []string{"watch KEY [-after TOKEN]", "watch -prefix PREFIX"},
		text: "Print KEY's changes until interrupted (SIGINT or SIGTERM end it cleanly, exit status 0). " +
			"With -prefix, print the changes of every key starting with PREFIX (-prefix '' for the whole namespace), each line naming its key; " +
			"a moved line (the prefix as its key) says a lock group's master changed and changes in between may be missing (locks PREFIX shows the present state).",
		flags: join(clientFlags, []string{"after", "prefix"})},
	"lock": {forms: []string{"lock [-nonreentrant] KEY [HOLD]", "lock [-nonreentrant] KEY -- CMD [ARG…]"},
		text: "lock KEY [HOLD] takes KEY (waiting in the server's queue if it is held), prints the fencing token, holds it for HOLD (default 5s) and releases it. " +
			"lock KEY -- CMD runs CMD while paxlockctl holds KEY's exclusive lock" + runFormText + " " +
			"With -nonreentrant (client/recipe.Mutex) the lock is not reentrant: a lock of a key that a run form this paxlockctl runs under holds already (in the same namespace: PAXLOCK_HELD lists them) " +
			"fails at once with exit status 1 and \"not reentrant\", where a plain lock would wait for its own holder forever; a key held by anyone else is waited for as usual.",
		flags: join(clientFlags, holdFlags, []string{"nonreentrant"})},
	"rlock": {forms: []string{"rlock [-upgradable] KEY -- CMD [ARG…]"},
		text: "Run CMD while paxlockctl holds the read side of read-write lock KEY" + runFormText + " " +
			"With -upgradable (client/recipe.UpgradableRWMutex, which also takes the lock KEY/upgrade) it holds the upgradable read: one at a time, beside plain readers, and CMD may become the writer by running paxlockctl upgrade, with no writer in between, " +
			"so what CMD read is still current when its write is granted; every writer of KEY must then be an upgradable one (wlock -upgradable). -wait bounds the wait for the read (-wait 0 is refused: it always waits). " +
			"A loss of the read, the write or KEY/upgrade stops CMD as any loss does (exit status 125).",
		flags: join(clientFlags, holdFlags, []string{"upgradable"})},
	"upgrade": {forms: []string{"upgrade [-wait D]"},
		text: "Inside the CMD of rlock -upgradable KEY (through PAXLOCK_UPGRADE): turn its upgradable read into KEY's write lock, waiting until the plain readers have left, and print the write's fencing token (higher than PAXLOCK_TOKEN, the read's), so tok=$(paxlockctl upgrade) && write. " +
			"Exit status 0 upgraded; 124 not upgraded within -wait D (the rlock then holds neither read nor write, only KEY/upgrade, so no writer got in: upgrade may be asked again); " +
			"1 the cluster failed (ask again); 125 KEY/upgrade was lost, so another writer may have written: CMD is stopped as for any loss; 2 not inside rlock -upgradable. Interrupted, it abandons the wait.",
		flags: []string{"wait"}},
	"downgrade": {forms: []string{"downgrade"},
		text: "Inside the CMD of rlock -upgradable KEY after upgrade: turn the write lock back into the upgradable read, atomically (no writer in between), keeping its token, which it prints; upgrade may follow again. Exit status as upgrade's."},
	"wlock": {forms: []string{"wlock [-upgradable] KEY -- CMD [ARG…]"},
		text: "Run CMD while paxlockctl holds the write side of read-write lock KEY" + runFormText + " " +
			"With -upgradable it is the writer of an upgradable lock (client/recipe.UpgradableRWMutex.Lock): it takes KEY/upgrade first, as rlock -upgradable does, so it never writes between an upgradable reader's read and its upgrade; a plain wlock would.",
		flags: join(clientFlags, holdFlags, []string{"upgradable"})},
	"sem": {forms: []string{"sem acquire NAME PERMITS -limit N -- CMD [ARG…]", "sem release COUNT"},
		text: "Run CMD while paxlockctl holds PERMITS permits of semaphore NAME, whose total -limit N gives; CMD finds PAXLOCK_PERMITS too. " +
			"Inside CMD, sem release COUNT gives back COUNT of the permits early (through PAXLOCK_SEM; client.Semaphore.ReleasePermits), keeping the rest, the token and the renewal, and prints how many are kept, so n=$(paxlockctl sem release 1); " +
			"the waiters the freed permits let in are granted at once. Exit status 0 given back; 1 the cluster failed (ask again); 2 COUNT not below the permits held, or not inside sem acquire; 125 the permits were lost: CMD is stopped as for any loss" + runFormText,
		flags: join(clientFlags, []string{"limit"}, holdFlags)},
	"multi": {forms: []string{"multi KEY… -- CMD [ARG…]"},
		text:  "Run CMD while paxlockctl holds every KEY (all or none); CMD finds PAXLOCK_KEYS and PAXLOCK_TOKENS (space-separated, in the order given) instead of PAXLOCK_KEY and PAXLOCK_TOKEN" + runFormText,
		flags: join(clientFlags, []string{"ttl", "wait", "kill-after", "weight", "value"})},
	"elect": {forms: []string{"elect NAME VALUE", "elect campaign NAME VALUE", "elect observe NAME"},
		text: "elect NAME VALUE campaigns in election NAME with VALUE, prints the win and its fencing token (the term), leads until SIGINT or SIGTERM, then resigns and exits 0; it exits 125 when leadership is lost, and 124 when -wait passed before it won. " +
			"elect campaign NAME VALUE is the same, for an election named observe or campaign. elect observe NAME prints the leader and each new leader or value until SIGINT or SIGTERM.",
		flags: join(clientFlags, []string{"ttl", "wait"})},
	"help": {forms: []string{"help [COMMAND]"},
		text: "Print the usage, the environment variables and every flag, or COMMAND's own help (as COMMAND -h does)."},
	"latch": {forms: []string{"latch count NAME -limit N", "latch wait NAME -limit N", "latch countdown NAME -limit N"},
		text: "A count-down latch of N (client/recipe.Latch, a semaphore of N permits): it opens once N countdowns are in. " +
			"latch count prints how many it still needs; latch wait waits until it opens (woken by a watch); latch countdown counts it down by one, then waits until it opens and until every other countdown and every latch wait of the round is done, so that none of them misses the opening, and exits 0. " +
			"A countdown lasts while its paxlockctl runs: one that is interrupted, or whose -wait passes before the latch opens, withdraws (the count goes up again). With -wait D, wait and countdown exit 124 if the latch has not opened within D.",
		flags: join(clientFlags, []string{"limit", "wait", "ttl", "value"})},
	"barrier": {forms: []string{"barrier hold NAME [-- CMD [ARG…]]", "barrier wait NAME", "barrier enter NAME -limit N -- CMD [ARG…]"},
		text: "barrier hold sets the barrier NAME (client/recipe.Barrier, an exclusive lock) until SIGINT or SIGTERM, or while CMD runs, then releases it; it exits 124 if another holds it, and 125 if the hold is lost (the barrier is then open). " +
			"barrier wait waits until nobody holds it (woken by a watch); with -wait D it exits 124 if it is still held after D. " +
			"barrier enter is a double barrier of N (client/recipe.DoubleBarrier): it waits until N participants have entered, runs CMD, then leaves and waits, up to -timeout, until all N have left; it exits with CMD's status. " +
			"The run forms' environment has PAXLOCK_KEY (and for enter PAXLOCK_PERMITS, N).",
		flags: join(clientFlags, []string{"limit", "wait", "ttl", "value", "kill-after"})},
	"completion": {forms: []string{"completion bash|zsh"},
		text: "Print a script that completes paxlockctl's commands and flags: source <(paxlockctl completion bash) in ~/.bashrc; for zsh, source <(paxlockctl completion zsh) in ~/.zshrc (after compinit)."},
}

// runFormText is what the run forms' help says of every run form.
const runFormText = ". The hold has the TTL -ttl (default 30s), renewed in the background while CMD runs; " +
	"-weight gives the wait its priority in the server's queue (1 to 10) and -value the holder value others see (state, watch, a contender's error). " +
	"Without -wait it waits until the hold is granted; -wait 0 tries once and -wait D waits up to D, then exits 124 without running CMD. " +
	"CMD inherits the standard streams and environment, with PAXLOCK_KEY, PAXLOCK_TOKEN (the fencing token) and PAXLOCK_NAMESPACE set, in a process group of its own that gets the SIGINT and SIGTERM paxlockctl receives. " +
	"When the hold is lost, CMD gets SIGTERM, and SIGKILL -kill-after later, and paxlockctl exits 125; otherwise it releases the hold once CMD has exited and exits with CMD's status (126: CMD cannot be run, 127: not found)."

// commandNames are the commands in the order the usage lists them.
var commandNames = []string{
	"version", "status", "members", "wait", "namespace", "cluster", "member", "unlock", "drain", "audit", "backup", "certs",
	"locks", "state", "clients", "check", "watch", "lock", "rlock", "upgrade", "downgrade", "wlock", "sem", "multi", "elect", "latch", "barrier", "help", "completion",
}

// subcommands are the words that may follow a command, for completion.
var subcommands = map[string][]string{
	"namespace":  {"list", "add", "remove", "set-quota", "move"},
	"cluster":    {"list", "add", "remove"},
	"member":     {"list", "add", "remove"},
	"certs":      {"node", "client"},
	"sem":        {"acquire", "release"},
	"elect":      {"campaign", "observe"},
	"latch":      {"count", "wait", "countdown"},
	"barrier":    {"hold", "wait", "enter"},
	"completion": {"bash", "zsh"},
	"help":       commandNames,
}

// usageText is the usage: every command's forms, one a line.
func usageText() string {
	var b strings.Builder
	b.WriteString("usage: paxlockctl [flags] COMMAND [ARG…] [flags]\n\ncommands:\n")
	for _, name := range commandNames {
		for _, f := range helps[name].forms {
			fmt.Fprintf(&b, "  paxlockctl %s\n", f)
		}
	}
	return b.String()
}

// printHelp prints the whole help: the usage, the environment and every
// flag.
func printHelp(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprintf(w, "%s", usageText())
	fmt.Fprintln(w, "\nFlags may come before or after the command and its arguments; \"--\" ends them.\n"+
		"paxlockctl help COMMAND (or COMMAND -h) prints a command's own help.")
	printEnv(w)
	fmt.Fprintln(w, "\nflags:")
	fs.VisitAll(func(f *flag.Flag) { printFlag(w, f) })
}

// printEnv lists the environment variables paxlockctl reads.
func printEnv(w io.Writer) {
	fmt.Fprintln(w, "\nenvironment (a flag on the command line wins over its variable):")
	for _, e := range envFlags {
		fmt.Fprintf(w, "  %-26s -%s\n", e.env, e.flag)
	}
	for _, e := range envSecrets {
		fmt.Fprintf(w, "  %-26s %s\n", e.env, e.what)
	}
}

// printCommandHelp prints command name's help, false if there is no such
// command.
func printCommandHelp(w io.Writer, fs *flag.FlagSet, name string) bool {
	h, ok := helps[name]
	if !ok {
		return false
	}
	fmt.Fprintln(w, "usage:")
	for _, f := range h.forms {
		fmt.Fprintf(w, "  paxlockctl %s\n", f)
	}
	fmt.Fprintf(w, "\n%s\n\nflags:\n", wrap(h.text, 76))
	seen := map[string]bool{}
	for _, name := range append(slices.Clone(h.flags), "o") {
		if f := fs.Lookup(name); f != nil && !seen[name] {
			seen[name] = true
			printFlag(w, f)
		}
	}
	return true
}

// printFlag prints one flag as the flag package would, with the variable
// that stands in for it.
func printFlag(w io.Writer, f *flag.Flag) {
	kind, usage := flag.UnquoteUsage(f)
	line := "  -" + f.Name
	if kind != "" {
		line += " " + kind
	}
	fmt.Fprintln(w, line)
	extra := ""
	if env := envFor(f.Name); env != "" {
		extra = " (env " + env + ")"
	}
	if f.DefValue != "" && f.DefValue != "0" && f.DefValue != "false" && f.DefValue != "0s" {
		extra += fmt.Sprintf(" (default %q)", f.DefValue)
	}
	fmt.Fprintf(w, "    \t%s\n", strings.ReplaceAll(usage+extra, "\n", "\n    \t"))
}

// wrap breaks s into lines of at most width characters, at spaces.
func wrap(s string, width int) string {
	var b strings.Builder
	n := 0
	for i, word := range strings.Fields(s) {
		if i > 0 && n+1+len(word) > width {
			b.WriteByte('\n')
			n = 0
		} else if i > 0 {
			b.WriteByte(' ')
			n++
		}
		b.WriteString(word)
		n += len(word)
	}
	return b.String()
}

// runHelp is help [COMMAND].
func runHelp(_ context.Context, o *options, _ printer, _ string, args []string) error {
	switch {
	case len(args) == 0:
		printHelp(o.stdout, o.fs)
		return nil
	case len(args) == 1 && printCommandHelp(o.stdout, o.fs, args[0]):
		return nil
	case len(args) == 1:
		return fmt.Errorf("%w: help: unknown command %q", errUsage, args[0])
	}
	return fmt.Errorf("%w: want help [COMMAND]", errUsage)
}
