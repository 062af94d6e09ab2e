// This file is the environment's share of the command line: the
// PAXLOCK_* variables that stand in for the endpoint, namespace,
// credential and TLS flags a user would otherwise repeat on every call.

package main

import (
	"flag"
	"os"

	"github.com/paxlock/paxlock/adminapi"
)

// envFlag is a flag that an environment variable may give when the
// command line does not.
type envFlag struct {
	flag, env string
	// empty: the variable counts even when set to "" (as the flag does:
	// -admin-ca "" turns off make run's development files).
	empty bool
}

// envFlags are the flags read from the environment, each from the
// variable named after it, except -key: PAXLOCK_KEY is what a run form
// tells its command (the key it holds), so a paxlockctl run inside one
// must not read it as a file name.
var envFlags = []envFlag{
	{flag: "registry", env: "PAXLOCK_REGISTRY"},
	{flag: "admin", env: "PAXLOCK_ADMIN"},
	{flag: "namespace", env: "PAXLOCK_NAMESPACE"},
	{flag: "ca", env: "PAXLOCK_CA"},
	{flag: "cert", env: "PAXLOCK_CERT"},
	{flag: "key", env: "PAXLOCK_CERT_KEY"},
	{flag: "admin-ca", env: "PAXLOCK_ADMIN_CA", empty: true},
	{flag: "admin-token-file", env: "PAXLOCK_ADMIN_TOKEN_FILE", empty: true},
	{flag: "secret-file", env: "PAXLOCK_SECRET_FILE"},
}

// envSecrets are the variables that hold a credential itself rather than
// a flag's value: they win over the file flags (-secret-file,
// -admin-token-file), as they always have.
var envSecrets = []struct{ env, what string }{
	{SecretEnv, "the namespace secret (wins over -secret-file)"},
	{adminapi.TokenEnv, "the admin bearer token (wins over -admin-token-file)"},
}

// envFor returns the variable that stands in for flag name, "" if none.
func envFor(name string) string {
	for _, e := range envFlags {
		if e.flag == name {
			return e.env
		}
	}
	return ""
}

// applyEnv sets every flag of envFlags that the command line left unset
// from its variable, when that is set, and returns the names of the flags
// so given. A flag on the command line wins.
func applyEnv(fs *flag.FlagSet, lookup func(string) (string, bool)) ([]string, error) {
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var set []string
	for _, e := range envFlags {
		v, ok := lookup(e.env)
		if given[e.flag] || !ok || v == "" && !e.empty {
			continue
		}
		if err := fs.Set(e.flag, v); err != nil {
			return set, err
		}
		set = append(set, e.flag)
	}
	return set, nil
}

// osLookup is os.LookupEnv, what run reads the environment with.
var osLookup = os.LookupEnv
