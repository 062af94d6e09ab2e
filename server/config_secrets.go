package server

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/paxlock/paxlock/adminapi"
)

// gossipKeys decodes the gossip keys: the primary first (nil if none).
// It reads GossipKeyFile.
func (c *Config) gossipKeys() ([][]byte, error) {
	primary := c.GossipKey
	if c.GossipKeyFile != "" {
		b, err := os.ReadFile(c.GossipKeyFile)
		if err != nil {
			return nil, fmt.Errorf("gossip_key_file: %w", err)
		}
		primary = string(bytes.TrimSpace(b))
	}
	if primary == "" {
		if len(c.GossipOldKeys) > 0 {
			return nil, errors.New("gossip_old_keys without gossip_key")
		}
		return nil, nil
	}
	var keys [][]byte
	for i, s := range append([]string{primary}, c.GossipOldKeys...) {
		k, err := base64.StdEncoding.DecodeString(strings.TrimSpace(s))
		if err != nil || len(k) != 32 {
			what := "gossip_key"
			if i > 0 {
				what = fmt.Sprintf("gossip_old_keys[%d]", i-1)
			}
			return nil, fmt.Errorf("%s: want 32 bytes in base64 (e.g. openssl rand -base64 32)", what)
		}
		keys = append(keys, k)
	}
	return keys, nil
}

// adminToken returns the admin bearer token: PAXLOCK_ADMIN_TOKEN if set,
// else AdminTokenFile's content; "" if neither.
func (c *Config) adminToken() (string, error) {
	if t := strings.TrimSpace(os.Getenv(adminapi.TokenEnv)); t != "" {
		return t, nil
	}
	if c.AdminTokenFile == "" {
		return "", nil
	}
	b, err := os.ReadFile(c.AdminTokenFile)
	if err != nil {
		return "", fmt.Errorf("admin_token_file: %w", err)
	}
	t := strings.TrimSpace(string(b))
	if t == "" {
		return "", fmt.Errorf("admin_token_file %s is empty", c.AdminTokenFile)
	}
	return t, nil
}

// RelaySecretEnv is the environment variable that holds the cluster's
// relay secret, for paxlockd (over relay_secret_file).
const RelaySecretEnv = "PAXLOCK_RELAY_SECRET"

// MinRelaySecretLen is the shortest relay secret a node accepts (e.g.
// openssl rand -base64 32 writes 44 bytes).
const MinRelaySecretLen = 16

// relaySecret returns the cluster's relay secret: PAXLOCK_RELAY_SECRET
// if set, else RelaySecretFile's content; "" if neither.
func (c *Config) relaySecret() (string, error) {
	sec := strings.TrimSpace(os.Getenv(RelaySecretEnv))
	what := RelaySecretEnv
	if sec == "" {
		if c.RelaySecretFile == "" {
			return "", nil
		}
		b, err := os.ReadFile(c.RelaySecretFile)
		if err != nil {
			return "", fmt.Errorf("relay_secret_file: %w", err)
		}
		sec, what = strings.TrimSpace(string(b)), "relay_secret_file "+c.RelaySecretFile
	}
	if len(sec) < MinRelaySecretLen {
		return "", fmt.Errorf("%s: the relay secret has %d bytes, want at least %d (e.g. openssl rand -base64 32)", what, len(sec), MinRelaySecretLen)
	}
	return sec, nil
}
