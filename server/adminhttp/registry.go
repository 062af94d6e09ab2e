// This file is the admin API of the registry's tables on a meta
// cluster's node: the changes of clusters, namespace assignments and
// moves, proposed to lock group 0 like /namespaces.

package adminhttp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/paxlock/paxlock/adminapi"
	"github.com/paxlock/paxlock/client/wire"
)

// registryBodyLimit bounds a change's body (a cluster's CA included).
const registryBodyLimit = 128 << 10

func (h *handler) registryRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /registry", h.registryGet)
	mux.HandleFunc("PUT /registry/clusters/{name}", h.registryChange)
	mux.HandleFunc("DELETE /registry/clusters/{name}", h.registryChange)
	mux.HandleFunc("PUT /registry/namespaces/{name}", h.registryChange)
	mux.HandleFunc("DELETE /registry/namespaces/{name}", h.registryChange)
	mux.HandleFunc("PUT /registry/moves/{name}", h.registryChange)
	mux.HandleFunc("DELETE /registry/moves/{name}", h.registryChange)
}

// registryChange serves PUT and DELETE of /registry/clusters/{name},
// /registry/namespaces/{name} (the secret in the body; the verifier is
// derived by the node and the secret neither stored nor logged) and
// /registry/moves/{namespace} (fenced: DELETE takes ?token=). A node
// that does not master group 0 redirects to the one that does.
func (h *handler) registryChange(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	ctx, cancel := context.WithTimeout(r.Context(), changeTimeout)
	defer cancel()
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, registryBodyLimit))
	dec.DisallowUnknownFields()
	put := r.Method == http.MethodPut
	var err error
	switch {
	case r.URL.Path == "/registry/clusters/"+name && put:
		var b adminapi.RegistryClusterPut
		if err = decodeBody(dec, &b); err == nil {
			err = h.Node.PutRegistryCluster(ctx, adminapi.RegistryCluster{Name: name, Client: b.Client, Admin: b.Admin, CA: b.CA})
		}
	case r.URL.Path == "/registry/clusters/"+name:
		err = h.Node.DeleteRegistryCluster(ctx, name)
	case r.URL.Path == "/registry/namespaces/"+name && put:
		var b adminapi.RegistryNamespacePut
		if err = decodeBody(dec, &b); err == nil {
			err = h.Node.PutRegistryNamespace(ctx, name, b.Cluster, b.Secret)
		}
	case r.URL.Path == "/registry/namespaces/"+name:
		err = h.Node.DeleteRegistryNamespace(ctx, name)
	case put:
		var b adminapi.RegistryMove
		if err = decodeBody(dec, &b); err == nil {
			b.Namespace = name
			err = h.Node.PutRegistryMove(ctx, b)
		}
	default:
		var tok uint64
		if tok, err = strconv.ParseUint(r.URL.Query().Get("token"), 10, 64); err == nil {
			err = h.Node.DeleteRegistryMove(ctx, name, tok)
		} else {
			err = fmt.Errorf("%w: ?token= the mover's fencing token", wire.ErrInvalid)
		}
	}
	h.registryAnswer(w, r, name, err)
}

// registryAnswer maps a change's outcome to HTTP: 204, a redirect to
// group 0's master, 400 (bad input), 404 (unknown), 409 (refused by the
// tables' rules or their limits, ErrConflict: the registry is full) or 500.
func (h *handler) registryAnswer(w http.ResponseWriter, r *http.Request, name string, err error) {
	switch {
	case err == nil:
		h.Log.Info("registry changed", "path", r.URL.Path, "method", r.Method)
		w.WriteHeader(http.StatusNoContent)
	case errors.Is(err, ErrNotSystemMaster):
		h.redirectToSystemMaster(w, r, "registry tables")
	case errors.Is(err, ErrNotFound):
		http.Error(w, fmt.Sprintf("%s: %v (a namespace needs a known cluster; a move step needs its move)", name, err), http.StatusNotFound)
	case errors.Is(err, ErrConflict):
		http.Error(w, fmt.Sprintf("%s: %v", name, err), http.StatusConflict)
	case errors.Is(err, wire.ErrInvalid):
		http.Error(w, err.Error(), http.StatusBadRequest)
	default:
		http.Error(w, err.Error(), http.StatusInternalServerError)
	}
}

// decodeBody decodes a change's JSON body; a bad one is wire.ErrInvalid
// (HTTP 400).
func decodeBody(dec *json.Decoder, v any) error {
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%w: body: %w", wire.ErrInvalid, err)
	}
	return nil
}
