// Command istio-peer is a thin test peer around Istio's own xDS server: the
// fake discovery server of istio.io/istio/pilot/test/xds, which runs
// istiod's real config generator (the same PushContext, generators, push
// queue and ADS code as istiod) over a fake Kubernetes client holding a small
// bookinfo mesh (mesh.go). It serves Istio's ADS (SotW and delta; Istio has
// no per-type services) on a loopback TCP port, so that xds-gateway can use
// it as its upstream, and a small JSON control API: change Istio config, move
// pods in and out of the mesh, read what the streams did (ACKs, NACKs,
// pushes), ask Istio directly for what it sends a node, and get the
// descriptors of the Istio-specific types inside Envoy config.
//
// Usage:
//
//	istio-peer --grpc 127.0.0.1:0 --http 127.0.0.1:0
//
// The first line on stdout is one JSON object with the bound addresses:
//
//	{"grpc":"127.0.0.1:41000","http":"127.0.0.1:41001"}
//
// Logs (Istio's, too) go to stderr. The process exits when stdin is closed
// (so it dies with the test that spawned it) or on SIGTERM/SIGINT. Only
// loopback addresses are accepted. See README.md.
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
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/reflection"

	istiogrpc "istio.io/istio/pilot/pkg/grpc"
	"istio.io/istio/pilot/test/xds"
	istiokeepalive "istio.io/istio/pkg/keepalive"
	istiolog "istio.io/istio/pkg/log"
	xdspkg "istio.io/istio/pkg/xds"
)

func main() {
	grpcAddr := flag.String("grpc", "127.0.0.1:0", "loopback address for Istio's gRPC ADS server")
	httpAddr := flag.String("http", "127.0.0.1:0", "loopback address for the JSON control API")
	debounce := flag.Duration("debounce", 100*time.Millisecond, "Istio's push debounce (PILOT_DEBOUNCE_AFTER): istiod's default; 0 (as Istio's own tests run) pushes each event on its own")
	logLevels := flag.String("log-level", "default:info,ads:info,model:warn,klog:warn,krt:warn", "Istio log output levels (scope:level,...)")
	flag.Parse()

	// Istio logs to stdout by default and redirects the standard log package
	// into its own logger: everything must go to stderr, stdout carries only
	// the addresses line.
	opts := istiolog.DefaultOptions()
	opts.OutputPaths = []string{"stderr"}
	opts.ErrorOutputPaths = []string{"stderr"}
	// Options keeps its per-scope levels private: set them the way its
	// own --log_output_level flag does.
	opts.AttachFlags(
		func(*[]string, string, []string, string) {},
		func(p *string, name string, _ string, _ string) {
			if name == "log_output_level" {
				*p = *logLevels
			}
		},
		func(*int, string, int, string) {},
		func(*bool, string, bool, string) {})
	if err := istiolog.Configure(opts); err != nil {
		fmt.Fprintf(os.Stderr, "configuring Istio's logging: %v\n", err)
		os.Exit(2)
	}
	log.SetFlags(0)

	for _, a := range []string{*grpcAddr, *httpAddr} {
		if err := requireLoopback(a); err != nil {
			log.Printf("refusing address: %v", err)
			os.Exit(2)
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

	t := newFailer()
	grpcLis, err := net.Listen("tcp", *grpcAddr)
	if err != nil {
		t.Fatalf("grpc listen: %v", err)
	}
	httpLis, err := net.Listen("tcp", *httpAddr)
	if err != nil {
		t.Fatalf("http listen: %v", err)
	}

	start := time.Now()
	k8s, err := meshObjects()
	if err != nil {
		t.Fatalf("mesh: %v", err)
	}
	// Istio's fake discovery server: istiod's config generator, push queue
	// and ADS server over a fake Kubernetes client. It serves its own
	// grpc.Server on an in-memory bufconn listener; the peer registers the
	// same DiscoveryServer on a grpc.Server of its own on TCP (below).
	fake := xds.NewFakeDiscoveryServer(t, xds.FakeOptions{
		KubernetesObjects: k8s,
		ConfigString:      meshConfigString,
		MeshConfig:        meshConfig(),
		DebounceTime:      *debounce,
	})
	log.Printf("Istio's fake discovery server is up in %v", time.Since(start).Round(time.Millisecond))

	rec := newRecorder()
	// istiod's own gRPC options (bootstrap/server.go initGrpcServer): its
	// keepalive, message size and stream limits, plus the peer's recorder.
	grpcOpts := istiogrpc.ServerOptions(istiokeepalive.DefaultOption(), xdspkg.RecordRecvSize)
	grpcOpts = append(grpcOpts, grpc.ChainStreamInterceptor(rec.interceptor))
	grpcSrv := grpc.NewServer(grpcOpts...)
	fake.Discovery.Register(grpcSrv) // AggregatedDiscoveryService: SotW and delta ADS
	reflection.Register(grpcSrv)     // as istiod does
	go func() {
		if err := grpcSrv.Serve(grpcLis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			log.Printf("grpc serve ended: %v", err)
		}
	}()

	p := newPeer(fake, grpcLis.Addr().String(), rec)
	ctlSrv := &http.Server{Handler: p.controlAPI(), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := ctlSrv.Serve(httpLis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Printf("control API: %v", err)
		}
	}()

	addrs, _ := json.Marshal(struct {
		GRPC string `json:"grpc"`
		HTTP string `json:"http"`
	}{grpcLis.Addr().String(), httpLis.Addr().String()})
	fmt.Fprintf(os.Stdout, "%s\n", addrs)
	_ = os.Stdout.Sync()
	log.Printf("listening: %s", addrs)

	<-ctx.Done()
	p.close()
	grpcSrv.Stop()
	_ = ctlSrv.Close()
	t.shutdown()
	_ = istiolog.Sync()
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
