// This file is the command table: each command's name, the check of its
// arguments, and the call that runs it.

package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/paxlock/paxlock/client"
	"github.com/paxlock/paxlock/client/wire"
	"github.com/paxlock/paxlock/internal/buildinfo"
	"github.com/paxlock/paxlock/internal/pki"
)

// command checks a command's arguments and runs it; name is the command
// as given, for handlers that serve several.
type command func(ctx context.Context, o *options, p printer, name string, args []string) error

// commands maps each command's name to its handler.
var commands = map[string]command{
	"version":   runVersion,
	"certs":     runCerts,
	"status":    runAdminReport,
	"members":   runAdminReport,
	"wait":      runAdminReport,
	"namespace": runNamespace,
	"cluster":   runCluster,
	"member":    runMember,
	"unlock":    runUnlock,
	"drain":     runDrain,
	"backup":    runBackup,
	"audit":     runAudit,
	"locks":     runLocks,
	"clients":   runClients,
	"check":     runCheck,
	"lock":      runLock,
	"state":     runClient,
	"watch":     runClient,
	"rlock":     runHold,
	"wlock":     runHold,
	"sem":       runSem,
	"multi":     runHold,
	"elect":     runElect,
	"latch":     runLatch,
	"barrier":   runBarrier,
	"upgrade":   runUpgrade,
	"downgrade": runUpgrade,
	// help and completion read the command table: they join it at init.
}

func init() {
	commands["help"] = runHelp
	commands["completion"] = runCompletion
}

// holdCommands are the commands with a run form, KEY… -- CMD [ARG…]: CMD
// runs while paxlockctl holds what they take.
var holdCommands = map[string]bool{"lock": true, "rlock": true, "wlock": true, "sem": true, "multi": true, "barrier": true}

// runLock runs lock's run form (lock KEY -- CMD) or lock KEY [HOLD].
func runLock(ctx context.Context, o *options, p printer, cmd string, args []string) error {
	if len(args) > 0 {
		if err := checkReentry(o, args[0]); err != nil {
			return err
		}
	}
	if o.argv != nil {
		return runHold(ctx, o, p, cmd, args)
	}
	return runClient(ctx, o, p, cmd, args)
}

// dispatch runs the command named by o.commandAndArgs[0] with the rest
// as its arguments.
func dispatch(ctx context.Context, o *options) error {
	cmd, args := o.commandAndArgs[0], o.commandAndArgs[1:]
	p := printer{w: o.stdout, json: o.outputJSON}
	run, ok := commands[cmd]
	if !ok {
		return fmt.Errorf("%w: unknown command %q", errUsage, cmd)
	}
	return run(ctx, o, p, cmd, args)
}

// adminAPI is the client of the admin endpoints in -admin.
func (o *options) adminAPI() (*adminClient, error) {
	return newAdminClient(strings.Split(o.admin, ","), o.adminCA, o.tokenFile, o.explicitAdmin)
}

func runVersion(_ context.Context, _ *options, p printer, _ string, args []string) error {
	if err := wantArgs(args, 0, 0, "version"); err != nil {
		return err
	}
	return versionCmd(p)
}

// versionCmd prints the binary's build information.
func versionCmd(p printer) error {
	info, ok := buildinfo.Read()
	if !ok {
		return errors.New("the binary carries no build information")
	}
	return p.emit(versionOutput{Info: info, line: buildinfo.Line("paxlockctl")})
}

func runCerts(_ context.Context, o *options, p printer, _ string, args []string) error {
	if len(args) > 0 && args[0] == "node" {
		if len(args) != 2 {
			return fmt.Errorf("%w: want certs node ID", errUsage)
		}
		id, err := strconv.ParseUint(args[1], 10, 32)
		if err != nil || id == 0 {
			return fmt.Errorf("%w: certs node: %q is not a node id", errUsage, args[1])
		}
		return certsNodeCmd(p, o.out, pki.NodeOptions{Cluster: o.cluster, ID: uint32(id), Hosts: strings.Split(o.hosts, ","), Renew: o.renew})
	}
	if len(args) > 0 && args[0] == "client" {
		if len(args) != 2 {
			return fmt.Errorf("%w: want certs client NAMESPACE", errUsage)
		}
		if err := wire.ValidateNamespace(args[1]); err != nil {
			return fmt.Errorf("%w: certs client: %w", errUsage, err)
		}
		return certsClientCmd(p, o.out, pki.ClientOptions{Namespace: args[1], Renew: o.renew})
	}
	if err := wantArgs(args, 0, 0, "certs"); err != nil {
		return err
	}
	return certsCmd(p, o.out, o.cluster, o.nodes, strings.Split(o.hosts, ","))
}

// runAdminReport runs status, members or wait.
func runAdminReport(ctx context.Context, o *options, p printer, cmd string, args []string) error {
	if err := wantArgs(args, 0, 0, cmd); err != nil {
		return err
	}
	ac, err := o.adminAPI()
	if err != nil {
		return err
	}
	switch cmd {
	case "status":
		return status(ctx, p, ac)
	case "members":
		return members(ctx, p, ac)
	}
	return wait(ctx, p, ac, o.timeout, o.balanced)
}

func runNamespace(ctx context.Context, o *options, p printer, _ string, args []string) error {
	if len(args) > 0 && args[0] == "move" {
		return runMove(ctx, o, p, args[1:])
	}
	if len(args) == 0 {
		return fmt.Errorf("%w: want namespace list|add NAME|remove NAME|set-quota NAME", errUsage)
	}
	var secret string
	switch {
	case args[0] == "add" && len(args) == 3:
		return fmt.Errorf("%w: namespace add takes the secret from %s or -secret-file, never from the command line", errUsage, SecretEnv)
	case args[0] == "add" && len(args) == 2:
		s, err := o.secret(false)
		if err != nil {
			return err
		}
		secret = s
	case args[0] == "set-quota" && len(args) == 2:
		if !o.quota.given() {
			return fmt.Errorf("%w: namespace set-quota NAME: give at least one of -held, -waiters, -rate, -burst (0: unlimited)", errUsage)
		}
	case args[0] == "list" && len(args) == 1, args[0] == "remove" && len(args) == 2:
	default:
		return fmt.Errorf("%w: want namespace list|add NAME|remove NAME|set-quota NAME", errUsage)
	}
	ac, err := o.adminAPI()
	if err != nil {
		return err
	}
	if o.meta {
		return registryNamespaceCmd(ctx, p, ac, args, o.cluster, secret)
	}
	if args[0] == "set-quota" {
		return setQuota(ctx, p, ac, args[1], &o.quota)
	}
	return namespaceCmd(ctx, p, ac, args, secret)
}

func runMember(ctx context.Context, o *options, p printer, _ string, args []string) error {
	if _, _, _, err := parseMemberArgs(args); err != nil {
		return err
	}
	ac, err := o.adminAPI()
	if err != nil {
		return err
	}
	return memberCmd(ctx, p, ac, args)
}

func runUnlock(ctx context.Context, o *options, p printer, _ string, args []string) error {
	if err := wantArgs(args, 1, 1, "unlock --force KEY"); err != nil {
		return err
	}
	if !o.force {
		return fmt.Errorf("%w: unlock frees a lock whoever holds it: say --force", errUsage)
	}
	ac, err := o.adminAPI()
	if err != nil {
		return err
	}
	return forceUnlock(ctx, p, ac, o.ns, args[0], o.timeout)
}

func runDrain(ctx context.Context, o *options, p printer, _ string, args []string) error {
	if err := wantArgs(args, 1, 1, "drain NODE [-undo]"); err != nil {
		return err
	}
	id, err := strconv.ParseUint(args[0], 10, 32)
	if err != nil || id == 0 {
		return fmt.Errorf("%w: drain: %q is not a node id", errUsage, args[0])
	}
	ac, err := o.adminAPI()
	if err != nil {
		return err
	}
	return drain(ctx, p, ac, uint32(id), o.undo, o.timeout)
}

func runBackup(ctx context.Context, o *options, p printer, _ string, args []string) error {
	if err := wantArgs(args, 1, 1, "backup FILE"); err != nil {
		return err
	}
	ac, err := o.adminAPI()
	if err != nil {
		return err
	}
	return backupCmd(ctx, p, ac, args[0])
}

func runLocks(ctx context.Context, o *options, p printer, _ string, args []string) error {
	if err := wantArgs(args, 0, 1, "locks [PREFIX]"); err != nil {
		return err
	}
	if o.limit <= 0 {
		return fmt.Errorf("%w: -limit %d: want at least 1", errUsage, o.limit)
	}
	prefix := ""
	if len(args) == 1 {
		prefix = args[0]
	}
	if o.viaAdmin() {
		ac, err := o.adminAPI()
		if err != nil {
			return err
		}
		return adminLocks(ctx, p, ac, o.ns, prefix, o.limit, o.timeout)
	}
	cfg, err := o.clientConfig()
	if err != nil {
		return err
	}
	return locksCmd(ctx, p, cfg, prefix, o.limit, o.timeout)
}

func runCheck(ctx context.Context, o *options, p printer, _ string, args []string) error {
	if err := wantArgs(args, 2, 2, "check KEY TOKEN"); err != nil {
		return err
	}
	tok, err := parseToken(args[1])
	if err != nil {
		return err
	}
	cfg, err := o.clientConfig()
	if err != nil {
		return err
	}
	return checkCmd(ctx, p, cfg, args[0], tok, o.timeout)
}

// runClient runs lock, state or watch.
func runClient(ctx context.Context, o *options, p printer, cmd string, args []string) error {
	if cmd == "watch" && o.prefixGiven {
		if err := wantArgs(args, 0, 0, "watch -prefix PREFIX (no KEY)"); err != nil {
			return err
		}
		cfg, err := o.clientConfig()
		if err != nil {
			return err
		}
		return watchPrefixCmd(ctx, p, cfg, o.prefix, o.timeout)
	}
	form := map[string]string{"lock": "lock KEY [HOLD]", "state": "state KEY", "watch": "watch KEY"}[cmd]
	hi := 1
	if cmd == "lock" {
		hi = 2
	}
	if err := wantArgs(args, 1, hi, form); err != nil {
		return err
	}
	if cmd == "state" && o.viaAdmin() {
		ac, err := o.adminAPI()
		if err != nil {
			return err
		}
		return adminState(ctx, p, ac, o.ns, args[0], o.timeout)
	}
	hold := 5 * time.Second
	if len(args) == 2 {
		d, err := time.ParseDuration(args[1])
		if err != nil {
			return fmt.Errorf("%w: hold: %v", errUsage, err)
		}
		hold = d
	}
	ttl := max(hold+5*time.Second, 10*time.Second)
	if o.ttlGiven && o.ttl > 0 {
		ttl = o.ttl
	}
	if err := checkWeightValue(o.weight, o.value); err != nil {
		return err
	}
	var opts []client.Option
	if o.weight != 0 {
		opts = append(opts, client.Weight(o.weight))
	}
	if o.value != "" {
		opts = append(opts, client.Value(o.value))
	}
	cfg, err := o.clientConfig()
	if err != nil {
		return err
	}
	return clientCmd(ctx, p, cfg, cmd, args[0], clientArgs{hold: hold, ttl: ttl, timeout: o.timeout, after: o.after, opts: opts})
}
