// Command observe drives a running istio-peer as an ADS client of its own
// and prints what Istio did, for the "Observed behaviour" section of
// ../README.md. It is not part of the test suite.
//
//	observe --grpc 127.0.0.1:N --http 127.0.0.1:M
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"sort"
	"strings"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	clusterservice "github.com/envoyproxy/go-control-plane/envoy/service/cluster/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	statuspb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"

	_ "istio.io/api/envoy/extensions/stats" // Istio's stats filter config (pilot links it)
	_ "istio.io/istio/pkg/config/xds"       // every type Istio puts in an Any

	udpatype "github.com/cncf/xds/go/udpa/type/v1"
	xdstype "github.com/cncf/xds/go/xds/type/v3"
)

const (
	cdsType     = "type.googleapis.com/envoy.config.cluster.v3.Cluster"
	edsType     = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment"
	ldsType     = "type.googleapis.com/envoy.config.listener.v3.Listener"
	rdsType     = "type.googleapis.com/envoy.config.route.v3.RouteConfiguration"
	runtimeType = "type.googleapis.com/envoy.service.runtime.v3.Runtime"
)

var httpAddr string

func main() {
	grpcAddr := flag.String("grpc", "", "the peer's gRPC address")
	flag.StringVar(&httpAddr, "http", "", "the peer's control API address")
	flag.Parse()
	conn, err := grpc.NewClient("passthrough:///"+*grpcAddr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(256<<20)))
	if err != nil {
		log.Fatal(err)
	}
	client := discovery.NewAggregatedDiscoveryServiceClient(conn)

	var mesh struct {
		Pods []struct {
			Name      string          `json:"name"`
			Namespace string          `json:"namespace"`
			Node      json.RawMessage `json:"node"`
		} `json:"pods"`
	}
	must(json.Unmarshal(call("GET", "/mesh", ""), &mesh))
	nodes := map[string]*corev3.Node{}
	var order []string
	for _, p := range mesh.Pods {
		n := &corev3.Node{}
		must(protojson.Unmarshal(p.Node, n))
		nodes[p.Name] = n
		order = append(order, p.Name)
	}
	productpage := nodes[order[0]]

	// (3) Every type URL inside what Istio sends each pod (LDS, CDS, RDS of
	// the routes its listeners name, EDS of its EDS clusters).
	fmt.Println("== (3) type URLs inside LDS/CDS/RDS/EDS, per pod")
	all := map[string]map[string]bool{} // xDS type -> type URLs inside
	for _, name := range order {
		s := open(client, nodes[name])
		urls := map[string]map[string]bool{}
		cds := s.ask(cdsType, nil, "", "")
		lds := s.ask(ldsType, nil, "", "")
		routes := routeNames(lds)
		var rds *discovery.DiscoveryResponse
		if len(routes) > 0 {
			rds = s.ask(rdsType, routes, "", "")
		}
		eds := s.ask(edsType, edsClusters(cds), "", "")
		for typ, resp := range map[string]*discovery.DiscoveryResponse{"CDS": cds, "LDS": lds, "RDS": rds, "EDS": eds} {
			if resp == nil {
				continue
			}
			urls[typ] = map[string]bool{}
			for _, a := range resp.GetResources() {
				collect(a, urls[typ], true)
			}
			if all[typ] == nil {
				all[typ] = map[string]bool{}
			}
			for u := range urls[typ] {
				all[typ][u] = true
			}
		}
		fmt.Printf("%s: %d clusters, %d listeners, routes %v, %d load assignments\n", name,
			len(cds.GetResources()), len(lds.GetResources()), routes, len(eds.GetResources()))
		s.close()
	}
	for _, typ := range []string{"LDS", "CDS", "RDS", "EDS"} {
		fmt.Printf("%s: %s\n", typ, strings.Join(keys(all[typ]), "\n     "))
	}

	// (1) RDS subscription growing on one SotW stream.
	fmt.Println("\n== (1) RDS subscription grows on a SotW ADS stream (productpage's node)")
	s := open(client, productpage)
	cds := s.ask(cdsType, nil, "", "")
	s.ack(cds)
	lds := s.ask(ldsType, nil, "", "")
	s.ack(lds)
	first := s.ask(rdsType, []string{"9080"}, "", "")
	fmt.Printf("RDS [9080] -> version %q nonce %q resources %v\n", first.GetVersionInfo(), first.GetNonce(), names(first))
	grown := s.ask(rdsType, []string{"80", "8000", "9080"}, first.GetVersionInfo(), first.GetNonce())
	fmt.Printf("RDS [80 8000 9080] (nonce %q) -> version %q nonce %q resources %v\n",
		first.GetNonce(), grown.GetVersionInfo(), grown.GetNonce(), names(grown))
	s.ack(grown)
	shrunk := s.askTimeout(rdsType, []string{"9080"}, grown.GetVersionInfo(), grown.GetNonce(), 2*time.Second)
	fmt.Printf("RDS back to [9080] -> %s\n", describe(shrunk))
	s.close()

	// (2) EDS after a reviews pod leaves, on a stream subscribed to every
	// EDS cluster; SotW then delta.
	fmt.Println("\n== (2) EDS after a reviews pod is removed")
	s = open(client, productpage)
	cds = s.ask(cdsType, nil, "", "")
	s.ack(cds)
	clusters := edsClusters(cds)
	eds := s.ask(edsType, clusters, "", "")
	s.ack(eds)
	fmt.Printf("SotW: subscribed to %d clusters, initial EDS has %d\n", len(clusters), len(eds.GetResources()))
	d := openDelta(client, productpage)
	dcds := d.ask(cdsType, nil)
	d.ack(dcds)
	deds := d.ask(edsType, clusters)
	d.ack(deds)
	fmt.Printf("delta: initial EDS has %d\n", len(deds.GetResources()))
	fmt.Printf("POST /pods/remove reviews-v2: %s", call("POST", "/pods/remove?namespace=default&name=reviews-v2-7bf8c9648f-6q8kx", ""))
	for i := 0; i < 3; i++ {
		r := s.next(3 * time.Second)
		if r == nil {
			break
		}
		fmt.Printf("SotW push: type %s version %q resources %v\n", short(r.GetTypeUrl()), r.GetVersionInfo(), names(r))
		s.ack(r)
	}
	for i := 0; i < 3; i++ {
		r := d.next(3 * time.Second)
		if r == nil {
			break
		}
		fmt.Printf("delta push: type %s version %q resources %v removed %v\n", short(r.GetTypeUrl()), r.GetSystemVersionInfo(), dnames(r), r.GetRemovedResources())
		d.ack(r)
	}
	fmt.Printf("POST /pods/add reviews-v2: %s", call("POST", "/pods/add?namespace=default&name=reviews-v2-7bf8c9648f-6q8kx", ""))
	for i := 0; i < 3; i++ {
		r := s.next(3 * time.Second)
		if r == nil {
			break
		}
		fmt.Printf("SotW push: type %s version %q resources %v\n", short(r.GetTypeUrl()), r.GetVersionInfo(), names(r))
		s.ack(r)
	}

	// A config change: a ServiceEntry added, then deleted.
	fmt.Println("\n== a ServiceEntry added (POST /config), then deleted: what the SotW stream (CDS+EDS) gets")
	se := `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata:
  name: external-api
  namespace: default
spec:
  hosts: [api.example.com]
  ports: [{number: 443, name: https, protocol: TLS}]
  resolution: DNS
  location: MESH_EXTERNAL
`
	fmt.Printf("POST /config: %s", call("POST", "/config", se))
	drain(s, 2*time.Second)
	fmt.Printf("DELETE /config: %s", call("DELETE", "/config?kind=ServiceEntry&namespace=default&name=external-api", ""))
	drain(s, 2*time.Second)

	// NACK: what Istio does, and what /stats shows.
	fmt.Println("\n== NACK of a CDS response (a quiet mesh, a fresh stream)")
	s.close()
	s = open(client, productpage)
	r := s.ask(cdsType, nil, "", "")
	s.send(&discovery.DiscoveryRequest{TypeUrl: cdsType, VersionInfo: "", ResponseNonce: r.GetNonce(),
		ErrorDetail: &statuspb.Status{Code: 3, Message: "observe: refused on purpose"}})
	fmt.Printf("NACKed CDS version %q nonce %q; within 3 s Istio sends: %s\n", r.GetVersionInfo(), r.GetNonce(), s.describe(s.next(3*time.Second)))
	fmt.Printf("then a ServiceEntry is added: %s", call("POST", "/config", se))
	drain(s, 2*time.Second)
	var st struct {
		Nacks []map[string]any `json:"nacks"`
		Istio []map[string]any `json:"istio"`
	}
	must(json.Unmarshal(call("GET", "/stats", ""), &st))
	for _, n := range st.Nacks {
		fmt.Printf("/stats nack: stream %v type %v nonce %v error %v\n", n["stream"], short(fmt.Sprint(n["type_url"])), n["response_nonce"], n["error_detail"])
	}
	for _, c := range st.Istio {
		if w, ok := c["watched"].(map[string]any)[cdsType].(map[string]any); ok && w["last_error"] != "" {
			fmt.Printf("Istio's own state: connection %v CDS last_error %q nonce_sent %v nonce_acked %v\n", c["connection_id"], w["last_error"], w["nonce_sent"], w["nonce_acked"])
		}
	}
	call("DELETE", "/config?kind=ServiceEntry&namespace=default&name=external-api", "")
	drain(s, 2*time.Second)
	s.close()

	// (4) A type Istio has no generator for.
	fmt.Println("\n== (4) a Runtime request on ADS")
	s = open(client, productpage)
	s.send(&discovery.DiscoveryRequest{Node: productpage, TypeUrl: runtimeType})
	fmt.Printf("SotW Runtime -> %s\n", s.describe(s.next(3*time.Second)))
	fmt.Printf("same stream, then CDS -> %s\n", s.describe(s.askTimeout(cdsType, nil, "", "", 3*time.Second)))
	s.close()
	d2 := openDelta(client, productpage)
	d2.send(&discovery.DeltaDiscoveryRequest{Node: productpage, TypeUrl: runtimeType})
	fmt.Printf("delta Runtime -> %s\n", d2.describe(d2.next(3*time.Second)))
	d2.send(&discovery.DeltaDiscoveryRequest{TypeUrl: cdsType})
	fmt.Printf("same delta stream, then CDS -> %s\n", d2.describe(d2.next(3*time.Second)))
	d2.close()
	s = open(client, productpage)
	s.send(&discovery.DiscoveryRequest{Node: productpage, TypeUrl: "type.googleapis.com/acme.Nothing"})
	fmt.Printf("SotW unknown type acme.Nothing -> %s\n", s.describe(s.next(3*time.Second)))
	s.close()

	// Per-type services and Fetch.
	fmt.Println("\n== per-type CDS service and FetchClusters")
	cs := clusterservice.NewClusterDiscoveryServiceClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	if st, err := cs.StreamClusters(ctx); err != nil {
		fmt.Printf("StreamClusters: %v\n", err)
	} else {
		_ = st.Send(&discovery.DiscoveryRequest{Node: productpage, TypeUrl: cdsType})
		_, err := st.Recv()
		fmt.Printf("StreamClusters: %v\n", err)
	}
	_, err = cs.FetchClusters(ctx, &discovery.DiscoveryRequest{Node: productpage, TypeUrl: cdsType})
	fmt.Printf("FetchClusters: %v\n", err)
	cancel()

	// (5) A fresh stream that presents the current version.
	fmt.Println("\n== (5) a fresh stream presenting the current version")
	s = open(client, productpage)
	cur := s.ask(cdsType, nil, "", "")
	curEDS := s.ask(edsType, clusters, "", "")
	s.close()
	s = open(client, productpage)
	r = s.askTimeout(cdsType, nil, cur.GetVersionInfo(), "", 3*time.Second)
	fmt.Printf("new SotW stream, CDS version_info %q no nonce -> %s\n", cur.GetVersionInfo(), describe(r))
	r = s.askTimeout(edsType, clusters, curEDS.GetVersionInfo(), "", 3*time.Second)
	fmt.Printf("same stream, EDS version_info %q no nonce -> %s\n", curEDS.GetVersionInfo(), describe(r))
	s.close()
	s = open(client, productpage)
	r = s.askTimeout(cdsType, nil, cur.GetVersionInfo(), cur.GetNonce(), 3*time.Second)
	fmt.Printf("new SotW stream, CDS version_info %q with the old stream's nonce %q -> %s\n", cur.GetVersionInfo(), cur.GetNonce(), describe(r))
	s.close()
	d = openDelta(client, productpage)
	first2 := d.ask(cdsType, nil)
	versions := map[string]string{}
	for _, res := range first2.GetResources() {
		versions[res.GetName()] = res.GetVersion()
	}
	d.close()
	d = openDelta(client, productpage)
	d.send(&discovery.DeltaDiscoveryRequest{Node: productpage, TypeUrl: cdsType, InitialResourceVersions: versions})
	fmt.Printf("new delta stream, CDS with initial_resource_versions of all %d clusters -> %s\n", len(versions), ddescribe(d.next(3*time.Second)))
	d.close()
}

// ---------------------------------------------------------------------------

type sotw struct {
	stream grpc.BidiStreamingClient[discovery.DiscoveryRequest, discovery.DiscoveryResponse]
	cancel context.CancelFunc
	node   *corev3.Node
	ch     chan *discovery.DiscoveryResponse
	sent   bool
	err    error // how the stream ended
}

func open(client discovery.AggregatedDiscoveryServiceClient, node *corev3.Node) *sotw {
	ctx, cancel := context.WithCancel(context.Background())
	st, err := client.StreamAggregatedResources(ctx)
	must(err)
	s := &sotw{stream: st, cancel: cancel, node: node, ch: make(chan *discovery.DiscoveryResponse, 100)}
	go func() {
		for {
			r, err := st.Recv()
			if err != nil {
				s.err = err
				close(s.ch)
				return
			}
			s.ch <- r
		}
	}()
	return s
}

func (s *sotw) close() { s.cancel() }

func (s *sotw) send(req *discovery.DiscoveryRequest) {
	if !s.sent {
		req.Node = s.node
		s.sent = true
	}
	if err := s.stream.Send(req); err != nil {
		fmt.Printf("  (send failed: %v)\n", err)
	}
}

func (s *sotw) next(timeout time.Duration) *discovery.DiscoveryResponse {
	select {
	case r, ok := <-s.ch:
		if !ok {
			return nil
		}
		return r
	case <-time.After(timeout):
		return nil
	}
}

func (s *sotw) askTimeout(typeURL string, names []string, version, nonce string, timeout time.Duration) *discovery.DiscoveryResponse {
	if typeURL == edsType || typeURL == rdsType {
		subscribed[typeURL] = names
	}
	s.send(&discovery.DiscoveryRequest{TypeUrl: typeURL, ResourceNames: names, VersionInfo: version, ResponseNonce: nonce})
	for {
		r := s.next(timeout)
		if r == nil || r.GetTypeUrl() == typeURL {
			return r
		}
	}
}

func (s *sotw) ask(typeURL string, names []string, version, nonce string) *discovery.DiscoveryResponse {
	r := s.askTimeout(typeURL, names, version, nonce, 10*time.Second)
	if r == nil {
		log.Fatalf("no %s response", typeURL)
	}
	return r
}

// ack ACKs r with the names the stream subscribes to for its type (the
// names of r for a non-wildcard type are not known here: it re-sends the
// last request's names, which Istio keeps).
func (s *sotw) ack(r *discovery.DiscoveryResponse) {
	var names []string
	switch r.GetTypeUrl() {
	case edsType, rdsType:
		names = subscribed[r.GetTypeUrl()]
	}
	s.send(&discovery.DiscoveryRequest{TypeUrl: r.GetTypeUrl(), VersionInfo: r.GetVersionInfo(), ResponseNonce: r.GetNonce(), ResourceNames: names})
}

// subscribed: the last names asked for per type (for ACKs).
var subscribed = map[string][]string{}

type delta struct {
	stream grpc.BidiStreamingClient[discovery.DeltaDiscoveryRequest, discovery.DeltaDiscoveryResponse]
	cancel context.CancelFunc
	node   *corev3.Node
	ch     chan *discovery.DeltaDiscoveryResponse
	sent   bool
	err    error
}

func openDelta(client discovery.AggregatedDiscoveryServiceClient, node *corev3.Node) *delta {
	ctx, cancel := context.WithCancel(context.Background())
	st, err := client.DeltaAggregatedResources(ctx)
	must(err)
	d := &delta{stream: st, cancel: cancel, node: node, ch: make(chan *discovery.DeltaDiscoveryResponse, 100)}
	go func() {
		for {
			r, err := st.Recv()
			if err != nil {
				d.err = err
				close(d.ch)
				return
			}
			d.ch <- r
		}
	}()
	return d
}

func (d *delta) close() { d.cancel() }

func (d *delta) send(req *discovery.DeltaDiscoveryRequest) {
	if !d.sent {
		req.Node = d.node
		d.sent = true
	}
	if err := d.stream.Send(req); err != nil {
		fmt.Printf("  (send failed: %v)\n", err)
	}
}

func (d *delta) next(timeout time.Duration) *discovery.DeltaDiscoveryResponse {
	select {
	case r, ok := <-d.ch:
		if !ok {
			return nil
		}
		return r
	case <-time.After(timeout):
		return nil
	}
}

func (d *delta) ask(typeURL string, names []string) *discovery.DeltaDiscoveryResponse {
	d.send(&discovery.DeltaDiscoveryRequest{TypeUrl: typeURL, ResourceNamesSubscribe: names})
	for {
		r := d.next(10 * time.Second)
		if r == nil {
			log.Fatalf("no delta %s response", typeURL)
		}
		if r.GetTypeUrl() == typeURL {
			return r
		}
	}
}

func (d *delta) ack(r *discovery.DeltaDiscoveryResponse) {
	d.send(&discovery.DeltaDiscoveryRequest{TypeUrl: r.GetTypeUrl(), ResponseNonce: r.GetNonce()})
}

func drain(s *sotw, timeout time.Duration) {
	for {
		r := s.next(timeout)
		if r == nil {
			return
		}
		fmt.Printf("  push: type %s version %q nonce %q %d resources %v\n", short(r.GetTypeUrl()), r.GetVersionInfo(), r.GetNonce(), len(r.GetResources()), abbreviate(names(r)))
		s.ack(r)
	}
}

func abbreviate(n []string) []string {
	if len(n) > 6 {
		return append(n[:6:6], fmt.Sprintf("... (%d more)", len(n)-6))
	}
	return n
}

func (s *sotw) describe(r *discovery.DiscoveryResponse) string {
	if r == nil && s.err != nil {
		return "no response; Istio ended the stream: " + s.err.Error()
	}
	return describe(r)
}

func (d *delta) describe(r *discovery.DeltaDiscoveryResponse) string {
	if r == nil && d.err != nil {
		return "no response; Istio ended the stream: " + d.err.Error()
	}
	return ddescribe(r)
}

func describe(r *discovery.DiscoveryResponse) string {
	if r == nil {
		return "no response"
	}
	return fmt.Sprintf("response type %s version %q nonce %q, %d resources %v", short(r.GetTypeUrl()), r.GetVersionInfo(), r.GetNonce(), len(r.GetResources()), abbreviate(names(r)))
}

func ddescribe(r *discovery.DeltaDiscoveryResponse) string {
	if r == nil {
		return "no response"
	}
	return fmt.Sprintf("delta response type %s system_version %q nonce %q, %d resources %v, removed %v", short(r.GetTypeUrl()), r.GetSystemVersionInfo(), r.GetNonce(), len(r.GetResources()), abbreviate(dnames(r)), r.GetRemovedResources())
}

func short(t string) string { return t[strings.LastIndex(t, ".")+1:] }

func names(r *discovery.DiscoveryResponse) []string {
	out := []string{}
	for _, a := range r.GetResources() {
		m, err := a.UnmarshalNew()
		if err != nil {
			out = append(out, "?")
			continue
		}
		out = append(out, nameOf(m))
	}
	return out
}

func dnames(r *discovery.DeltaDiscoveryResponse) []string {
	out := []string{}
	for _, res := range r.GetResources() {
		out = append(out, res.GetName())
	}
	return out
}

func nameOf(m proto.Message) string {
	r := m.ProtoReflect()
	for _, f := range []protoreflect.Name{"name", "cluster_name"} {
		if fd := r.Descriptor().Fields().ByName(f); fd != nil {
			return r.Get(fd).String()
		}
	}
	return "?"
}

func routeNames(lds *discovery.DiscoveryResponse) []string {
	set := map[string]bool{}
	for _, a := range lds.GetResources() {
		m, err := a.UnmarshalNew()
		must(err)
		var visit func(msg protoreflect.Message)
		visit = func(msg protoreflect.Message) {
			switch v := msg.Interface().(type) {
			case *anypb.Any:
				if inner, err := v.UnmarshalNew(); err == nil {
					walk(inner.ProtoReflect(), visit)
				}
			}
			if msg.Descriptor().FullName() == "envoy.extensions.filters.network.http_connection_manager.v3.Rds" {
				set[msg.Get(msg.Descriptor().Fields().ByName("route_config_name")).String()] = true
			}
		}
		walk(m.ProtoReflect(), visit)
	}
	return keys(set)
}

func edsClusters(cds *discovery.DiscoveryResponse) []string {
	var out []string
	for _, a := range cds.GetResources() {
		c := &clusterv3.Cluster{}
		must(a.UnmarshalTo(c))
		if c.GetType() == clusterv3.Cluster_EDS {
			name := c.GetName()
			if n := c.GetEdsClusterConfig().GetServiceName(); n != "" {
				name = n
			}
			out = append(out, name)
		}
	}
	sort.Strings(out)
	subscribed[edsType] = out
	return out
}

// collect adds the type URL of a and of every Any (and TypedStruct) inside it.
func collect(a *anypb.Any, into map[string]bool, top bool) {
	if !top {
		into[a.GetTypeUrl()] = true
	}
	m, err := a.UnmarshalNew()
	if err != nil {
		into[a.GetTypeUrl()+" (NOT LINKED)"] = true
		return
	}
	walk(m.ProtoReflect(), func(msg protoreflect.Message) {
		switch v := msg.Interface().(type) {
		case *anypb.Any:
			collect(v, into, false)
		case *udpatype.TypedStruct:
			into[v.GetTypeUrl()+" (inside udpa.type.v1.TypedStruct)"] = true
		case *xdstype.TypedStruct:
			into[v.GetTypeUrl()+" (inside xds.type.v3.TypedStruct)"] = true
		}
	})
}

// walk calls fn on msg and every message inside it (not descending into Any,
// which collect unpacks itself).
func walk(msg protoreflect.Message, fn func(protoreflect.Message)) {
	fn(msg)
	if msg.Descriptor().FullName() == "google.protobuf.Any" {
		return
	}
	msg.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsList() && fd.Message() != nil:
			l := v.List()
			for i := 0; i < l.Len(); i++ {
				walk(l.Get(i).Message(), fn)
			}
		case fd.IsMap() && fd.MapValue().Message() != nil:
			v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
				walk(mv.Message(), fn)
				return true
			})
		case !fd.IsList() && !fd.IsMap() && fd.Message() != nil:
			walk(v.Message(), fn)
		}
		return true
	})
}

func keys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func call(method, path, body string) []byte {
	req, err := http.NewRequest(method, "http://"+httpAddr+path, bytes.NewBufferString(body))
	must(err)
	resp, err := http.DefaultClient.Do(req)
	must(err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		fmt.Fprintf(os.Stderr, "%s %s: %d %s\n", method, path, resp.StatusCode, b)
	}
	return b
}

func must(err error) {
	if err != nil {
		log.Fatal(err)
	}
}
