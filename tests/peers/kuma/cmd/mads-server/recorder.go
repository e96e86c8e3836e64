package main

import (
	"context"
	"sync"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"github.com/prometheus/prometheus/discovery/xds"
	"google.golang.org/protobuf/types/known/anypb"
)

// recorder implements go-control-plane's server callbacks and keeps what
// they saw, for GET /requests.
type recorder struct {
	mu        sync.Mutex
	seq       int64
	requests  []map[string]any
	responses []map[string]any
	streams   []map[string]any
	opened    int64
	closed    int64
	api       map[int64]string     // stream id -> "ads" | "mads" (SotW)
	deltaAPI  map[int64]string     // delta stream id -> "ads" | "mads"
	deltaNode map[int64]*core.Node // delta stream id -> node (sent on the first request only)
}

var _ serverv3.Callbacks = (*recorder)(nil)

func (r *recorder) view() map[string]any {
	r.mu.Lock()
	defer r.mu.Unlock()
	return map[string]any{
		"requests":        nonNilList(r.requests),
		"responses":       nonNilList(r.responses),
		"streams":         nonNilList(r.streams),
		"streams_opened":  r.opened,
		"streams_closed":  r.closed,
		"requests_total":  len(r.requests),
		"responses_total": len(r.responses),
	}
}

func (r *recorder) reset() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.requests, r.responses, r.streams = nil, nil, nil
	r.opened, r.closed = 0, 0
}

func nonNilList(l []map[string]any) []map[string]any {
	if l == nil {
		return []map[string]any{}
	}
	return l
}

// pushLocked stamps e with a sequence number and time and appends it.
func (r *recorder) pushLocked(list *[]map[string]any, e map[string]any) {
	r.seq++
	e["seq"] = r.seq
	e["time"] = time.Now().UTC().Format(time.RFC3339Nano)
	if len(*list) < maxEntries {
		*list = append(*list, e)
	}
}

func apiOf(typeURL string) string {
	if typeURL == "" { // resource.AnyType: the ADS handlers
		return "ads"
	}
	return "mads"
}

func (r *recorder) stream(delta bool, id int64, typeURL, event string, node *core.Node) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.api == nil {
		r.api = map[int64]string{}
		r.deltaAPI = map[int64]string{}
	}
	apis := r.api
	if delta {
		apis = r.deltaAPI
	}
	e := map[string]any{"stream": id, "delta": delta, "event": event}
	if event == "open" {
		r.opened++
		apis[id] = apiOf(typeURL)
		e["type_url"] = typeURL
	} else {
		r.closed++
		e["node_id"] = node.GetId()
		if delta {
			delete(r.deltaNode, id)
		}
	}
	e["api"] = apis[id]
	if event != "open" {
		delete(apis, id)
	}
	r.pushLocked(&r.streams, e)
}

func (r *recorder) OnStreamOpen(_ context.Context, id int64, typeURL string) error {
	r.stream(false, id, typeURL, "open", nil)
	return nil
}

func (r *recorder) OnStreamClosed(id int64, node *core.Node) {
	r.stream(false, id, "", "close", node)
}

func (r *recorder) OnDeltaStreamOpen(_ context.Context, id int64, typeURL string) error {
	r.stream(true, id, typeURL, "open", nil)
	return nil
}

func (r *recorder) OnDeltaStreamClosed(id int64, node *core.Node) {
	r.stream(true, id, "", "close", node)
}

func statusJSON(code int32, msg string, present bool) any {
	if !present {
		return nil
	}
	return map[string]any{"code": code, "message": msg}
}

func sotwRequest(kind string, req *discovery.DiscoveryRequest) map[string]any {
	nack := req.GetErrorDetail() != nil
	return map[string]any{
		"kind":           kind,
		"type_url":       req.GetTypeUrl(),
		"node_id":        req.GetNode().GetId(),
		"version_info":   req.GetVersionInfo(),
		"response_nonce": req.GetResponseNonce(),
		"resource_names": nonNil(req.GetResourceNames()),
		"error_detail":   statusJSON(req.GetErrorDetail().GetCode(), req.GetErrorDetail().GetMessage(), nack),
		"ack":            req.GetResponseNonce() != "" && !nack,
		"nack":           req.GetResponseNonce() != "" && nack,
	}
}

func (r *recorder) OnStreamRequest(id int64, req *discovery.DiscoveryRequest) error {
	// go-control-plane has already copied the stream's node into req and
	// filled in the type URL of a per-type stream.
	e := sotwRequest("sotw", req)
	e["stream"] = id
	r.mu.Lock()
	defer r.mu.Unlock()
	e["api"] = r.api[id]
	r.pushLocked(&r.requests, e)
	return nil
}

// assignmentsOf summarizes the MonitoringAssignments in a SotW response.
func assignmentsOf(resources []*anypb.Any) []map[string]any {
	out := []map[string]any{}
	for _, a := range resources {
		ma := &xds.MonitoringAssignment{}
		e := map[string]any{"type_url": a.GetTypeUrl()}
		if err := a.UnmarshalTo(ma); err == nil {
			e["mesh"] = ma.GetMesh()
			e["service"] = ma.GetService()
			e["targets"] = len(ma.GetTargets())
		}
		out = append(out, e)
	}
	return out
}

func (r *recorder) OnStreamResponse(_ context.Context, id int64, _ *discovery.DiscoveryRequest, resp *discovery.DiscoveryResponse) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pushLocked(&r.responses, map[string]any{
		"kind":         "sotw",
		"stream":       id,
		"api":          r.api[id],
		"type_url":     resp.GetTypeUrl(),
		"version_info": resp.GetVersionInfo(),
		"nonce":        resp.GetNonce(),
		"resources":    assignmentsOf(resp.GetResources()),
	})
}

func (r *recorder) OnStreamDeltaRequest(id int64, req *discovery.DeltaDiscoveryRequest) error {
	// The node comes on the first request of a stream only, and
	// go-control-plane fills it in only after this callback.
	r.mu.Lock()
	defer r.mu.Unlock()
	if req.GetNode() != nil {
		r.deltaNode[id] = req.GetNode()
	}
	nack := req.GetErrorDetail() != nil
	r.pushLocked(&r.requests, map[string]any{
		"kind":                      "delta",
		"stream":                    id,
		"api":                       r.deltaAPI[id],
		"type_url":                  req.GetTypeUrl(),
		"node_id":                   r.deltaNode[id].GetId(),
		"response_nonce":            req.GetResponseNonce(),
		"subscribe":                 nonNil(req.GetResourceNamesSubscribe()),
		"unsubscribe":               nonNil(req.GetResourceNamesUnsubscribe()),
		"initial_resource_versions": nonNilMap(req.GetInitialResourceVersions()),
		"error_detail":              statusJSON(req.GetErrorDetail().GetCode(), req.GetErrorDetail().GetMessage(), nack),
		"ack":                       req.GetResponseNonce() != "" && !nack,
		"nack":                      req.GetResponseNonce() != "" && nack,
	})
	return nil
}

func (r *recorder) OnStreamDeltaResponse(id int64, _ *discovery.DeltaDiscoveryRequest, resp *discovery.DeltaDiscoveryResponse) {
	names := []string{}
	for _, res := range resp.GetResources() {
		names = append(names, res.GetName())
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pushLocked(&r.responses, map[string]any{
		"kind":              "delta",
		"stream":            id,
		"api":               r.deltaAPI[id],
		"type_url":          resp.GetTypeUrl(),
		"version_info":      resp.GetSystemVersionInfo(),
		"nonce":             resp.GetNonce(),
		"resource_names":    names,
		"removed_resources": nonNil(resp.GetRemovedResources()),
	})
}

func (r *recorder) OnFetchRequest(_ context.Context, req *discovery.DiscoveryRequest) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	e := sotwRequest("fetch", req)
	e["api"] = "mads"
	r.pushLocked(&r.requests, e)
	return nil
}

func (r *recorder) OnFetchResponse(_ *discovery.DiscoveryRequest, resp *discovery.DiscoveryResponse) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pushLocked(&r.responses, map[string]any{
		"kind":         "fetch",
		"api":          "mads",
		"type_url":     resp.GetTypeUrl(),
		"version_info": resp.GetVersionInfo(),
		"nonce":        resp.GetNonce(),
		"resources":    assignmentsOf(resp.GetResources()),
	})
}
