// Command mads-server is a test peer that plays a Kuma control plane's
// Monitoring Assignment Discovery Service (MADS) over gRPC: it serves
// kuma.observability.v1.MonitoringAssignment resources through
// go-control-plane's xDS server (pkg/server/v3) on ADS (SotW and delta) and on
// Kuma's per-type MonitoringAssignmentDiscoveryService (Stream, Delta, Fetch),
// with gRPC server reflection. A JSON control API sets the assignments, stops
// and restarts the gRPC listener, and shows what go-control-plane's callbacks
// saw (requests, ACKs, NACKs, responses).
//
// Usage:
//
//	mads-server --grpc 127.0.0.1:0 --http 127.0.0.1:0
//
// The first line on stdout is one JSON object with the bound addresses:
//
//	{"grpc":"127.0.0.1:41000","http":"127.0.0.1:41001"}
//
// Logs go to stderr. The process exits when stdin is closed or on
// SIGTERM/SIGINT. See README.md.
package main

import (
	"bytes"
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
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/reflection"
	"google.golang.org/protobuf/encoding/protojson"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	gcplog "github.com/envoyproxy/go-control-plane/pkg/log"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"github.com/prometheus/prometheus/discovery/xds"
)

// maxEntries bounds every list kept by the recorder.
const maxEntries = 10000

func main() {
	grpcAddr := flag.String("grpc", "127.0.0.1:0", "loopback address for the gRPC xDS server")
	httpAddr := flag.String("http", "127.0.0.1:0", "loopback address for the JSON control API")
	verbose := flag.Bool("v", false, "also log go-control-plane's debug messages")
	flag.Parse()
	log.SetOutput(os.Stderr)
	log.SetFlags(log.LstdFlags | log.Lmicroseconds)

	for _, a := range []string{*grpcAddr, *httpAddr} {
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

	c := newAssignmentCache(logger)
	rec := &recorder{deltaNode: map[int64]*core.Node{}}
	srv := serverv3.NewServer(ctx, c, rec)

	g := &grpcCtl{addr: *grpcAddr, xds: srv}
	if err := g.start(); err != nil {
		log.Fatalf("grpc listen: %v", err)
	}
	httpLis, err := net.Listen("tcp", *httpAddr)
	if err != nil {
		log.Fatalf("http listen: %v", err)
	}
	ctl := &http.Server{Handler: controlAPI(c, rec, g)}
	go func() {
		if err := ctl.Serve(httpLis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Fatalf("control API: %v", err)
		}
	}()

	addrs, _ := json.Marshal(struct {
		GRPC string `json:"grpc"`
		HTTP string `json:"http"`
	}{g.addr, httpLis.Addr().String()})
	fmt.Fprintf(os.Stdout, "%s\n", addrs)
	_ = os.Stdout.Sync()
	log.Printf("listening: %s", addrs)

	<-ctx.Done()
	g.stop()
	_ = ctl.Close()
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
	mu   sync.Mutex
	addr string // after the first start: the bound address, reused on restart
	xds  serverv3.Server
	srv  *grpc.Server
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
	discovery.RegisterAggregatedDiscoveryServiceServer(s, g.xds)
	s.RegisterService(&madsServiceDesc, madsImpl{xds: g.xds})
	reflection.Register(s) // grpc.reflection.v1 and v1alpha
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
// Control API.

func controlAPI(c *assignmentCache, rec *recorder, g *grpcCtl) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, 200, map[string]any{"ok": true, "grpc": g.addr, "grpc_running": g.running(), "held_sotw_watches": c.HeldWatches()})
	})
	mux.HandleFunc("PUT /assignments", func(w http.ResponseWriter, r *http.Request) { putAssignments(c, w, r) })
	mux.HandleFunc("GET /assignments", func(w http.ResponseWriter, _ *http.Request) {
		set, version, names, res := c.Current()
		out := []json.RawMessage{}
		for _, n := range names {
			b, _ := protojson.MarshalOptions{UseProtoNames: true}.Marshal(res[n].(*xds.MonitoringAssignment))
			out = append(out, b)
		}
		writeJSON(w, 200, map[string]any{"set": set, "version": version, "names": nonNil(names), "assignments": out})
	})
	mux.HandleFunc("GET /requests", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, 200, rec.view())
	})
	mux.HandleFunc("DELETE /requests", func(w http.ResponseWriter, _ *http.Request) {
		rec.reset()
		writeJSON(w, 200, map[string]any{"ok": true})
	})
	mux.HandleFunc("POST /stop", func(w http.ResponseWriter, _ *http.Request) {
		g.stop()
		writeJSON(w, 200, map[string]any{"grpc": g.addr, "running": false})
	})
	mux.HandleFunc("POST /start", func(w http.ResponseWriter, _ *http.Request) {
		if err := g.start(); err != nil {
			writeJSON(w, 500, map[string]any{"error": err.Error()})
			return
		}
		writeJSON(w, 200, map[string]any{"grpc": g.addr, "running": true})
	})
	return mux
}

// putAssignments: PUT /assignments with
//
//	{"version":"v1","assignments":[{"name":"(optional)","mesh":"default","service":"web",
//	  "labels":{"team":"a"},"targets":[{"name":"web-1","scheme":"http",
//	  "address":"10.0.0.1:9090","metrics_path":"/metrics","labels":{"k":"v"}}]}]}
//
// Each assignment but its "name" is a kuma.observability.v1.MonitoringAssignment
// in proto3 JSON (protojson: metrics_path or metricsPath; unknown fields are
// rejected). "name" is the xDS resource name (default
// "/meshes/<mesh>/services/<service>"); names must be unique.
func putAssignments(c *assignmentCache, w http.ResponseWriter, r *http.Request) {
	var body struct {
		Version     *string           `json:"version"`
		Assignments []json.RawMessage `json:"assignments"`
	}
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&body); err != nil {
		writeJSON(w, 400, map[string]any{"error": "body: " + err.Error()})
		return
	}
	if body.Version == nil {
		writeJSON(w, 400, map[string]any{"error": `body: "version" is required`})
		return
	}
	names := []string{}
	res := map[string]types.Resource{}
	for i, raw := range body.Assignments {
		var fields map[string]json.RawMessage
		if err := json.Unmarshal(raw, &fields); err != nil {
			writeJSON(w, 400, map[string]any{"error": fmt.Sprintf("assignments[%d]: %v", i, err)})
			return
		}
		name := ""
		if n, ok := fields["name"]; ok {
			if err := json.Unmarshal(n, &name); err != nil {
				writeJSON(w, 400, map[string]any{"error": fmt.Sprintf("assignments[%d].name: %v", i, err)})
				return
			}
			delete(fields, "name")
		}
		rest, _ := json.Marshal(fields)
		ma := &xds.MonitoringAssignment{}
		if err := protojson.Unmarshal(rest, ma); err != nil {
			writeJSON(w, 400, map[string]any{"error": fmt.Sprintf("assignments[%d]: %v", i, err)})
			return
		}
		if name == "" {
			name = fmt.Sprintf("/meshes/%s/services/%s", ma.GetMesh(), ma.GetService())
		}
		if _, dup := res[name]; dup {
			writeJSON(w, 400, map[string]any{"error": fmt.Sprintf("assignments[%d]: duplicate name %q", i, name)})
			return
		}
		names = append(names, name)
		res[name] = ma
	}
	answered := c.Set(*body.Version, names, res)
	log.Printf("assignments set: version %q, %d resources, %d held SotW watches answered", *body.Version, len(names), answered)
	writeJSON(w, 200, map[string]any{"version": *body.Version, "names": names, "answered_watches": answered})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		http.Error(w, err.Error(), 500)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(buf.Bytes())
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func nonNilMap(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}
