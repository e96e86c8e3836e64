// End-to-end checks of the two peers, without xds-gateway: the binaries are
// built once (TestMain), started as a test harness would start them, and
// driven over their real interfaces.
package kuma_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	rpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/prometheus/prometheus/discovery/xds"
)

const maType = "type.googleapis.com/kuma.observability.v1.MonitoringAssignment"

// Prometheus 3.15.1 is Go module github.com/prometheus/prometheus v0.315.1.
const (
	versionVar  = "github.com/prometheus/common/version.Version"
	promVersion = "3.15.1"
)

var binDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "kuma-peers-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	goBin := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(goBin); err != nil {
		goBin = "go"
	}
	// As README.md builds them (the version stamped as Prometheus's release
	// build does, so that the User-Agent is Prometheus/<version>), but
	// without -trimpath: the packages then come from the build cache entries
	// this test binary's build just made, which halves a cold run.
	cmd := exec.Command(goBin, "build", "-ldflags", "-X "+versionVar+"="+promVersion,
		"-o", dir+string(os.PathSeparator), "./cmd/kuma-sd", "./cmd/mads-server")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building the peers:", err)
		os.Exit(1)
	}
	binDir = dir
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// ---------------------------------------------------------------------------
// Process harness.

type proc struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	first  map[string]string
	lines  chan string // stdout lines after the first
	stderr *bytes.Buffer
	exited chan error
}

type syncBuffer struct {
	mu sync.Mutex
	bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.Buffer.Write(p)
}

// start runs a peer, reads its first stdout line (the addresses) and, at
// cleanup, closes its stdin and requires it to exit by itself.
func start(t *testing.T, name string, args ...string) *proc {
	t.Helper()
	cmd := exec.Command(filepath.Join(binDir, name), args...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	errBuf := &syncBuffer{}
	cmd.Stderr = errBuf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proc{cmd: cmd, stdin: stdin, lines: make(chan string, 1000), exited: make(chan error, 1)}
	firstCh := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<20), 16<<20)
		first := true
		for sc.Scan() {
			if first {
				firstCh <- sc.Text()
				first = false
				continue
			}
			p.lines <- sc.Text()
		}
		close(p.lines)
		p.exited <- cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = stdin.Close()
		select {
		case <-p.exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			t.Errorf("%s did not exit after stdin closed", name)
		}
		if t.Failed() {
			errBuf.mu.Lock()
			t.Logf("%s stderr:\n%s", name, errBuf.String())
			errBuf.mu.Unlock()
		}
	})
	select {
	case line := <-firstCh:
		if err := json.Unmarshal([]byte(line), &p.first); err != nil {
			t.Fatalf("%s first line %q: %v", name, line, err)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("%s printed no first line", name)
	}
	return p
}

func httpDo(t *testing.T, method, url, body string) map[string]any {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("%s %s: %d %s", method, url, resp.StatusCode, b)
	}
	var out map[string]any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("%s %s: %v: %s", method, url, err, b)
	}
	return out
}

// ---------------------------------------------------------------------------
// mads-server.

type madsPeer struct {
	*proc
	grpc, http string
}

func startMADS(t *testing.T) *madsPeer {
	p := start(t, "mads-server", "--grpc", "127.0.0.1:0", "--http", "127.0.0.1:0")
	return &madsPeer{proc: p, grpc: p.first["grpc"], http: "http://" + p.first["http"]}
}

func (m *madsPeer) put(t *testing.T, body string) map[string]any {
	t.Helper()
	return httpDo(t, "PUT", m.http+"/assignments", body)
}

func (m *madsPeer) requests(t *testing.T) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, r := range httpDo(t, "GET", m.http+"/requests", "")["requests"].([]any) {
		out = append(out, r.(map[string]any))
	}
	return out
}

func dial(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// recv waits for one message on a client stream, with a deadline.
func recv[T any](t *testing.T, s interface{ RecvMsg(any) error }) *T {
	t.Helper()
	out := new(T)
	done := make(chan error, 1)
	go func() { done <- s.RecvMsg(out) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("recv: %v", err)
		}
		return out
	case <-time.After(10 * time.Second):
		t.Fatalf("recv: timed out")
	}
	return nil
}

func assignments(t *testing.T, resp *discovery.DiscoveryResponse) []*xds.MonitoringAssignment {
	t.Helper()
	var out []*xds.MonitoringAssignment
	for _, a := range resp.GetResources() {
		if a.GetTypeUrl() != maType {
			t.Fatalf("resource type %q", a.GetTypeUrl())
		}
		ma := &xds.MonitoringAssignment{}
		if err := a.UnmarshalTo(ma); err != nil {
			t.Fatal(err)
		}
		out = append(out, ma)
	}
	return out
}

const twoAssignments = `{"version":"v1","assignments":[
 {"mesh":"default","service":"web","labels":{"team":"a"},
  "targets":[{"name":"web-1","scheme":"http","address":"10.0.0.1:9090","metrics_path":"/metrics","labels":{"k":"v"}}]},
 {"name":"db","mesh":"default","service":"db",
  "targets":[{"name":"db-1","scheme":"https","address":"10.0.0.2:9090","metricsPath":"/stats"}]}]}`

func TestMADSServerADSSotW(t *testing.T) {
	m := startMADS(t)
	put := m.put(t, twoAssignments)
	if got := fmt.Sprint(put["names"]); got != "[/meshes/default/services/web db]" {
		t.Fatalf("names %s", got)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ads, err := discovery.NewAggregatedDiscoveryServiceClient(dial(t, m.grpc)).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	node := &core.Node{Id: "prom-1"}
	if err := ads.Send(&discovery.DiscoveryRequest{Node: node, TypeUrl: maType}); err != nil {
		t.Fatal(err)
	}
	r1 := recv[discovery.DiscoveryResponse](t, ads)
	if r1.GetVersionInfo() != "v1" || r1.GetTypeUrl() != maType || r1.GetNonce() == "" {
		t.Fatalf("first response %v", r1)
	}
	mas := assignments(t, r1)
	if len(mas) != 2 || mas[0].GetService() != "web" || mas[0].GetLabels()["team"] != "a" ||
		mas[0].GetTargets()[0].GetMetricsPath() != "/metrics" || mas[0].GetTargets()[0].GetLabels()["k"] != "v" ||
		mas[1].GetTargets()[0].GetMetricsPath() != "/stats" || mas[1].GetTargets()[0].GetScheme() != "https" {
		t.Fatalf("assignments %v", mas)
	}
	// ACK, then a new version is pushed (full state: one resource).
	if err := ads.Send(&discovery.DiscoveryRequest{TypeUrl: maType, VersionInfo: "v1", ResponseNonce: r1.GetNonce()}); err != nil {
		t.Fatal(err)
	}
	waitHeld(t, m, 1)
	m.put(t, `{"version":"v2","assignments":[{"mesh":"default","service":"web","targets":[{"name":"web-2","scheme":"http","address":"10.0.0.3:9090"}]}]}`)
	r2 := recv[discovery.DiscoveryResponse](t, ads)
	if r2.GetVersionInfo() != "v2" || len(assignments(t, r2)) != 1 || assignments(t, r2)[0].GetTargets()[0].GetName() != "web-2" {
		t.Fatalf("second response %v", r2)
	}
	// NACK it (version_info: the last accepted one): as with SnapshotCache,
	// a request at a version other than the current one is answered at once,
	// so v2 comes again.
	if err := ads.Send(&discovery.DiscoveryRequest{TypeUrl: maType, VersionInfo: "v1", ResponseNonce: r2.GetNonce(),
		ErrorDetail: &status.Status{Code: 3, Message: "rejected by test"}}); err != nil {
		t.Fatal(err)
	}
	r2b := recv[discovery.DiscoveryResponse](t, ads)
	if r2b.GetVersionInfo() != "v2" || r2b.GetNonce() == r2.GetNonce() {
		t.Fatalf("response to the NACK %v", r2b)
	}
	// ACK it; a PUT of an empty set then still answers, with no resources.
	if err := ads.Send(&discovery.DiscoveryRequest{TypeUrl: maType, VersionInfo: "v2", ResponseNonce: r2b.GetNonce()}); err != nil {
		t.Fatal(err)
	}
	waitHeld(t, m, 1)
	m.put(t, `{"version":"v3","assignments":[]}`)
	r3 := recv[discovery.DiscoveryResponse](t, ads)
	if r3.GetVersionInfo() != "v3" || len(r3.GetResources()) != 0 {
		t.Fatalf("third response %v", r3)
	}

	reqs := m.requests(t)
	if len(reqs) != 4 {
		t.Fatalf("requests %v", reqs)
	}
	want := []struct {
		version, nonce string
		ack, nack      bool
	}{{"", "", false, false}, {"v1", r1.GetNonce(), true, false}, {"v1", r2.GetNonce(), false, true}, {"v2", r2b.GetNonce(), true, false}}
	for i, w := range want {
		r := reqs[i]
		if r["kind"] != "sotw" || r["api"] != "ads" || r["node_id"] != "prom-1" || r["type_url"] != maType ||
			r["version_info"] != w.version || r["response_nonce"] != w.nonce || r["ack"] != w.ack || r["nack"] != w.nack {
			t.Fatalf("request %d: %v", i, r)
		}
	}
	if ed, _ := reqs[2]["error_detail"].(map[string]any); ed["message"] != "rejected by test" || ed["code"] != float64(3) {
		t.Fatalf("error_detail %v", reqs[2]["error_detail"])
	}
}

func waitHeld(t *testing.T, m *madsPeer, n float64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if httpDo(t, "GET", m.http+"/healthz", "")["held_sotw_watches"] == n {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("never %v held watches", n)
}

func TestMADSServerADSDelta(t *testing.T) {
	m := startMADS(t)
	m.put(t, twoAssignments)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ads, err := discovery.NewAggregatedDiscoveryServiceClient(dial(t, m.grpc)).DeltaAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := ads.Send(&discovery.DeltaDiscoveryRequest{Node: &core.Node{Id: "prom-d"}, TypeUrl: maType}); err != nil {
		t.Fatal(err)
	}
	r1 := recv[discovery.DeltaDiscoveryResponse](t, ads)
	var names []string
	for _, r := range r1.GetResources() {
		names = append(names, r.GetName())
		if r.GetVersion() == "" || r.GetResource().GetTypeUrl() != maType {
			t.Fatalf("resource %v", r)
		}
	}
	slices.Sort(names)
	if fmt.Sprint(names) != "[/meshes/default/services/web db]" {
		t.Fatalf("delta names %v", names)
	}
	if err := ads.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: maType, ResponseNonce: r1.GetNonce()}); err != nil {
		t.Fatal(err)
	}
	m.put(t, `{"version":"v2","assignments":[{"name":"db","mesh":"default","service":"db","targets":[{"name":"db-1","scheme":"https","address":"10.0.0.2:9090","metricsPath":"/stats"}]}]}`)
	r2 := recv[discovery.DeltaDiscoveryResponse](t, ads)
	if len(r2.GetResources()) != 0 || fmt.Sprint(r2.GetRemovedResources()) != "[/meshes/default/services/web]" {
		t.Fatalf("delta update %v", r2)
	}
	reqs := m.requests(t)
	if len(reqs) < 2 || reqs[0]["kind"] != "delta" || reqs[0]["node_id"] != "prom-d" || reqs[1]["ack"] != true {
		t.Fatalf("requests %v", reqs)
	}
}

func TestMADSServerMADSService(t *testing.T) {
	m := startMADS(t)
	m.put(t, twoAssignments)
	conn := dial(t, m.grpc)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const svc = "/kuma.observability.v1.MonitoringAssignmentDiscoveryService/"
	bidi := &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}

	// SotW per-type stream: the type URL may be left out.
	s, err := conn.NewStream(ctx, bidi, svc+"StreamMonitoringAssignments")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SendMsg(&discovery.DiscoveryRequest{Node: &core.Node{Id: "prom-s"}}); err != nil {
		t.Fatal(err)
	}
	r := recv[discovery.DiscoveryResponse](t, s)
	if r.GetTypeUrl() != maType || len(r.GetResources()) != 2 {
		t.Fatalf("stream response %v", r)
	}

	// Delta per-type stream.
	d, err := conn.NewStream(ctx, bidi, svc+"DeltaMonitoringAssignments")
	if err != nil {
		t.Fatal(err)
	}
	if err := d.SendMsg(&discovery.DeltaDiscoveryRequest{Node: &core.Node{Id: "prom-s"}}); err != nil {
		t.Fatal(err)
	}
	if dr := recv[discovery.DeltaDiscoveryResponse](t, d); len(dr.GetResources()) != 2 {
		t.Fatalf("delta response %v", dr)
	}

	// Unary fetch: the set, then "skip fetch" at the same version.
	out := &discovery.DiscoveryResponse{}
	if err := conn.Invoke(ctx, svc+"FetchMonitoringAssignments", &discovery.DiscoveryRequest{Node: &core.Node{Id: "prom-f"}}, out); err != nil {
		t.Fatal(err)
	}
	if out.GetVersionInfo() != "v1" || out.GetTypeUrl() != maType || len(out.GetResources()) != 2 {
		t.Fatalf("fetch %v", out)
	}
	err = conn.Invoke(ctx, svc+"FetchMonitoringAssignments", &discovery.DiscoveryRequest{Node: &core.Node{Id: "prom-f"}, VersionInfo: "v1"}, out)
	if err == nil || !strings.Contains(err.Error(), "skip fetch") {
		t.Fatalf("fetch at the current version: %v", err)
	}

	apis := map[string]int{}
	for _, r := range m.requests(t) {
		apis[fmt.Sprint(r["kind"], "/", r["api"])]++
	}
	if apis["sotw/mads"] != 1 || apis["delta/mads"] != 1 || apis["fetch/mads"] != 2 {
		t.Fatalf("requests by kind/api: %v", apis)
	}
}

func TestMADSServerReflection(t *testing.T) {
	m := startMADS(t)
	m.put(t, twoAssignments)
	conn := dial(t, m.grpc)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rs, err := rpb.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := rs.Send(&rpb.ServerReflectionRequest{MessageRequest: &rpb.ServerReflectionRequest_ListServices{ListServices: "*"}}); err != nil {
		t.Fatal(err)
	}
	lr := recv[rpb.ServerReflectionResponse](t, rs)
	var services []string
	for _, s := range lr.GetListServicesResponse().GetService() {
		services = append(services, s.GetName())
	}
	for _, want := range []string{"envoy.service.discovery.v3.AggregatedDiscoveryService", "kuma.observability.v1.MonitoringAssignmentDiscoveryService"} {
		if !slices.Contains(services, want) {
			t.Fatalf("services %v lack %s", services, want)
		}
	}

	if err := rs.Send(&rpb.ServerReflectionRequest{MessageRequest: &rpb.ServerReflectionRequest_FileContainingSymbol{
		FileContainingSymbol: "kuma.observability.v1.MonitoringAssignment"}}); err != nil {
		t.Fatal(err)
	}
	fr := recv[rpb.ServerReflectionResponse](t, rs)
	if e := fr.GetErrorResponse(); e != nil {
		t.Fatalf("reflection error %v", e)
	}
	set := &descriptorpb.FileDescriptorSet{}
	for _, b := range fr.GetFileDescriptorResponse().GetFileDescriptorProto() {
		fd := &descriptorpb.FileDescriptorProto{}
		if err := proto.Unmarshal(b, fd); err != nil {
			t.Fatal(err)
		}
		set.File = append(set.File, fd)
	}
	// The answer is self-contained: the file and its dependencies build a
	// registry in which the message resolves.
	files, err := protodesc.NewFiles(set)
	if err != nil {
		t.Fatalf("descriptors from reflection: %v", err)
	}
	d, err := files.FindDescriptorByName("kuma.observability.v1.MonitoringAssignment")
	if err != nil {
		t.Fatal(err)
	}
	md := d.(protoreflect.MessageDescriptor)
	if md.ParentFile().Path() != "observability/v1/mads.proto" || md.Fields().ByName("targets") == nil {
		t.Fatalf("descriptor %v", md)
	}

	// Decode an ADS resource with the reflected descriptor only.
	ads, err := discovery.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := ads.Send(&discovery.DiscoveryRequest{Node: &core.Node{Id: "prom-r"}, TypeUrl: maType}); err != nil {
		t.Fatal(err)
	}
	resp := recv[discovery.DiscoveryResponse](t, ads)
	msg := dynamicpb.NewMessage(md)
	if err := proto.Unmarshal(resp.GetResources()[0].GetValue(), msg); err != nil {
		t.Fatal(err)
	}
	if got := msg.Get(md.Fields().ByName("service")).String(); got != "web" {
		t.Fatalf("dynamic decode: service %q", got)
	}
}

func TestMADSServerStopStart(t *testing.T) {
	m := startMADS(t)
	m.put(t, twoAssignments)
	conn := dial(t, m.grpc)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ads, err := discovery.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := ads.Send(&discovery.DiscoveryRequest{Node: &core.Node{Id: "prom-1"}, TypeUrl: maType}); err != nil {
		t.Fatal(err)
	}
	recv[discovery.DiscoveryResponse](t, ads)

	stop := httpDo(t, "POST", m.http+"/stop", "")
	if stop["running"] != false || stop["grpc"] != m.grpc {
		t.Fatalf("stop: %v", stop)
	}
	errc := make(chan error, 1)
	go func() { _, err := ads.Recv(); errc <- err }()
	select {
	case err := <-errc:
		if err == nil {
			t.Fatal("stream survived /stop")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("stream not ended by /stop")
	}

	if st := httpDo(t, "POST", m.http+"/start", ""); st["running"] != true || st["grpc"] != m.grpc {
		t.Fatalf("start: %v", st)
	}
	// Same address; the ClientConn reconnects.
	ads2, err := discovery.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx, grpc.WaitForReady(true))
	if err != nil {
		t.Fatal(err)
	}
	if err := ads2.Send(&discovery.DiscoveryRequest{Node: &core.Node{Id: "prom-1"}, TypeUrl: maType, VersionInfo: "v0"}); err != nil {
		t.Fatal(err)
	}
	if r := recv[discovery.DiscoveryResponse](t, ads2); r.GetVersionInfo() != "v1" {
		t.Fatalf("after restart %v", r)
	}

	// SIGTERM ends the process too.
	_ = m.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-m.exited:
		m.exited <- nil // for the cleanup
	case <-time.After(10 * time.Second):
		t.Fatal("no exit on SIGTERM")
	}
}

// ---------------------------------------------------------------------------
// kuma-sd against a scripted REST MADS server.

type seenRequest struct {
	Method, Path, RawQuery string
	Header                 http.Header
	Body                   string
}

// kumaResp is one scripted answer: a status and a body.
type kumaResp struct {
	code int
	body string
}

// Kuma's own server answers with jsonpb's OrigName (snake_case) form.
const respV1 = `{"version_info":"v1","type_url":"type.googleapis.com/kuma.observability.v1.MonitoringAssignment","nonce":"n1",
 "resources":[
  {"@type":"type.googleapis.com/kuma.observability.v1.MonitoringAssignment","mesh":"default","service":"web",
   "labels":{"team":"a","k8s.io/name":"web"},
   "targets":[
    {"name":"web-1","scheme":"http","address":"10.0.0.1:9090","metrics_path":"/metrics","labels":{"team":"b","zone":"z1"}},
    {"name":"web-2","scheme":"https","address":"10.0.0.2:9090","metrics_path":"/stats"}]},
  {"@type":"type.googleapis.com/kuma.observability.v1.MonitoringAssignment","mesh":"other","service":"db",
   "targets":[{"name":"db-1","scheme":"http","address":"10.0.1.1:9187","metrics_path":"/metrics"}]}]}`

// lowerCamelCase names, an unknown field, and an unknown field inside the Any.
const respV2Camel = `{"versionInfo":"v2","typeUrl":"type.googleapis.com/kuma.observability.v1.MonitoringAssignment","nonce":"n2",
 "controlPlane":{"identifier":"cp"},"somethingNew":1,
 "resources":[{"@type":"type.googleapis.com/kuma.observability.v1.MonitoringAssignment","mesh":"m","service":"s","future":true,
   "targets":[{"name":"s-1","scheme":"http","address":"10.0.2.1:80","metricsPath":"/m"}]}]}`

const respBadType = `{"version_info":"v-bad","type_url":"type.googleapis.com/envoy.config.cluster.v3.Cluster","nonce":"n-bad","resources":[]}`

const respUnknownAny = `{"version_info":"v-any","type_url":"type.googleapis.com/kuma.observability.v1.MonitoringAssignment","nonce":"n-any",
 "resources":[{"@type":"type.googleapis.com/envoy.config.cluster.v3.Cluster","name":"c"}]}`

const respEmpty = `{"version_info":"v3","type_url":"type.googleapis.com/kuma.observability.v1.MonitoringAssignment","nonce":"n3"}`

func TestKumaSD(t *testing.T) {
	script := []kumaResp{
		{200, respV1},         // 1: update
		{304, ""},             // 2: skipped
		{500, "boom"},         // 3: failure
		{200, ""},             // 4: empty 200 body: failure
		{200, respV2Camel},    // 5: update
		{200, respBadType},    // 6: failure (type URL), yet its version is kept
		{200, respUnknownAny}, // 7: failure (Any @type unknown to the resolver)
		{200, respEmpty},      // 8: update with no targets
	}
	var mu sync.Mutex
	var seen []seenRequest
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		seen = append(seen, seenRequest{r.Method, r.URL.Path, r.URL.RawQuery, r.Header.Clone(), string(b)})
		n := len(seen)
		mu.Unlock()
		resp := kumaResp{304, ""}
		if n <= len(script) {
			resp = script[n-1]
		}
		if resp.code == 200 {
			w.Header().Set("Content-Type", "application/json")
		}
		w.WriteHeader(resp.code)
		_, _ = io.WriteString(w, resp.body)
	}))
	defer srv.Close()

	p := start(t, "kuma-sd", "--server", srv.URL, "--refresh-interval", "50ms", "--fetch-timeout", "5s",
		"--client-id", "prom-test", "--metrics", "127.0.0.1:0")
	metricsAddr := p.first["metrics"]
	if metricsAddr == "" {
		t.Fatalf("first line %v", p.first)
	}

	type update struct {
		Groups []struct {
			Source  string              `json:"source"`
			Labels  map[string]string   `json:"labels"`
			Targets []map[string]string `json:"targets"`
		} `json:"groups"`
	}
	var updates []update
	for len(updates) < 3 {
		select {
		case line, ok := <-p.lines:
			if !ok {
				t.Fatal("kuma-sd exited")
			}
			var u update
			if err := json.Unmarshal([]byte(line), &u); err != nil {
				t.Fatalf("line %q: %v", line, err)
			}
			updates = append(updates, u)
		case <-time.After(20 * time.Second):
			t.Fatalf("only %d updates", len(updates))
		}
	}

	// Update 1: every label Prometheus sets, in order.
	u1 := updates[0]
	if len(u1.Groups) != 1 || u1.Groups[0].Source != "kuma" || len(u1.Groups[0].Labels) != 0 || len(u1.Groups[0].Targets) != 3 {
		t.Fatalf("update 1: %+v", u1)
	}
	web1 := map[string]string{
		"__address__":                   "10.0.0.1:9090",
		"__metrics_path__":              "/metrics",
		"__scheme__":                    "http",
		"instance":                      "web-1",
		"__meta_kuma_mesh":              "default",
		"__meta_kuma_service":           "web",
		"__meta_kuma_dataplane":         "web-1",
		"__meta_kuma_label_team":        "a", // the assignment's label wins over the target's
		"__meta_kuma_label_zone":        "z1",
		"__meta_kuma_label_k8s_io_name": "web",
	}
	if got := u1.Groups[0].Targets[0]; !mapsEqual(got, web1) {
		t.Fatalf("target 1:\n got %v\nwant %v", got, web1)
	}
	if got := u1.Groups[0].Targets[2]; got["__meta_kuma_mesh"] != "other" || got["__address__"] != "10.0.1.1:9187" {
		t.Fatalf("target 3: %v", got)
	}
	// Update 2: lowerCamelCase and unknown fields decode.
	if tg := updates[1].Groups[0].Targets; len(tg) != 1 || tg[0]["__metrics_path__"] != "/m" || tg[0]["__meta_kuma_service"] != "s" {
		t.Fatalf("update 2: %+v", updates[1])
	}
	// Update 3: an empty response is an update to no targets.
	if g := updates[2].Groups; len(g) != 1 || len(g[0].Targets) != 0 {
		t.Fatalf("update 3: %+v", updates[2])
	}

	// Let a few more (304) polls happen, then read the requests.
	waitFor(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(seen) >= len(script)+2 })
	mu.Lock()
	reqs := slices.Clone(seen)
	mu.Unlock()
	for _, i := range []int{0, 1} {
		t.Logf("request %d: %s %s?%s %v\n%s", i+1, reqs[i].Method, reqs[i].Path, reqs[i].RawQuery, reqs[i].Header, reqs[i].Body)
	}
	for i, r := range reqs {
		if r.Method != "POST" || r.Path != "/v3/discovery:monitoringassignments" || r.RawQuery != "fetch-timeout=5s" ||
			r.Header.Get("Content-Type") != "application/json" || r.Header.Get("Accept") != "application/json" ||
			r.Header.Get("User-Agent") != "Prometheus/"+promVersion || r.Header.Get("Accept-Encoding") != "" {
			t.Fatalf("request %d: %+v", i, r)
		}
	}
	// What Prometheus sends: proto names, defaults left out, node.id only.
	bodies := make([]map[string]any, len(reqs))
	for i, r := range reqs {
		if err := json.Unmarshal([]byte(r.Body), &bodies[i]); err != nil {
			t.Fatalf("request %d body %q: %v", i, r.Body, err)
		}
	}
	first := bodies[0]
	if fmt.Sprint(first) != fmt.Sprint(map[string]any{"node": map[string]any{"id": "prom-test"}, "type_url": maType}) {
		t.Fatalf("first request body %s", reqs[0].Body)
	}
	// version_info / response_nonce sent with each poll: from the last 200
	// that decoded as a DiscoveryResponse, even one whose type URL was wrong
	// (6); not from one that did not decode (4: empty body, 7: an Any of a
	// type Prometheus's resolver does not know).
	wantVN := [][2]string{
		{"", ""}, {"v1", "n1"}, {"v1", "n1"}, {"v1", "n1"}, {"v1", "n1"},
		{"v2", "n2"}, {"v-bad", "n-bad"}, {"v-bad", "n-bad"}, {"v3", "n3"},
	}
	for i, w := range wantVN {
		v, _ := bodies[i]["version_info"].(string)
		n, _ := bodies[i]["response_nonce"].(string)
		if v != w[0] || n != w[1] {
			t.Fatalf("request %d: version_info %q response_nonce %q, want %q %q (%s)", i+1, v, n, w[0], w[1], reqs[i].Body)
		}
		if _, ok := bodies[i]["error_detail"]; ok {
			t.Fatalf("request %d has error_detail", i+1)
		}
	}

	// Prometheus's own metrics.
	waitFor(t, func() bool {
		m := scrape(t, metricsAddr)
		return m["prometheus_sd_kuma_fetch_failures_total"] == 4 &&
			m["prometheus_sd_kuma_fetch_skipped_updates_total"] >= 2 &&
			m["prometheus_sd_kuma_fetch_duration_seconds_count"] >= float64(len(script)+2) &&
			m["kuma_sd_peer_updates_total"] == 3
	})
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if bv, ok := b[k]; !ok || bv != v {
			return false
		}
	}
	return true
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in time")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// scrape reads the unlabelled samples of the text exposition format.
func scrape(t *testing.T, addr string) map[string]float64 {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		var name string
		var v float64
		if _, err := fmt.Sscanf(line, "%s %g", &name, &v); err == nil && !strings.Contains(name, "{") {
			out[name] = v
		}
	}
	return out
}
