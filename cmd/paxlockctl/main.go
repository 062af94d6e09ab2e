// Command paxlockctl inspects and uses a paxlock cluster.
//
//	paxlockctl version
//	paxlockctl status|members|wait                       (admin endpoints)
//	paxlockctl namespace list|add NAME|remove NAME       (admin endpoints)
//	paxlockctl namespace -meta list|add NAME -cluster C|remove NAME (meta cluster)
//	paxlockctl cluster list|add NAME CLIENTS [ADMINS]|remove NAME (meta cluster)
//	  namespace set-quota NAME [-held N] [-waiters N] [-rate N] [-burst N]
//	paxlockctl member list|add ID peer=… client=…|remove ID (admin endpoints)
//	paxlockctl unlock --force KEY                        (admin endpoints)
//	paxlockctl drain NODE                                (admin endpoints)
//	paxlockctl audit [-since SEQ] [-action A] [-in NS]   (admin endpoints)
//	paxlockctl backup FILE                               (admin endpoints)
//	paxlockctl certs|certs node ID|client NS [-renew]    (local files)
//	paxlockctl lock KEY [HOLD]|state KEY|watch KEY       (client protocol)
//	paxlockctl check KEY TOKEN                           (client protocol)
//	paxlockctl locks [PREFIX]                            (client protocol)
//	paxlockctl lock|rlock|wlock KEY -- CMD [ARG…]         (client protocol)
//	paxlockctl lock -nonreentrant KEY -- CMD, rlock|wlock -upgradable KEY -- CMD, upgrade, downgrade
//	paxlockctl sem acquire NAME PERMITS -limit N -- CMD [ARG…], sem release COUNT (client protocol)
//	paxlockctl multi KEY… -- CMD [ARG…]                  (client protocol)
//	paxlockctl elect NAME VALUE|elect campaign NAME VALUE|elect observe NAME (client protocol)
//	paxlockctl latch count|wait|countdown NAME -limit N  (client protocol)
//	paxlockctl barrier hold NAME [-- CMD]|wait NAME|enter NAME -limit N -- CMD (client protocol)
//	paxlockctl help [COMMAND]|completion bash|zsh
//
// paxlockctl help prints the usage, the environment variables and every
// flag; paxlockctl help COMMAND, or COMMAND -h, one command's forms, what
// it does and the flags it reads (help.go holds the texts). completion
// bash|zsh prints a script that completes the commands, their
// subcommands and the flags, written from the command table and the flag
// set (completion.go).
//
// Flags may come before or after the command and its arguments
// (paxlockctl status -o json, paxlockctl -o json status); "--" ends them.
// Every endpoint, namespace, credential-file and TLS flag may come from
// the environment instead, a variable named after the flag: -registry
// PAXLOCK_REGISTRY, -admin PAXLOCK_ADMIN, -namespace PAXLOCK_NAMESPACE,
// -ca PAXLOCK_CA, -cert PAXLOCK_CERT, -admin-ca PAXLOCK_ADMIN_CA,
// -admin-token-file PAXLOCK_ADMIN_TOKEN_FILE, -secret-file
// PAXLOCK_SECRET_FILE, and -key PAXLOCK_CERT_KEY (PAXLOCK_KEY is the key a
// run form's command holds); a flag given on the command line wins
// (env.go).
//
// The command line is parsed with the standard flag package rather than
// a CLI library (spf13/cobra, urfave/cli): cobra's pflag takes long flags
// only as --flag, so every script's -registry … would break, and both
// would replace a parser that already takes flags anywhere on the line
// and a run form's "--" with a second command tree beside the command
// table; help texts, environment variables and completion are a few
// hundred lines over the one flag set, with no dependency added.
// Every command takes -o table (the default, for people) or -o json (for
// scripts: one JSON object, or for lock and watch one object per line as
// things happen, with the field names documented on the record types in
// output.go and in docs/operations.md).
//
// Secrets never come from the command line, where other users of the
// machine can read them:
//
//   - the admin bearer token from PAXLOCK_ADMIN_TOKEN, or else
//     -admin-token-file FILE;
//   - the namespace secret (lock, state, check, watch, and the new
//     namespace's secret for namespace add) from PAXLOCK_SECRET, or else
//     -secret-file FILE ("-": standard input). lock, state, check and
//     watch fall back to "paxlock", the secret of make run's default
//     namespace; namespace add needs one.
//
// The admin commands speak HTTPS, verifying the nodes against the CA in
// -admin-ca, when that is set, and plain HTTP otherwise. When neither
// -admin-ca nor -admin-token-file is given and .run/certs/ (the
// development files of make run) holds ca.crt and admin.token, those are
// used, or else .run/admin.token (make run's plaintext cluster's token)
// over plain HTTP; give either flag (even empty, -admin-ca "") to turn
// that off.
//
// status asks every node's admin endpoint for its report and prints the
// nodes, which node masters each group, and lock counts per group. members
// prints the configured members and whether each answers. wait returns
// once every group has a serving master (or fails after -timeout); with
// -balanced, once every node answers and the masters are spread evenly
// too, which a rolling restart waits for before it stops the next node.
// lock
// takes KEY (waiting in the server's queue if it is held), prints the
// fencing token, holds it for HOLD (default 5s) and releases it. state
// prints who holds KEY. check asks whether TOKEN (decimal, or hex with
// 0x) is the fencing token of a current hold of KEY: exit status 0 when
// it is, 3 when it is not (released, expired, revoked, or KEY granted
// again since), 1 when the cluster could not be asked. locks lists the held locks whose keys start with
// PREFIX (all without one), in key order, up to -limit. watch prints KEY's changes until interrupted
// (SIGINT or SIGTERM end it cleanly, exit status 0). certs writes a
// development CA, a certificate and key per node (named
// paxlock://CLUSTER/node/ID, with the -hosts for HTTPS), an admin token
// and a gossip key into -out (default .run/certs); it never overwrites a
// file. drain NODE asks node NODE to hand the groups it masters to its
// peers (what it does on SIGTERM before it stops) and to master none until
// it restarts, for maintenance; exit status 1 if a group did not move
// within the node's drain_timeout. certs node ID issues node ID a certificate and key from the CA
// already in -out (ca.crt, ca.key), for a node added to the cluster; with
// -renew it replaces the ones it has (each file replaced whole); certs
// client NAMESPACE likewise issues client-NAMESPACE.crt and .key, a client
// certificate naming paxlock-client:NAMESPACE, for -cert and -key. unlock --force frees KEY (in -namespace) whoever holds it: the
// holder is told its lock was revoked, and the next waiter gets it once
// the holder's client has acknowledged (at once, if it is alive) or its
// TTL has run out, so that two holders never overlap; it prints the holds
// removed. While the key's group has no master, or a holder has not
// acknowledged yet, it asks again, for up to -timeout. backup FILE writes a consistent backup of
// every group (GET /backup, from the first node that is ready) to FILE,
// which it never overwrites, after checking it whole; paxlockd -restore
// FILE seeds a new cluster from it. version prints the module version, VCS revision and time, and Go
// version paxlockctl was built from.
//
// The run forms run CMD while paxlockctl holds a lock, for scripts and
// cron jobs: lock KEY -- CMD takes KEY's exclusive lock, rlock and wlock
// the read and write sides of a read-write lock, sem acquire NAME PERMITS
// PERMITS of semaphore NAME, whose total -limit N gives, and multi KEY…
// every KEY (all or none). The hold has the TTL -ttl (default 30s) and is
// renewed in the background while CMD runs; -weight gives its wait a
// priority in the server's queue (1 to 10) and -value the holder value
// others see. Without -wait they wait until
// the hold is granted (or paxlockctl is interrupted); -wait 0 tries once
// and -wait D waits up to D, then exit with status 124 without running
// CMD. CMD inherits paxlockctl's standard streams and environment, with
// PAXLOCK_KEY and PAXLOCK_TOKEN (the fencing token, decimal) set, and
// PAXLOCK_NAMESPACE; sem sets PAXLOCK_PERMITS, and PAXLOCK_SEM, through
// which CMD's paxlockctl sem release COUNT gives back some permits early
// (semrelease.go); multi sets PAXLOCK_KEYS
// and PAXLOCK_TOKENS (as given, space-separated, in the same order)
// instead of PAXLOCK_KEY and PAXLOCK_TOKEN. CMD runs in a process group of
// its own (it cannot read from the terminal), to which paxlockctl forwards
// the SIGINT and SIGTERM it receives. When the hold is lost (expired, or
// revoked by unlock --force), the group gets SIGTERM, and SIGKILL
// -kill-after (default 10s) later if it is still there, and paxlockctl
// exits with status 125. The hold is released once CMD has exited, and
// paxlockctl exits with CMD's status (128+N when signal N killed it);
// 126 when CMD cannot be run, 127 when it is not found. The run forms
// print nothing while all goes well; -o json prints their events, as
// JSON lines, on standard error, which CMD shares: standard output is
// CMD's alone.
//
// cluster and namespace -meta change the registry's tables, replicated
// in a meta cluster whose nodes -admin names (docs/operations.md,
// "Running many clusters"): cluster add NAME CLIENTS [ADMINS [CA_FILE]]
// adds or changes a lock cluster (comma-separated client and admin
// addresses, and the CA of its admin HTTPS); namespace -meta add NAME
// -cluster C assigns namespace NAME to cluster C with the secret of
// PAXLOCK_SECRET or -secret-file (the meta node derives its verifier, the
// registries install it on C); list and remove as for the plain forms.
//
// elect NAME VALUE campaigns in election NAME with VALUE, prints the win
// and its fencing token (the term), leads until SIGINT or SIGTERM, then
// resigns and exits 0; it exits 125 when leadership is lost, and 124
// when -wait passed before it won. elect campaign NAME VALUE is the same,
// for an election named observe or campaign. elect observe NAME prints
// the leader and each new leader or value until SIGINT or SIGTERM.
//
// latch and barrier are the recipes of package client/recipe: a
// count-down latch of -limit N (count, wait, countdown), a barrier (hold,
// wait) and a double barrier of -limit N (enter NAME -- CMD). lock
// -nonreentrant is its non-reentrant mutex: it fails at once (exit status
// 1) for a key an enclosing run form holds, which every run form lists in
// its command's PAXLOCK_HELD (nonreentrant.go). rlock -upgradable KEY --
// CMD holds its upgradable read; CMD runs paxlockctl upgrade (and
// downgrade), which asks the rlock over the Unix socket in
// PAXLOCK_UPGRADE, and wlock -upgradable is that lock's writer
// (upgrade.go).
//
// lock, state, check, watch, locks, the run forms and elect authenticate with SCRAM-SHA-256: the namespace
// secret never crosses the network. With -ca FILE they connect with TLS,
// verifying the nodes against that CA; -registry must then list the
// nodes' TLS client addresses (client_tls_addr). -cert FILE -key FILE
// present a client certificate there (client_tls in the nodes' config).
//
// Given the admin token and no namespace secret (neither PAXLOCK_SECRET
// nor -secret-file), locks and state read through the admin endpoints
// instead (GET /locks, GET /locks/{ns}/{key}; adminlocks.go): an operator
// reads any namespace's locks, state with every holder and the waiter
// queue, without the tenant's secret.
//
// Exit status: 0 on success, 1 when the command failed, 2 for a usage
// error, 3 when check found the token not current; the run forms and
// elect: 124 not acquired within -wait, 125 the hold lost, and (run
// forms) CMD's own status, 126 CMD cannot be run, 127 CMD not found.
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/paxlock/paxlock/adminapi"
	"github.com/paxlock/paxlock/client"
	"github.com/paxlock/paxlock/internal/pki"
)

// SecretEnv names the environment variable holding the namespace secret.
const SecretEnv = "PAXLOCK_SECRET"

// devSecret is make run's default namespace's secret, used by lock, state,
// check and watch when no secret is given.
const devSecret = "paxlock"

func main() {
	ctx, cancel := context.WithCancel(context.Background())
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	relay := make(chan os.Signal, 8)
	go relaySignals(sigs, relay, cancel)
	code := runSignals(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr, relay)
	signal.Stop(sigs)
	cancel()
	os.Exit(code)
}

// relaySignals passes each signal from sigs on to relay (dropping it when
// relay is full) and then cancels the commands' context: a command that
// sees the context end finds the signal that ended it already in relay.
func relaySignals(sigs <-chan os.Signal, relay chan<- os.Signal, cancel context.CancelFunc) {
	for s := range sigs {
		select {
		case relay <- s:
		default:
		}
		cancel()
	}
}

// errUsage marks a usage error (exit status 2).
var errUsage = errors.New("usage")

// options are the command line's flags.
type options struct {
	admin, registry, ns   string
	adminCA, tokenFile    string
	clientCA              string
	clientCert, clientKey string
	secretFile            string
	out, cluster, hosts   string
	to                    string
	nodes                 int
	output                string
	timeout               time.Duration
	after                 uint64
	prefix                string // watch -prefix
	prefixGiven           bool   // -prefix given, even empty (the whole namespace)
	explicitAdmin         bool   // -admin-ca or -admin-token-file given, even empty
	secretFileGiven       bool
	outputJSON            bool
	force                 bool
	undo                  bool // drain -undo
	balanced              bool
	renew                 bool
	meta                  bool
	limit                 int
	ttl, wait             time.Duration
	killAfter             time.Duration
	lockDelay             time.Duration // the run forms' hold's lock-delay (client.LockDelay)
	maxHold               time.Duration // the run forms' hold's maximum hold time (client.MaxHold)
	weight                int           // the run forms' wait's weight (client.Weight; 0: the default)
	value                 string        // the run forms' holder value (client.Value)
	nonreentrant          bool          // lock: refuse a key an enclosing run form holds (recipe.Mutex)
	upgradable            bool          // rlock -- CMD: the upgradable read (recipe.UpgradableRWMutex)
	ttlGiven, waitGiven   bool
	limitGiven            bool
	quota                 quotaFlags // namespace set-quota's limits
	audit                 auditFlags // audit's selection
	commandAndArgs        []string
	// argv is the command a run form runs (what follows "--"), nil
	// for every other command.
	argv []string
	// fs is the flag set the command line was parsed with, for help.
	fs *flag.FlagSet
	// signals carries the SIGINT and SIGTERM paxlockctl receives, to be
	// forwarded to a run form's command (nil: none come).
	signals        <-chan os.Signal
	stdin          io.Reader
	stdout, stderr io.Writer
}

func newFlagSet(o *options) *flag.FlagSet {
	fs := flag.NewFlagSet("paxlockctl", flag.ContinueOnError)
	fs.StringVar(&o.admin, "admin", "127.0.0.1:7301,127.0.0.1:7302,127.0.0.1:7303", "comma-separated admin addresses of the nodes")
	fs.StringVar(&o.registry, "registry", "127.0.0.1:7101,127.0.0.1:7102,127.0.0.1:7103", "comma-separated client addresses of the nodes")
	fs.StringVar(&o.ns, "namespace", "default", "namespace")
	fs.StringVar(&o.secretFile, "secret-file", "", "file holding the namespace secret, - for standard input ("+SecretEnv+" takes precedence)")
	fs.StringVar(&o.clientCA, "ca", "", "lock, state, check, watch, locks: CA certificate (PEM) to verify the nodes' TLS client listeners with; set, the client connects with TLS and -registry must list client_tls_addr addresses (make run: .run/certs/ca.crt, 127.0.0.1:7111-7113)")
	fs.StringVar(&o.clientCert, "cert", "", "with -ca and -key: client certificate (PEM) to present to the nodes' TLS client listeners (client_tls; paxlockctl certs client NAMESPACE)")
	fs.StringVar(&o.clientKey, "key", "", "with -ca and -cert: the client certificate's private key (PEM)")
	fs.StringVar(&o.adminCA, "admin-ca", "", "CA certificate (PEM) to verify the admin endpoints' HTTPS with; unset: plain HTTP (see the doc for the .run/certs default)")
	fs.StringVar(&o.tokenFile, "admin-token-file", "", "file holding the admin bearer token ("+adminapi.TokenEnv+" takes precedence)")
	fs.StringVar(&o.output, "o", "table", "output format: table or json")
	fs.DurationVar(&o.timeout, "timeout", time.Minute, "lock, state, check, wait, unlock: give up after this long (watch runs until interrupted)")
	fs.Uint64Var(&o.after, "after", 0, "watch: the last fencing token known (0: report the current holder at once)")
	fs.StringVar(&o.prefix, "prefix", "", "watch: print the changes of every key starting with this prefix instead of one KEY (-prefix '' for the whole namespace)")
	fs.BoolVar(&o.balanced, "balanced", false, "wait: also wait until every node answers and the masters are spread evenly (each node serves groups/nodes, rounded down or up), as after a node's restart")
	fs.BoolVar(&o.undo, "undo", false, "drain NODE: undo a drain: the node masters groups again, without a restart")
	fs.BoolVar(&o.force, "force", false, "unlock: required: free KEY whoever holds it")
	fs.IntVar(&o.limit, "limit", 1000, "locks: most locks to print (it pages through the cluster up to this many); sem acquire: required: the semaphore's total of permits; latch, barrier enter: required: the count of countdowns or participants")
	fs.DurationVar(&o.lockDelay, "lock-delay", 0, "lock, rlock, wlock, sem, multi, elect with -- CMD: the hold's lock-delay: if it is lost (expired or force-unlocked), nobody new is granted the key for that long (at most "+client.MaxLockDelay.String()+"; 0: none)")
	fs.DurationVar(&o.maxHold, "max-hold", 0, "lock, rlock, wlock, sem, multi, elect with -- CMD: the hold's maximum hold time: the server ends the hold that long after its grant, renewed or not, and CMD is stopped as for any loss (at least -ttl, at most "+client.MaxHoldLimit.String()+"; 0: none)")
	fs.DurationVar(&o.ttl, "ttl", 0, "lock, rlock, wlock, sem, multi, elect: the hold's TTL, renewed every TTL/3 while held (0: 30s; lock KEY HOLD: HOLD+5s, at least 10s)")
	fs.DurationVar(&o.wait, "wait", 0, "lock, rlock, wlock, sem, multi -- CMD, elect, latch wait|countdown, barrier: give up after this long without the hold (latch, barrier wait: without the opening), exit status 124 (0: try once; unset: wait until acquired or interrupted)")
	fs.IntVar(&o.weight, "weight", 0, "lock, rlock, wlock, sem, multi: the wait's priority in the server's queue, 1 to 10: each unit counts as the server's weight_aging (default 1s) of waiting (0: 1)")
	fs.StringVar(&o.value, "value", "", "lock, rlock, wlock, sem, multi: the holder value others see in state, watch and a contender's error (host, pid, job id; at most 1 KiB)")
	fs.BoolVar(&o.nonreentrant, "nonreentrant", false, "lock: fail at once (exit status 1) instead of waiting for itself when a run form this paxlockctl runs under holds KEY already (PAXLOCK_HELD)")
	fs.BoolVar(&o.upgradable, "upgradable", false, "rlock KEY -- CMD: hold the upgradable read: CMD may run paxlockctl upgrade to become the writer, no other writer in between, and paxlockctl downgrade; wlock KEY -- CMD: the writer of such a lock, behind the same gate")
	fs.DurationVar(&o.killAfter, "kill-after", 10*time.Second, "run forms (-- CMD): when the hold is lost, SIGKILL the command this long after SIGTERM")
	fs.StringVar(&o.out, "out", devCertsDir, "certs: directory to write into")
	fs.StringVar(&o.cluster, "cluster", "paxlock", "certs: cluster name (the nodes' cluster_name); namespace add -meta: the registry cluster that serves the namespace")
	fs.StringVar(&o.to, "to", "", "namespace move NAME: the registry cluster to move the namespace to")
	fs.BoolVar(&o.meta, "meta", false, "namespace: the -admin nodes are a meta cluster's: list, add and remove the registry's namespaces (cluster commands always do)")
	fs.IntVar(&o.nodes, "nodes", 3, "certs: node certificates to issue (ids 1..N)")
	fs.BoolVar(&o.renew, "renew", false, "certs node ID, certs client NAMESPACE: replace the certificate and key if they exist")
	addQuotaFlags(fs, &o.quota)
	addAuditFlags(fs, &o.audit)
	fs.StringVar(&o.hosts, "hosts", "127.0.0.1,localhost", "certs: comma-separated host names and IPs the node certificates carry for HTTPS")
	return fs
}

// parseInterspersed parses args with fs, accepting flags before, between
// and after the positional arguments, which it returns in order.
// Everything after "--" is positional; dash is the index in pos of the
// first argument after "--", -1 when there is no "--". On an error pos
// holds the positional arguments before it (help finds the command -h
// was given to).
func parseInterspersed(fs *flag.FlagSet, args []string) (pos []string, dash int, err error) {
	for {
		if err := fs.Parse(args); err != nil {
			return pos, -1, err
		}
		rest := fs.Args()
		if consumed := len(args) - len(rest); consumed > 0 && args[consumed-1] == "--" {
			return append(pos, rest...), len(pos), nil
		}
		if len(rest) == 0 {
			return pos, -1, nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// run is paxlockctl with its arguments (without the program name) and
// standard streams; ctx ends watch and cancels what waits. It returns the
// exit status.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	return runSignals(ctx, args, stdin, stdout, stderr, nil)
}

// runSignals is run with the signals to forward to a run form's command.
func runSignals(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer, signals <-chan os.Signal) int {
	o := &options{stdin: stdin, stdout: stdout, stderr: stderr, signals: signals}
	fs := newFlagSet(o)
	o.fs = fs
	fs.SetOutput(stderr)
	fs.Usage = func() {} // help is printed below, on standard output, or the usage on errors
	pos, dash, err := parseInterspersed(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		// paxlockctl -h, or COMMAND -h: the help asked for.
		if len(pos) > 0 && printCommandHelp(stdout, fs, pos[0]) {
			return 0
		}
		printHelp(stdout, fs)
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "%s", usageText())
		return 2 // the flag package printed the error
	}
	if _, err := applyEnv(fs, osLookup); err != nil {
		fmt.Fprintln(stderr, "paxlockctl: environment:", err)
		return 2
	}
	o.noteGiven()
	switch o.output {
	case "table":
	case "json":
		o.outputJSON = true
	default:
		fmt.Fprintf(stderr, "paxlockctl: -o %q: want table or json\n", o.output)
		return 2
	}
	if len(pos) == 0 {
		fmt.Fprintf(stderr, "%s", usageText())
		fmt.Fprintln(stderr, "paxlockctl help prints the flags and environment variables")
		return 2
	}
	o.commandAndArgs = pos
	if dash >= 2 && holdCommands[pos[0]] {
		// "--" after the command's own arguments: the run form.
		o.commandAndArgs, o.argv = pos[:dash], pos[dash:]
	}
	return exitCode(stderr, pos[0], dispatch(ctx, o))
}

// noteGiven records which of the flags whose presence matters were given,
// on the command line or through the environment.
func (o *options) noteGiven() {
	o.fs.Visit(func(f *flag.Flag) {
		o.explicitAdmin = o.explicitAdmin || f.Name == "admin-ca" || f.Name == "admin-token-file"
		o.secretFileGiven = o.secretFileGiven || f.Name == "secret-file"
		o.ttlGiven = o.ttlGiven || f.Name == "ttl"
		o.waitGiven = o.waitGiven || f.Name == "wait"
		o.limitGiven = o.limitGiven || f.Name == "limit"
		o.prefixGiven = o.prefixGiven || f.Name == "prefix"
	})
}

// exitCode is the exit status of command cmd's outcome err, once its
// error, if any, is printed.
func exitCode(stderr io.Writer, cmd string, err error) int {
	if errors.Is(err, errUsage) {
		fmt.Fprintln(stderr, "paxlockctl:", err)
		if h, ok := helps[cmd]; ok {
			fmt.Fprintf(stderr, "usage: paxlockctl %s\n", strings.Join(h.forms, "\n       paxlockctl "))
			fmt.Fprintf(stderr, "paxlockctl help %s prints its help\n", cmd)
		} else {
			fmt.Fprintf(stderr, "%s", usageText())
		}
		return 2
	}
	if errors.Is(err, errNotCurrent) {
		return exitNotCurrent // the answer, already printed
	}
	var es exitStatus
	if errors.As(err, &es) {
		return es.code // what there was to say is said
	}
	if err != nil {
		fmt.Fprintln(stderr, "paxlockctl:", err)
		return 1
	}
	return 0
}

func wantArgs(args []string, lo, hi int, form string) error {
	if len(args) < lo || len(args) > hi {
		return fmt.Errorf("%w: want %s", errUsage, form)
	}
	return nil
}

// clientConfig is the client configuration of lock, state, check, watch
// and locks: over TLS, verifying the nodes against -ca, when that is set,
// and presenting the client certificate -cert and -key, when set.
func (o *options) clientConfig() (client.Config, error) {
	secret, err := o.secret(true)
	if err != nil {
		return client.Config{}, err
	}
	cfg := client.Config{Registry: strings.Split(o.registry, ","), Namespace: o.ns, Secret: secret}
	if o.clientCA != "" {
		pool, err := pki.LoadCAPool(o.clientCA)
		if err != nil {
			return cfg, err
		}
		cfg.TLS = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	if o.clientCert != "" || o.clientKey != "" {
		if o.clientCert == "" || o.clientKey == "" || cfg.TLS == nil {
			return cfg, fmt.Errorf("%w: -cert and -key go together, with -ca", errUsage)
		}
		cert, err := tls.LoadX509KeyPair(o.clientCert, o.clientKey)
		if err != nil {
			return cfg, fmt.Errorf("-cert, -key: %w", err)
		}
		cfg.TLS.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

// secret returns the namespace secret from PAXLOCK_SECRET or -secret-file;
// with dev, make run's default when neither is given.
func (o *options) secret(dev bool) (string, error) {
	if s := os.Getenv(SecretEnv); s != "" {
		return s, nil
	}
	if o.secretFile != "" {
		var b []byte
		var err error
		if o.secretFile == "-" {
			b, err = io.ReadAll(io.LimitReader(o.stdin, 1<<16))
		} else {
			b, err = os.ReadFile(o.secretFile)
		}
		if err != nil {
			return "", fmt.Errorf("-secret-file: %w", err)
		}
		if s := strings.TrimRight(string(b), "\r\n"); s != "" {
			return s, nil
		}
		return "", fmt.Errorf("-secret-file %s: empty", o.secretFile)
	}
	if dev && !o.secretFileGiven {
		return devSecret, nil
	}
	return "", fmt.Errorf("no secret: set %s or -secret-file FILE", SecretEnv)
}

// clientArgs are the numbers clientCmd's commands take: how long lock
// holds and with which TTL, the -timeout, and watch's -after.
type clientArgs struct {
	hold, ttl, timeout time.Duration
	after              uint64
	// opts are lock's further options (-weight, -value).
	opts []client.Option
}

// clientCmd runs lock, state or watch on key through the client protocol.
func clientCmd(ctx context.Context, p printer, cfg client.Config, cmd, key string, a clientArgs) error {
	hold := a.hold
	connectCtx, cancel := context.WithTimeout(ctx, a.timeout)
	defer cancel()
	c, err := client.New(connectCtx, cfg)
	if err != nil {
		return err
	}
	defer func() { _ = c.Close() }() // the command's own result is what it reports
	switch cmd {
	case "state":
		st, err := c.State(connectCtx, key)
		if err != nil {
			return err
		}
		return p.emit(stateRecord(st))
	case "watch":
		return watchCmd(ctx, p, c, key, a.after)
	}
	m := c.Mutex(key, append([]client.Option{client.TTL(a.ttl), client.AutoRenew()}, a.opts...)...)
	start := time.Now()
	if err := m.Lock(connectCtx); err != nil {
		return err
	}
	waited, token := time.Since(start), m.Token()
	if err := p.emit(lockEvent{Event: "locked", Key: key, Token: token, WaitedMs: waited.Milliseconds(), HoldMs: hold.Milliseconds()}); err != nil {
		_ = m.Unlock(context.Background()) // the write error is what we report
		return err
	}
	t := time.NewTimer(hold)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	case <-m.Lost():
		return fmt.Errorf("lock on %s lost", key)
	}
	unlockCtx, cancelUnlock := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancelUnlock()
	if err := m.Unlock(unlockCtx); err != nil {
		return err
	}
	return p.emit(lockEvent{Event: "released", Key: key, Token: token})
}
