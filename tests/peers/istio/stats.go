package main

import (
	"sort"
	"strings"
	"sync"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	grpcpeer "google.golang.org/grpc/peer"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"

	istioxds "istio.io/istio/pilot/pkg/xds"
)

// maxEntries bounds every list the recorder keeps.
const maxEntries = 10000

// directHeader marks the peer's own streams (POST /xds) so that GET /stats
// can tell them from the gateway's.
const directHeader = "x-istio-peer-direct"

// recorder sees every ADS stream of the TCP gRPC server through a stream
// interceptor: each request (a request with a response_nonce is an ACK, or
// a NACK when it carries error_detail) and each response Istio sends.
type recorder struct {
	mu        sync.Mutex
	seq       int64
	nextID    int64
	opened    int
	closed    int
	streams   []*streamStats
	byID      map[int64]*streamStats
	requests  []map[string]any
	responses []map[string]any
	acks      []map[string]any
	nacks     []map[string]any
	pushes    map[string]int // type URL -> responses on the gateway's (not direct) streams
}

type streamStats struct {
	id        int64
	delta     bool
	direct    bool
	peer      string
	nodeID    string
	opened    time.Time
	closed    *time.Time
	err       string
	requests  int
	responses int
	acks      int
	nacks     []map[string]any
	pushes    map[string]int
	lastNonce map[string]string // type URL -> last nonce sent
}

func newRecorder() *recorder {
	return &recorder{byID: map[int64]*streamStats{}, pushes: map[string]int{}}
}

func (r *recorder) reset() {
	r.mu.Lock()
	defer r.mu.Unlock()
	live := []*streamStats{}
	byID := map[int64]*streamStats{}
	for _, s := range r.streams {
		if s.closed == nil {
			s.requests, s.responses, s.acks, s.nacks = 0, 0, 0, nil
			s.pushes = map[string]int{}
			live = append(live, s)
			byID[s.id] = s
		}
	}
	r.streams, r.byID = live, byID
	r.requests, r.responses, r.acks, r.nacks = nil, nil, nil, nil
	r.pushes = map[string]int{}
	r.opened, r.closed = len(live), 0
}

func appendBounded(list *[]map[string]any, e map[string]any) {
	if len(*list) >= maxEntries {
		*list = (*list)[len(*list)-maxEntries+1:]
	}
	*list = append(*list, e)
}

func (r *recorder) entry(st *streamStats, kv map[string]any) map[string]any {
	r.seq++
	kv["seq"] = r.seq
	kv["time"] = time.Now().UTC().Format(time.RFC3339Nano)
	kv["stream"] = st.id
	kv["delta"] = st.delta
	kv["direct"] = st.direct
	kv["node_id"] = st.nodeID
	return kv
}

func (r *recorder) interceptor(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	var delta bool
	switch {
	case strings.HasSuffix(info.FullMethod, "/StreamAggregatedResources"):
	case strings.HasSuffix(info.FullMethod, "/DeltaAggregatedResources"):
		delta = true
	default: // reflection
		return handler(srv, ss)
	}
	st := &streamStats{delta: delta, opened: time.Now(), pushes: map[string]int{}, lastNonce: map[string]string{}}
	if md, ok := metadata.FromIncomingContext(ss.Context()); ok && len(md.Get(directHeader)) > 0 {
		st.direct = true
	}
	if p, ok := grpcpeer.FromContext(ss.Context()); ok {
		st.peer = p.Addr.String()
	}
	r.mu.Lock()
	r.nextID++
	st.id = r.nextID
	r.opened++
	r.streams = append(r.streams, st)
	r.byID[st.id] = st
	if len(r.streams) > maxEntries {
		old := r.streams[0]
		delete(r.byID, old.id)
		r.streams = r.streams[1:]
	}
	r.mu.Unlock()

	err := handler(srv, &recordingStream{ServerStream: ss, r: r, st: st})

	r.mu.Lock()
	now := time.Now()
	st.closed = &now
	if err != nil {
		st.err = err.Error()
	}
	r.closed++
	r.mu.Unlock()
	return err
}

type recordingStream struct {
	grpc.ServerStream
	r  *recorder
	st *streamStats
}

func (s *recordingStream) RecvMsg(m any) error {
	err := s.ServerStream.RecvMsg(m)
	if err == nil {
		s.r.request(s.st, m)
	}
	return err
}

func (s *recordingStream) SendMsg(m any) error {
	err := s.ServerStream.SendMsg(m)
	if err == nil {
		s.r.response(s.st, m)
	}
	return err
}

func statusJSON(code int32, msg string) map[string]any {
	return map[string]any{"code": code, "message": msg}
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func (r *recorder) request(st *streamStats, m any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var e map[string]any
	var nonce string
	var nack bool
	switch req := m.(type) {
	case *discovery.DiscoveryRequest:
		if id := req.GetNode().GetId(); id != "" && st.nodeID == "" {
			st.nodeID = id
		}
		nonce, nack = req.GetResponseNonce(), req.GetErrorDetail() != nil
		e = r.entry(st, map[string]any{
			"type_url":       req.GetTypeUrl(),
			"version_info":   req.GetVersionInfo(),
			"response_nonce": nonce,
			"resource_names": nonNil(req.GetResourceNames()),
			"error_detail":   nil,
		})
		if nack {
			e["error_detail"] = statusJSON(req.GetErrorDetail().GetCode(), req.GetErrorDetail().GetMessage())
		}
	case *discovery.DeltaDiscoveryRequest:
		if id := req.GetNode().GetId(); id != "" && st.nodeID == "" {
			st.nodeID = id
		}
		nonce, nack = req.GetResponseNonce(), req.GetErrorDetail() != nil
		irv := req.GetInitialResourceVersions()
		if irv == nil {
			irv = map[string]string{}
		}
		e = r.entry(st, map[string]any{
			"type_url":                  req.GetTypeUrl(),
			"response_nonce":            nonce,
			"subscribe":                 nonNil(req.GetResourceNamesSubscribe()),
			"unsubscribe":               nonNil(req.GetResourceNamesUnsubscribe()),
			"initial_resource_versions": irv,
			"error_detail":              nil,
		})
		if nack {
			e["error_detail"] = statusJSON(req.GetErrorDetail().GetCode(), req.GetErrorDetail().GetMessage())
		}
	default:
		return
	}
	st.requests++
	appendBounded(&r.requests, e)
	if nonce == "" {
		return
	}
	if nack {
		st.nacks = append(st.nacks, e)
		if len(st.nacks) > 100 {
			st.nacks = st.nacks[1:]
		}
		appendBounded(&r.nacks, e)
	} else {
		st.acks++
		appendBounded(&r.acks, e)
	}
}

func (r *recorder) response(st *streamStats, m any) {
	var e map[string]any
	var typeURL, nonce string
	switch resp := m.(type) {
	case *discovery.DiscoveryResponse:
		typeURL, nonce = resp.GetTypeUrl(), resp.GetNonce()
		names := make([]string, 0, len(resp.GetResources()))
		for _, a := range resp.GetResources() {
			names = append(names, resourceName(a))
		}
		e = map[string]any{
			"type_url": typeURL, "version_info": resp.GetVersionInfo(), "nonce": nonce, "resources": names,
		}
	case *discovery.DeltaDiscoveryResponse:
		typeURL, nonce = resp.GetTypeUrl(), resp.GetNonce()
		names := make([]string, 0, len(resp.GetResources()))
		for _, res := range resp.GetResources() {
			names = append(names, res.GetName())
		}
		e = map[string]any{
			"type_url": typeURL, "version_info": resp.GetSystemVersionInfo(), "nonce": nonce,
			"resources": names, "removed_resources": nonNil(resp.GetRemovedResources()),
		}
	default:
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	e = r.entry(st, e)
	st.responses++
	st.pushes[typeURL]++
	st.lastNonce[typeURL] = nonce
	if !st.direct {
		r.pushes[typeURL]++
	}
	appendBounded(&r.responses, e)
}

// resourceName reads the name of a resource in a SotW response: its "name"
// field, or "cluster_name" for a ClusterLoadAssignment; "?" if it cannot be
// decoded.
func resourceName(a *anypb.Any) string {
	m, err := a.UnmarshalNew()
	if err != nil {
		return "?"
	}
	return messageName(m)
}

func messageName(m proto.Message) string {
	r := m.ProtoReflect()
	for _, field := range []protoreflect.Name{"name", "cluster_name"} {
		if fd := r.Descriptor().Fields().ByName(field); fd != nil && fd.Kind() == protoreflect.StringKind {
			return r.Get(fd).String()
		}
	}
	return "?"
}

func (r *recorder) view(ds *istioxds.DiscoveryServer) map[string]any {
	r.mu.Lock()
	defer r.mu.Unlock()
	nz := func(l []map[string]any) []map[string]any {
		if l == nil {
			return []map[string]any{}
		}
		return l
	}
	streams := []map[string]any{}
	for _, s := range r.streams {
		var closed any
		if s.closed != nil {
			closed = s.closed.UTC().Format(time.RFC3339Nano)
		}
		streams = append(streams, map[string]any{
			"stream": s.id, "delta": s.delta, "direct": s.direct, "peer": s.peer, "node_id": s.nodeID,
			"opened": s.opened.UTC().Format(time.RFC3339Nano), "closed": closed, "error": s.err,
			"requests": s.requests, "responses": s.responses, "acks": s.acks, "nacks": nz(s.nacks),
			"pushes": s.pushes, "last_nonce": s.lastNonce,
		})
	}
	return map[string]any{
		"streams_opened":    r.opened,
		"streams_closed":    r.closed,
		"streams":           streams,
		"pushes":            r.pushes,
		"requests":          nz(r.requests),
		"responses":         nz(r.responses),
		"acks":              nz(r.acks),
		"nacks":             nz(r.nacks),
		"istio":             istioView(ds),
		"inbound_updates":   ds.InboundUpdates.Load(),
		"committed_updates": ds.CommittedUpdates.Load(),
	}
}

// istioView is Istio's own per-connection state (what istiod's debug
// endpoints show): per connection and watched type, the names watched, the
// nonces sent and ACKed, and the last NACK's message (LastError, cleared by
// the next ACK).
func istioView(ds *istioxds.DiscoveryServer) []map[string]any {
	out := []map[string]any{}
	for _, con := range ds.AllClients() {
		proxy := con.Proxy()
		if proxy == nil {
			continue
		}
		watched := map[string]any{}
		for typeURL, w := range proxy.ShallowCloneWatchedResources() {
			if w == nil {
				continue
			}
			names := w.ResourceNames.UnsortedList()
			sort.Strings(names)
			watched[typeURL] = map[string]any{
				"resource_names": nonNil(names),
				"wildcard":       w.Wildcard,
				"nonce_sent":     w.NonceSent,
				"nonce_acked":    w.NonceAcked,
				"last_error":     w.LastError,
				"last_send":      w.LastSendTime.UTC().Format(time.RFC3339Nano),
			}
		}
		nodeID := ""
		if proxy.XdsNode != nil {
			nodeID = proxy.XdsNode.GetId()
		}
		out = append(out, map[string]any{
			"connection_id": con.ID(),
			"peer":          con.Peer(),
			"node_id":       nodeID,
			"proxy_id":      proxy.ID,
			"connected_at":  con.ConnectedAt().UTC().Format(time.RFC3339Nano),
			"watched":       watched,
		})
	}
	sort.Slice(out, func(i, j int) bool { return out[i]["connection_id"].(string) < out[j]["connection_id"].(string) })
	return out
}
