// This file is the namespace command: list, add and remove namespaces
// through the admin endpoint.

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
)

// namespaceCmd lists, adds or removes namespaces through any node's admin
// endpoint (a node that cannot make the change redirects to one that can).
// args is already checked; secret is the new namespace's (add).
func namespaceCmd(ctx context.Context, p printer, ac *adminClient, args []string, secret string) error {
	method, path, body := http.MethodGet, "/namespaces", []byte(nil)
	switch args[0] {
	case "add":
		method = http.MethodPost
		body, _ = json.Marshal(map[string]string{"name": args[1], "secret": secret})
	case "remove":
		method, path = http.MethodDelete, "/namespaces?name="+url.QueryEscape(args[1])
	}
	code, b, err := ac.change(ctx, method, path, body)
	switch {
	case err != nil:
		return fmt.Errorf("namespace %s: %w", args[0], err)
	case code == http.StatusOK && args[0] == "list":
		names := []string{}
		if err := json.Unmarshal(b, &names); err != nil {
			return err
		}
		return p.emit(namespacesOutput{Namespaces: names})
	case code == http.StatusNoContent:
		return p.emit(namespaceChange{Namespace: args[1], Action: args[0], Done: true})
	}
	return fmt.Errorf("namespace %s: HTTP %d: %s", args[0], code, strings.TrimSpace(string(b)))
}
