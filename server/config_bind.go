package server

import (
	"fmt"
	"net"
	"strconv"
	"strings"
)

// NodeIDPlaceholder, in a file path of the configuration (data_dir, the
// tls, admin_tls and client_tls files, admin_token_file,
// gossip_key_file, relay_secret_file), stands for the node's id in
// decimal once node_id is known (from the file or paxlockd's -id and
// -id-from-hostname), so that one file serves every node of a cluster
// whose certificates are mounted side by side: "certs/node{node_id}.crt".
const NodeIDPlaceholder = "{node_id}"

// expandNodeID replaces NodeIDPlaceholder in every file path with the
// node id. A zero id (not known yet) leaves the paths as they are, for
// Validate to refuse the missing id.
func (c *Config) expandNodeID() {
	if c.NodeID == 0 {
		return
	}
	id := strconv.FormatUint(uint64(c.NodeID), 10)
	ex := func(p *string) { *p = strings.ReplaceAll(*p, NodeIDPlaceholder, id) }
	ex(&c.DataDir)
	ex(&c.AdminTokenFile)
	ex(&c.GossipKeyFile)
	ex(&c.RelaySecretFile)
	if c.TLS != nil {
		t := *c.TLS
		ex(&t.CA)
		ex(&t.Cert)
		ex(&t.Key)
		c.TLS = &t
	}
	if c.AdminTLS != nil {
		t := *c.AdminTLS
		ex(&t.Cert)
		ex(&t.Key)
		c.AdminTLS = &t
	}
	if c.ClientTLS != nil {
		t := *c.ClientTLS
		ex(&t.ClientCA)
		c.ClientTLS = &t
	}
}

// bindAddr is where a listener for the node's own address addr binds:
// addr itself, or BindHost with addr's port.
func (c *Config) bindAddr(addr string) string {
	if c.BindHost == "" || addr == "" {
		return addr
	}
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr // Validate refuses the address itself
	}
	return net.JoinHostPort(c.BindHost, port)
}

// validateBindHost refuses a BindHost that is not an IP address.
func (c *Config) validateBindHost() error {
	if c.BindHost != "" && net.ParseIP(c.BindHost) == nil {
		return fmt.Errorf("bind_host: %q is not an IP address (0.0.0.0 binds every interface)", c.BindHost)
	}
	return nil
}
