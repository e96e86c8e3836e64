// Command kuma-sd runs Prometheus's own Kuma service discovery client
// (github.com/prometheus/prometheus/discovery/xds, kuma_sd_configs) against a
// REST xDS server and prints every target-group update it produces.
//
// Usage:
//
//	kuma-sd --server http://127.0.0.1:8080 [--refresh-interval 15s]
//	        [--fetch-timeout 2m] [--client-id prometheus-1] [--metrics 127.0.0.1:0]
//
// stdout, one JSON object a line. The first line has the bound address of the
// metrics endpoint (Prometheus's discovery metrics, promhttp, private registry):
//
//	{"metrics":"127.0.0.1:41000"}
//
// then one line per update the discoverer sends on its channel:
//
//	{"groups":[{"source":"kuma","labels":{},"targets":[{"__address__":"10.0.0.1:9090",...}]}]}
//
// Logs (Prometheus's slog logger) go to stderr. The process exits when stdin
// is closed or on SIGTERM/SIGINT. See README.md.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/common/model"

	"github.com/prometheus/prometheus/discovery"
	"github.com/prometheus/prometheus/discovery/targetgroup"
	"github.com/prometheus/prometheus/discovery/xds"
)

func main() {
	os.Exit(run())
}

func run() int {
	server := flag.String("server", "", "the MADS server's base URL (http or https), e.g. http://127.0.0.1:8080; Prometheus POSTs to <server>/v3/discovery:monitoringassignments")
	refresh := flag.String("refresh-interval", "15s", "refresh_interval (Prometheus duration: 15s, 500ms, 1m30s)")
	fetchTimeout := flag.String("fetch-timeout", "2m", "fetch_timeout (Prometheus duration); sent as ?fetch-timeout= and the HTTP client timeout is this + 15s")
	clientID := flag.String("client-id", "", "client_id, sent as node.id; empty: Prometheus uses the host's FQDN (else \"prometheus\")")
	metricsAddr := flag.String("metrics", "127.0.0.1:0", "loopback address for the discovery metrics (GET /metrics)")
	caFile := flag.String("ca-file", "", "tls_config.ca_file for an https server")
	insecure := flag.Bool("insecure-skip-verify", false, "tls_config.insecure_skip_verify")
	verbose := flag.Bool("v", false, "log at debug level (Prometheus logs each new version at debug)")
	flag.Parse()

	level := slog.LevelInfo
	if *verbose {
		level = slog.LevelDebug
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))

	if err := requireLoopback(*metricsAddr); err != nil {
		logger.Error("refusing --metrics address", "err", err)
		return 2
	}

	// The config as Prometheus builds it from YAML: DefaultKumaSDConfig, then
	// the fields set, then KumaSDConfig.UnmarshalYAML's checks (kuma.go).
	cfg := xds.DefaultKumaSDConfig
	cfg.Server = *server
	cfg.ClientID = *clientID
	var err error
	if cfg.RefreshInterval, err = model.ParseDuration(*refresh); err != nil {
		logger.Error("bad --refresh-interval", "err", err)
		return 2
	}
	if cfg.FetchTimeout, err = model.ParseDuration(*fetchTimeout); err != nil {
		logger.Error("bad --fetch-timeout", "err", err)
		return 2
	}
	if cfg.RefreshInterval <= 0 {
		logger.Error("--refresh-interval must be positive")
		return 2
	}
	cfg.HTTPClientConfig.TLSConfig.CAFile = *caFile
	cfg.HTTPClientConfig.TLSConfig.InsecureSkipVerify = *insecure
	if err := validate(&cfg); err != nil {
		logger.Error("bad config", "err", err)
		return 2
	}

	// Metrics as Prometheus's discovery manager sets them up: refresh
	// metrics (unused by the xds package, registered all the same), then the
	// mechanism's own, registered before the discoverer runs.
	reg := prometheus.NewRegistry()
	refreshMetrics := discovery.NewRefreshMetrics(reg)
	if err := refreshMetrics.Register(); err != nil {
		logger.Error("register refresh metrics", "err", err)
		return 1
	}
	metrics := cfg.NewDiscovererMetrics(reg, refreshMetrics)
	if err := metrics.Register(); err != nil {
		logger.Error("register kuma metrics", "err", err)
		return 1
	}
	updates := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "kuma_sd_peer_updates_total",
		Help: "Target group updates the discoverer sent (one stdout line each); not a Prometheus metric.",
	})
	reg.MustRegister(updates)

	d, err := cfg.NewDiscoverer(discovery.DiscovererOptions{
		Logger:  logger.With("discovery", "kuma"),
		Metrics: metrics,
		SetName: "kuma-sd",
	})
	if err != nil {
		logger.Error("new discoverer", "err", err)
		return 1
	}

	lis, err := net.Listen("tcp", *metricsAddr)
	if err != nil {
		logger.Error("metrics listen", "err", err)
		return 1
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	msrv := &http.Server{Handler: mux}
	go func() {
		if err := msrv.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Error("metrics server", "err", err)
		}
	}()

	out := &lineWriter{w: os.Stdout}
	first, _ := json.Marshal(map[string]string{"metrics": lis.Addr().String()})
	out.line(first)

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		logger.Info("stdin closed, exiting")
		stop()
	}()

	ch := make(chan []*targetgroup.Group)
	done := make(chan struct{})
	go func() {
		defer close(done)
		d.Run(ctx, ch)
	}()
	logger.Info("kuma discovery running", "server", cfg.Server, "client_id", cfg.ClientID,
		"refresh_interval", cfg.RefreshInterval.String(), "fetch_timeout", cfg.FetchTimeout.String())

	for {
		select {
		case <-ctx.Done():
			_ = msrv.Close()
			// Run returns at its next tick at the latest (it waits on its
			// ticker after each poll); do not wait for it.
			return 0
		case <-done:
			logger.Error("discoverer returned")
			return 1
		case groups := <-ch:
			updates.Inc()
			b, err := json.Marshal(map[string]any{"groups": groupsJSON(groups)})
			if err != nil {
				logger.Error("marshal update", "err", err)
				continue
			}
			out.line(b)
		}
	}
}

// validate repeats KumaSDConfig.UnmarshalYAML's checks (kuma.go).
func validate(c *xds.KumaSDConfig) error {
	if c.Server == "" {
		return errors.New("--server is required")
	}
	// NewHTTPResourceClient checks the scheme and host again.
	return c.HTTPClientConfig.Validate()
}

type groupJSON struct {
	Source  string           `json:"source"`
	Labels  model.LabelSet   `json:"labels"`
	Targets []model.LabelSet `json:"targets"`
}

// groupsJSON keeps Prometheus's groups and targets in order, with every
// label; nil label sets and lists become {} and [].
func groupsJSON(groups []*targetgroup.Group) []groupJSON {
	out := []groupJSON{}
	for _, g := range groups {
		if g == nil {
			continue
		}
		j := groupJSON{Source: g.Source, Labels: g.Labels, Targets: g.Targets}
		if j.Labels == nil {
			j.Labels = model.LabelSet{}
		}
		if j.Targets == nil {
			j.Targets = []model.LabelSet{}
		}
		out = append(out, j)
	}
	return out
}

type lineWriter struct {
	mu sync.Mutex
	w  *os.File
}

func (l *lineWriter) line(b []byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	fmt.Fprintf(l.w, "%s\n", b)
	_ = l.w.Sync()
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
