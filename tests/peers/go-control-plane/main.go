// Command go-control-plane-peer is a thin test peer around
// github.com/envoyproxy/go-control-plane. It exists so that xds-gateway's
// tests can run against go-control-plane's own behaviour: its gRPC xDS server
// (SotW, delta and unary Fetch, ADS and per-type services) over a
// SnapshotCache, and its REST front end HTTPGateway. A small JSON control API
// lets a test set snapshots, replace one cluster, stop and restart the gRPC
// listener, and read what go-control-plane's callbacks saw.
//
// Usage:
//
//	go-control-plane-peer --grpc 127.0.0.1:0 --http 127.0.0.1:0 --gateway 127.0.0.1:0
//
// The first line on stdout is one JSON object with the bound addresses:
//
//	{"grpc":"127.0.0.1:41000","http":"127.0.0.1:41001","gateway":"127.0.0.1:41002"}
//
// Logs go to stderr. The process exits when stdin is closed (so it dies with
// the test that spawned it) or on SIGTERM/SIGINT. See README.md.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/anypb"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	clusterservice "github.com/envoyproxy/go-control-plane/envoy/service/cluster/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	endpointservice "github.com/envoyproxy/go-control-plane/envoy/service/endpoint/v3"
	extensionservice "github.com/envoyproxy/go-control-plane/envoy/service/extension/v3"
	listenerservice "github.com/envoyproxy/go-control-plane/envoy/service/listener/v3"
	routeservice "github.com/envoyproxy/go-control-plane/envoy/service/route/v3"
	runtimeservice "github.com/envoyproxy/go-control-plane/envoy/service/runtime/v3"
	secretservice "github.com/envoyproxy/go-control-plane/envoy/service/secret/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	gcplog "github.com/envoyproxy/go-control-plane/pkg/log"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	gcptest "github.com/envoyproxy/go-control-plane/pkg/test"
	rlsservice "github.com/envoyproxy/go-control-plane/ratelimit/service/ratelimit/v3"
)

// maxEntries bounds every list kept by the stats recorder.
const maxEntries = 10000

func main() {
	grpcAddr := flag.String("grpc", "127.0.0.1:0", "loopback address for the gRPC xDS server")
	httpAddr := flag.String("http", "127.0.0.1:0", "loopback address for the JSON control API")
	gwAddr := flag.String("gateway", "127.0.0.1:0", "loopback address for go-control-plane's HTTPGateway (REST xDS)")
	verbose := flag.Bool("v", false, "also log go-control-plane's debug messages")
	noADS := flag.Bool("no-ads", false, "serve only the per-type services, not ADS (as Contour does)")
	hashKey := flag.String("node-hash-metadata", "", "key snapshots by this node metadata field (a string) instead of node.id; nodes without it fall back to their id")
	record := flag.Bool("record", true, "record what the callbacks see for GET /stats; false (benchmarks): record nothing, only hand the default snapshot to new nodes")
	flag.Parse()
	log.SetOutput(os.Stderr)
	log.SetFlags(log.LstdFlags | log.Lmicroseconds)

	for _, a := range []string{*grpcAddr, *httpAddr, *gwAddr} {
		if err := requireLoopback(a); err != nil {
			log.Fatalf("refusing address: %v", err)
		}
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	// Exit when stdin reaches EOF: the spawning test holds the other end.
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		log.Printf("stdin closed, exiting")
		stop()
	}()

	logger := gcplog.LoggerFuncs{
		InfoFunc:  func(f string, a ...any) { log.Printf("[gcp info] "+f, a...) },
		WarnFunc:  func(f string, a ...any) { log.Printf("[gcp warn] "+f, a...) },
		ErrorFunc: func(f string, a ...any) { log.Printf("[gcp error] "+f, a...) },
	}
	if *verbose {
		logger.DebugFunc = func(f string, a ...any) { log.Printf("[gcp debug] "+f, a...) }
	}

	// ads=false: with ads=true the SnapshotCache silently never answers a
	// SotW request whose resource_names do not cover every resource of that
	// type in the snapshot (simple.go, respond/superset), which breaks any
	// subset request (EDS for one cluster, RDS for one route, ...) on ADS
	// and per-type streams alike. ads=true only adds response ordering on
	// SetSnapshot. IDHash keys snapshots by node.id; --node-hash-metadata
	// by a metadata field, as control planes that compute config from the
	// node's metadata do.
	var hash cachev3.NodeHash = cachev3.IDHash{}
	if *hashKey != "" {
		hash = metadataHash{key: *hashKey}
	}
	p := &peer{
		cache:     cachev3.NewSnapshotCache(false, hash, logger),
		hash:      hash,
		snaps:     map[string]*nodeSnap{},
		seen:      map[string]bool{},
		deltaNode: map[int64]*core.Node{},
		record:    *record,
	}
	xds := serverv3.NewServer(ctx, p.cache, p)

	g := &grpcCtl{addr: *grpcAddr, xds: xds, noADS: *noADS}
	if err := g.start(); err != nil {
		log.Fatalf("grpc listen: %v", err)
	}
	httpLis, err := net.Listen("tcp", *httpAddr)
	if err != nil {
		log.Fatalf("http listen: %v", err)
	}
	gwLis, err := net.Listen("tcp", *gwAddr)
	if err != nil {
		log.Fatalf("gateway listen: %v", err)
	}

	// go-control-plane's HTTPGateway, wrapped in go-control-plane's own
	// http.Handler adapter (pkg/test), untouched: errors become
	// http.Error(err, code), a nil body becomes a bare 304.
	gwSrv := &http.Server{Handler: &gcptest.HTTPGateway{Gateway: serverv3.HTTPGateway{Server: xds}, Log: logger}}
	ctlSrv := &http.Server{Handler: p.controlAPI(g)}
	go serveHTTP(ctlSrv, httpLis, "control API")
	go serveHTTP(gwSrv, gwLis, "gateway")

	addrs, _ := json.Marshal(struct {
		GRPC    string `json:"grpc"`
		HTTP    string `json:"http"`
		Gateway string `json:"gateway"`
	}{g.addr, httpLis.Addr().String(), gwLis.Addr().String()})
	fmt.Fprintf(os.Stdout, "%s\n", addrs)
	_ = os.Stdout.Sync()
	log.Printf("listening: %s", addrs)

	<-ctx.Done()
	g.stop()
	_ = ctlSrv.Close()
	_ = gwSrv.Close()
}

func serveHTTP(s *http.Server, l net.Listener, what string) {
	if err := s.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Fatalf("%s: %v", what, err)
	}
}

// requireLoopback accepts "localhost:PORT" and loopback IP literals only.
func requireLoopback(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	return fmt.Errorf("%q is not a loopback address", addr)
}

// ---------------------------------------------------------------------------
// gRPC listener that can be stopped and restarted on the same address.

type grpcCtl struct {
	mu    sync.Mutex
	addr  string // after the first start: the bound address, reused on restart
	xds   serverv3.Server
	noADS bool // register the per-type services only
	srv   *grpc.Server
}

func (g *grpcCtl) start() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.srv != nil {
		return nil
	}
	lis, err := net.Listen("tcp", g.addr)
	if err != nil {
		return err
	}
	g.addr = lis.Addr().String()
	s := grpc.NewServer(
		grpc.MaxConcurrentStreams(1000000),
		grpc.MaxRecvMsgSize(64<<20),
		// Do not GOAWAY clients with eager keepalive settings.
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: time.Second, PermitWithoutStream: true}),
	)
	// One go-control-plane server behind every service it implements.
	if !g.noADS {
		discovery.RegisterAggregatedDiscoveryServiceServer(s, g.xds)
	}
	clusterservice.RegisterClusterDiscoveryServiceServer(s, g.xds)
	endpointservice.RegisterEndpointDiscoveryServiceServer(s, g.xds)
	listenerservice.RegisterListenerDiscoveryServiceServer(s, g.xds)
	routeservice.RegisterRouteDiscoveryServiceServer(s, g.xds)
	routeservice.RegisterScopedRoutesDiscoveryServiceServer(s, g.xds)
	routeservice.RegisterVirtualHostDiscoveryServiceServer(s, g.xds)
	secretservice.RegisterSecretDiscoveryServiceServer(s, g.xds)
	runtimeservice.RegisterRuntimeDiscoveryServiceServer(s, g.xds)
	extensionservice.RegisterExtensionConfigDiscoveryServiceServer(s, g.xds)
	rlsservice.RegisterRateLimitConfigDiscoveryServiceServer(s, g.xds)
	g.srv = s
	go func() {
		if err := s.Serve(lis); err != nil {
			log.Printf("grpc serve ended: %v", err)
		}
	}()
	log.Printf("grpc serving on %s", g.addr)
	return nil
}

// stop closes the listener and every open stream at once (grpc.Server.Stop).
func (g *grpcCtl) stop() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.srv != nil {
		g.srv.Stop()
		g.srv = nil
		log.Printf("grpc stopped")
	}
}

func (g *grpcCtl) running() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.srv != nil
}

// ---------------------------------------------------------------------------
// Snapshots and the default snapshot.

// nodeSnap is what the peer last set for a node: enough to rebuild it.
type nodeSnap struct {
	version   string
	resources map[string][]types.Resource // type URL -> resources
	// snap is built on first use and shared by every node set from this
	// nodeSnap (a node=* snapshot and the default): go-control-plane's
	// snapshots are immutable, and one computes its delta version map
	// (a marshal and a hash of every resource) once, not once per node.
	snap *cachev3.Snapshot
}

// metadataHash keys a node's snapshot by the string its metadata holds at
// key ("meta:" + value), else by its id.
type metadataHash struct{ key string }

func (h metadataHash) ID(node *core.Node) string {
	if v, ok := node.GetMetadata().GetFields()[h.key]; ok && v.GetStringValue() != "" {
		return "meta:" + v.GetStringValue()
	}
	return node.GetId()
}

type peer struct {
	cache cachev3.SnapshotCache
	hash  cachev3.NodeHash

	mu        sync.Mutex
	snaps     map[string]*nodeSnap // per node hash (its id, by default), as set through the control API
	def       *nodeSnap            // default for nodes without one (node=*)
	seen      map[string]bool      // node hashes seen in any request
	deltaNode map[int64]*core.Node // delta stream id -> node (node is sent once)
	stats     stats
	record    bool // false: the callbacks keep no stats (decoding every resource of every response costs)
}

// setLocked sets ns's cache.Snapshot (built once per nodeSnap) for node. Consistent() is
// only reported, never enforced. p.mu must be held.
func (p *peer) setLocked(node string, ns *nodeSnap) (consistentErr error, err error) {
	if ns.snap == nil {
		snap, err := cachev3.NewSnapshot(ns.version, ns.resources)
		if err != nil {
			return nil, err
		}
		ns.snap = snap
	}
	if err := p.cache.SetSnapshot(context.Background(), node, ns.snap); err != nil {
		return nil, err
	}
	p.snaps[node] = ns
	return ns.snap.Consistent(), nil
}

// sawNode is called from the request callbacks (with the node's hash): the first time a node
// shows up and it has no snapshot, it gets the default snapshot (if any)
// before go-control-plane creates the watch or answers the fetch.
func (p *peer) sawNode(id string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.seen[id] {
		return
	}
	p.seen[id] = true
	if p.snaps[id] == nil && p.def != nil {
		if _, err := p.setLocked(id, p.def); err != nil {
			log.Printf("default snapshot for %q: %v", id, err)
		}
	}
}

// targetsLocked lists the nodes a node=* update applies to.
func (p *peer) targetsLocked() []string {
	var ids []string
	for id := range p.seen {
		ids = append(ids, id)
	}
	for id := range p.snaps {
		if !p.seen[id] {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

// ---------------------------------------------------------------------------
// Control API.

func (p *peer) controlAPI(g *grpcCtl) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, 200, map[string]any{"ok": true, "grpc_running": g.running()})
	})
	mux.HandleFunc("PUT /snapshot", p.putSnapshot)
	mux.HandleFunc("POST /cluster", p.postCluster)
	mux.HandleFunc("POST /grpc/stop", func(w http.ResponseWriter, _ *http.Request) {
		g.stop()
		writeJSON(w, 200, map[string]any{"grpc": g.addr, "running": false})
	})
	mux.HandleFunc("POST /grpc/start", func(w http.ResponseWriter, _ *http.Request) {
		if err := g.start(); err != nil {
			writeJSON(w, 500, map[string]any{"error": err.Error()})
			return
		}
		writeJSON(w, 200, map[string]any{"grpc": g.addr, "running": true})
	})
	mux.HandleFunc("GET /stats", func(w http.ResponseWriter, _ *http.Request) {
		p.mu.Lock()
		defer p.mu.Unlock()
		writeJSON(w, 200, p.stats.view(p.targetsLocked()))
	})
	mux.HandleFunc("DELETE /stats", func(w http.ResponseWriter, _ *http.Request) {
		p.mu.Lock()
		p.stats = stats{}
		p.mu.Unlock()
		writeJSON(w, 200, map[string]any{"ok": true})
	})
	return mux
}

// putSnapshot: PUT /snapshot?node=ID with
// {"version":"v1","resources":{"<type url>":[<Any JSON with @type>...]}}.
func (p *peer) putSnapshot(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Version   string                       `json:"version"`
		Resources map[string][]json.RawMessage `json:"resources"`
	}
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		writeJSON(w, 400, map[string]any{"error": "body: " + err.Error()})
		return
	}
	ns := &nodeSnap{version: body.Version, resources: map[string][]types.Resource{}}
	names := map[string][]string{}
	for typeURL, raws := range body.Resources {
		ns.resources[typeURL] = []types.Resource{}
		names[typeURL] = []string{}
		for i, raw := range raws {
			msg, err := parseAny(raw)
			if err != nil {
				writeJSON(w, 400, map[string]any{"error": fmt.Sprintf("resources[%q][%d]: %v", typeURL, i, err)})
				return
			}
			ns.resources[typeURL] = append(ns.resources[typeURL], msg)
			names[typeURL] = append(names[typeURL], cachev3.GetResourceName(msg))
		}
	}
	// Fail early on unknown type URLs (NewSnapshot rejects them).
	if _, err := cachev3.NewSnapshot(ns.version, ns.resources); err != nil {
		writeJSON(w, 400, map[string]any{"error": err.Error()})
		return
	}

	node := r.URL.Query().Get("node")
	p.mu.Lock()
	defer p.mu.Unlock()
	targets := []string{node}
	if node == "" || node == "*" {
		p.def = ns
		targets = p.targetsLocked()
	}
	var consistent error
	for _, id := range targets {
		c, err := p.setLocked(id, ns)
		if err != nil {
			writeJSON(w, 500, map[string]any{"error": err.Error()})
			return
		}
		consistent = c
	}
	if len(targets) == 0 { // default only: still report consistency
		snap, _ := cachev3.NewSnapshot(ns.version, ns.resources)
		consistent = snap.Consistent()
	}
	writeJSON(w, 200, map[string]any{
		"nodes":            targets,
		"default":          node == "" || node == "*",
		"version":          ns.version,
		"resources":        names,
		"consistent_error": errString(consistent),
	})
}

// postCluster: POST /cluster?node=ID[&version=V] with one Cluster JSON (plain,
// or as Any with "@type"). Replaces the cluster of the same name, or adds it,
// in the node's current snapshot (node=* or none: the default snapshot and
// every known node). Version: ?version=, else previous version + "+1".
func (p *peer) postCluster(w http.ResponseWriter, r *http.Request) {
	raw, err := io.ReadAll(r.Body)
	if err != nil {
		writeJSON(w, 400, map[string]any{"error": err.Error()})
		return
	}
	var probe map[string]json.RawMessage
	if err := json.Unmarshal(raw, &probe); err != nil {
		writeJSON(w, 400, map[string]any{"error": "body: " + err.Error()})
		return
	}
	var cluster types.Resource
	if _, ok := probe["@type"]; ok {
		cluster, err = parseAny(raw)
	} else {
		c := &clusterv3.Cluster{}
		err = protojson.Unmarshal(raw, c)
		cluster = c
	}
	if err != nil {
		writeJSON(w, 400, map[string]any{"error": "cluster: " + err.Error()})
		return
	}
	name := cachev3.GetResourceName(cluster)

	node := r.URL.Query().Get("node")
	p.mu.Lock()
	defer p.mu.Unlock()
	all := node == "" || node == "*"
	targets := []string{node}
	if all {
		targets = p.targetsLocked()
	}
	// withCluster copies base and puts the cluster in it under a new version.
	withCluster := func(base *nodeSnap) *nodeSnap {
		if base == nil {
			base = &nodeSnap{resources: map[string][]types.Resource{}}
		}
		ns := &nodeSnap{version: r.URL.Query().Get("version"), resources: map[string][]types.Resource{}}
		if ns.version == "" {
			ns.version = base.version + "+1"
		}
		for t, rs := range base.resources {
			ns.resources[t] = slices.Clone(rs)
		}
		cl := ns.resources[resourcev3.ClusterType]
		i := slices.IndexFunc(cl, func(x types.Resource) bool { return cachev3.GetResourceName(x) == name })
		if i >= 0 {
			cl[i] = cluster
		} else {
			cl = append(cl, cluster)
		}
		ns.resources[resourcev3.ClusterType] = cl
		return ns
	}
	out := []map[string]any{}
	if all {
		p.def = withCluster(p.def)
		out = append(out, map[string]any{"node": "*", "version": p.def.version})
	}
	for _, id := range targets {
		base := p.snaps[id]
		if base == nil {
			base = p.def
		}
		ns := withCluster(base)
		c, err := p.setLocked(id, ns)
		if err != nil {
			writeJSON(w, 500, map[string]any{"error": err.Error()})
			return
		}
		out = append(out, map[string]any{"node": id, "version": ns.version, "consistent_error": errString(c)})
	}
	writeJSON(w, 200, map[string]any{"cluster": name, "updated": out})
}

// parseAny decodes google.protobuf.Any JSON ("@type" plus the message's
// fields) and returns the embedded message.
func parseAny(raw []byte) (types.Resource, error) {
	a := &anypb.Any{}
	if err := protojson.Unmarshal(raw, a); err != nil {
		return nil, err
	}
	return a.UnmarshalNew()
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func errString(err error) any {
	if err == nil {
		return nil
	}
	return err.Error()
}

// ---------------------------------------------------------------------------
// Callbacks (serverv3.Callbacks): record everything, apply default snapshot.
// go-control-plane calls them synchronously on the stream's goroutine.

// stats holds bounded lists of what the callbacks saw. Guarded by peer.mu.
// SotW and delta streams are numbered by separate counters in
// go-control-plane, so a stream is identified by (stream, delta).
type stats struct {
	seq            int64
	streamsOpened  int
	streamsClosed  int
	streams        []map[string]any
	requests       []map[string]any
	responses      []map[string]any
	fetchRequests  []map[string]any
	fetchResponses []map[string]any
	acks           []map[string]any
	nacks          []map[string]any
}

func push(list *[]map[string]any, e map[string]any) {
	if len(*list) >= maxEntries {
		*list = (*list)[len(*list)-maxEntries+1:]
	}
	*list = append(*list, e)
}

func (s *stats) entry(kv map[string]any) map[string]any {
	s.seq++
	kv["seq"] = s.seq
	kv["time"] = time.Now().UTC().Format(time.RFC3339Nano)
	return kv
}

func (s *stats) view(nodes []string) map[string]any {
	nz := func(l []map[string]any) []map[string]any {
		if l == nil {
			return []map[string]any{}
		}
		return l
	}
	return map[string]any{
		"streams_opened":  s.streamsOpened,
		"streams_closed":  s.streamsClosed,
		"streams":         nz(s.streams),
		"requests":        nz(s.requests),
		"responses":       nz(s.responses),
		"fetch_requests":  nz(s.fetchRequests),
		"fetch_responses": nz(s.fetchResponses),
		"acks":            nz(s.acks),
		"nacks":           nz(s.nacks),
		"nodes":           nodes,
	}
}

// recordRequest stores a request and files it as ack/nack when it carries a nonce.
func (p *peer) recordRequest(list *[]map[string]any, e map[string]any, nonce string, hasError bool) {
	if !p.record {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	e = p.stats.entry(e)
	push(list, e)
	if list == &p.stats.fetchRequests || nonce == "" {
		return
	}
	if hasError {
		push(&p.stats.nacks, e)
	} else {
		push(&p.stats.acks, e)
	}
}

func (p *peer) recordStream(delta bool, id int64, typeURL, event, node string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if event == "open" {
		p.stats.streamsOpened++
	} else {
		p.stats.streamsClosed++
		if delta {
			delete(p.deltaNode, id)
		}
	}
	if !p.record {
		return
	}
	push(&p.stats.streams, p.stats.entry(map[string]any{
		"stream": id, "delta": delta, "event": event, "type_url": typeURL, "node_id": node,
	}))
}

func (p *peer) OnStreamOpen(_ context.Context, id int64, typeURL string) error {
	p.recordStream(false, id, typeURL, "open", "")
	return nil
}

func (p *peer) OnStreamClosed(id int64, node *core.Node) {
	p.recordStream(false, id, "", "close", node.GetId())
}

func (p *peer) OnDeltaStreamOpen(_ context.Context, id int64, typeURL string) error {
	p.recordStream(true, id, typeURL, "open", "")
	return nil
}

func (p *peer) OnDeltaStreamClosed(id int64, node *core.Node) {
	p.recordStream(true, id, "", "close", node.GetId())
}

func sotwRequest(req *discovery.DiscoveryRequest) map[string]any {
	return map[string]any{
		"type_url":       req.GetTypeUrl(),
		"node_id":        req.GetNode().GetId(),
		"version_info":   req.GetVersionInfo(),
		"response_nonce": req.GetResponseNonce(),
		"resource_names": nonNil(req.GetResourceNames()),
		"error_detail":   statusJSON(req.GetErrorDetail().GetCode(), req.GetErrorDetail().GetMessage(), req.GetErrorDetail() != nil),
		"delta":          false,
	}
}

func (p *peer) OnStreamRequest(id int64, req *discovery.DiscoveryRequest) error {
	// go-control-plane has already copied the stream's node into req.
	p.sawNode(p.hash.ID(req.GetNode()))
	e := sotwRequest(req)
	e["stream"] = id
	p.recordRequest(&p.stats.requests, e, req.GetResponseNonce(), req.GetErrorDetail() != nil)
	return nil
}

func (p *peer) OnStreamResponse(_ context.Context, id int64, _ *discovery.DiscoveryRequest, resp *discovery.DiscoveryResponse) {
	if !p.record {
		return
	}
	e := sotwResponse(resp)
	e["stream"] = id
	e["delta"] = false
	p.mu.Lock()
	defer p.mu.Unlock()
	push(&p.stats.responses, p.stats.entry(e))
}

func (p *peer) OnStreamDeltaRequest(id int64, req *discovery.DeltaDiscoveryRequest) error {
	// Delta requests carry the node only on the first request of a stream,
	// and go-control-plane fills it in only after this callback.
	p.mu.Lock()
	if req.GetNode() != nil {
		p.deltaNode[id] = req.GetNode()
	}
	node := p.deltaNode[id]
	p.mu.Unlock()
	p.sawNode(p.hash.ID(node))
	e := map[string]any{
		"stream":                    id,
		"type_url":                  req.GetTypeUrl(),
		"node_id":                   node.GetId(),
		"response_nonce":            req.GetResponseNonce(),
		"subscribe":                 nonNil(req.GetResourceNamesSubscribe()),
		"unsubscribe":               nonNil(req.GetResourceNamesUnsubscribe()),
		"initial_resource_versions": nonNilMap(req.GetInitialResourceVersions()),
		"error_detail":              statusJSON(req.GetErrorDetail().GetCode(), req.GetErrorDetail().GetMessage(), req.GetErrorDetail() != nil),
		"delta":                     true,
	}
	p.recordRequest(&p.stats.requests, e, req.GetResponseNonce(), req.GetErrorDetail() != nil)
	return nil
}

func (p *peer) OnStreamDeltaResponse(id int64, _ *discovery.DeltaDiscoveryRequest, resp *discovery.DeltaDiscoveryResponse) {
	if !p.record {
		return
	}
	names := []string{}
	for _, r := range resp.GetResources() {
		names = append(names, r.GetName())
	}
	e := map[string]any{
		"stream":            id,
		"delta":             true,
		"type_url":          resp.GetTypeUrl(),
		"version_info":      resp.GetSystemVersionInfo(),
		"nonce":             resp.GetNonce(),
		"resources":         names,
		"removed_resources": nonNil(resp.GetRemovedResources()),
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	push(&p.stats.responses, p.stats.entry(e))
}

func (p *peer) OnFetchRequest(_ context.Context, req *discovery.DiscoveryRequest) error {
	p.sawNode(p.hash.ID(req.GetNode()))
	p.recordRequest(&p.stats.fetchRequests, sotwRequest(req), "", false)
	return nil
}

func (p *peer) OnFetchResponse(_ *discovery.DiscoveryRequest, resp *discovery.DiscoveryResponse) {
	if !p.record {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	push(&p.stats.fetchResponses, p.stats.entry(sotwResponse(resp)))
}

// sotwResponse names the resources of a SotW/fetch response by decoding them.
func sotwResponse(resp *discovery.DiscoveryResponse) map[string]any {
	names := []string{}
	for _, a := range resp.GetResources() {
		name := "?"
		if m, err := a.UnmarshalNew(); err == nil {
			name = cachev3.GetResourceName(m)
		}
		names = append(names, name)
	}
	return map[string]any{
		"type_url":     resp.GetTypeUrl(),
		"version_info": resp.GetVersionInfo(),
		"nonce":        resp.GetNonce(),
		"resources":    names,
	}
}

func statusJSON(code int32, msg string, present bool) any {
	if !present {
		return nil
	}
	return map[string]any{"code": code, "message": msg}
}

func nonNilMap(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

var _ serverv3.Callbacks = (*peer)(nil)
