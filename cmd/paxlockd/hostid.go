package main

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// resolveID sets -id from the host name for -id-from-hostname.
func (f *options) resolveID() error {
	if !f.idFromHost {
		return nil
	}
	if f.id != 0 {
		return errors.New("-id and -id-from-hostname exclude each other")
	}
	name := os.Getenv("HOSTNAME")
	if name == "" {
		h, err := os.Hostname()
		if err != nil {
			return fmt.Errorf("-id-from-hostname: %w", err)
		}
		name = h
	}
	id, err := idFromHostname(name)
	if err != nil {
		return err
	}
	f.id = uint(id)
	return nil
}

// idFromHostname is the node id of a host named <name>-<ordinal> (the
// first label of a DNS name): the ordinal plus one, since node ids start
// at 1 and a StatefulSet's ordinals at 0.
func idFromHostname(host string) (uint32, error) {
	label, _, _ := strings.Cut(host, ".")
	i := strings.LastIndexByte(label, '-')
	if i < 0 || i == len(label)-1 {
		return 0, fmt.Errorf("-id-from-hostname: host name %q does not end in -<ordinal>", host)
	}
	n, err := strconv.ParseUint(label[i+1:], 10, 31)
	if err != nil {
		return 0, fmt.Errorf("-id-from-hostname: host name %q: ordinal %q: %w", host, label[i+1:], err)
	}
	return uint32(n) + 1, nil
}
