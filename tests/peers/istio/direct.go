package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/anypb"
)

// client is the peer's own connection to its TCP gRPC server (so its
// streams are Istio's ordinary ADS streams, recorded as "direct").
func (p *peer) client() (discovery.AggregatedDiscoveryServiceClient, error) {
	p.connMu.Lock()
	defer p.connMu.Unlock()
	if p.conn == nil {
		conn, err := grpc.NewClient("passthrough:///"+p.grpcAddr,
			grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(256<<20)))
		if err != nil {
			return nil, err
		}
		p.conn = conn
	}
	return discovery.NewAggregatedDiscoveryServiceClient(p.conn), nil
}

// directRequest is POST /xds's body.
type directRequest struct {
	Node          json.RawMessage `json:"node"`
	TypeURL       string          `json:"type_url"`
	ResourceNames []string        `json:"resource_names"`
	Delta         bool            `json:"delta"`
	// TimeoutMS bounds the wait for Istio's first response (default 10 s).
	TimeoutMS int `json:"timeout_ms"`
	// ProtoNames renders field names as in the .proto (snake_case)
	// instead of protojson's default lowerCamelCase.
	ProtoNames bool `json:"proto_names"`
}

// directXDS: POST /xds opens an ADS stream of its own to Istio as the given
// node, sends one request (SotW: resource_names; delta: subscribe to them,
// none meaning wildcard), takes Istio's first response of that type and
// returns it as JSON, each resource as protojson's google.protobuf.Any
// ("@type" first). What Istio sends that node directly.
func (p *peer) directXDS(w http.ResponseWriter, r *http.Request) {
	var req directRequest
	dec := json.NewDecoder(io.LimitReader(r.Body, 16<<20))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		writeError(w, 400, "body: %v", err)
		return
	}
	if req.TypeURL == "" {
		writeError(w, 400, "type_url is required")
		return
	}
	node := &corev3.Node{}
	if len(req.Node) > 0 {
		if err := protojson.Unmarshal(req.Node, node); err != nil {
			writeError(w, 400, "node: %v", err)
			return
		}
	}
	timeout := 10 * time.Second
	if req.TimeoutMS > 0 {
		timeout = time.Duration(req.TimeoutMS) * time.Millisecond
	}
	client, err := p.client()
	if err != nil {
		writeError(w, 500, "client: %v", err)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), timeout)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, directHeader, "1")
	marshal := protojson.MarshalOptions{UseProtoNames: req.ProtoNames}
	render := func(a *anypb.Any) (json.RawMessage, error) {
		b, err := marshal.Marshal(a)
		return json.RawMessage(b), err
	}
	start := time.Now()

	if req.Delta {
		stream, err := client.DeltaAggregatedResources(ctx)
		if err != nil {
			streamError(w, err, timeout, req.TypeURL)
			return
		}
		if err := stream.Send(&discovery.DeltaDiscoveryRequest{
			Node: node, TypeUrl: req.TypeURL, ResourceNamesSubscribe: req.ResourceNames,
		}); err != nil {
			streamError(w, err, timeout, req.TypeURL)
			return
		}
		for {
			resp, err := stream.Recv()
			if err != nil {
				streamError(w, err, timeout, req.TypeURL)
				return
			}
			if resp.GetTypeUrl() != req.TypeURL {
				continue
			}
			resources := []json.RawMessage{}
			names := []string{}
			versions := map[string]string{}
			for _, res := range resp.GetResources() {
				names = append(names, res.GetName())
				versions[res.GetName()] = res.GetVersion()
				if res.GetResource() == nil {
					continue
				}
				j, err := render(res.GetResource())
				if err != nil {
					writeError(w, 500, "rendering %s: %v", res.GetName(), err)
					return
				}
				resources = append(resources, j)
			}
			writeJSON(w, 200, map[string]any{
				"delta": true, "type_url": resp.GetTypeUrl(), "version_info": resp.GetSystemVersionInfo(),
				"nonce": resp.GetNonce(), "names": names, "resource_versions": versions,
				"resources": resources, "removed_resources": nonNil(resp.GetRemovedResources()),
				"elapsed_ms": time.Since(start).Milliseconds(),
			})
			return
		}
	}

	stream, err := client.StreamAggregatedResources(ctx)
	if err != nil {
		streamError(w, err, timeout, req.TypeURL)
		return
	}
	if err := stream.Send(&discovery.DiscoveryRequest{
		Node: node, TypeUrl: req.TypeURL, ResourceNames: req.ResourceNames,
	}); err != nil {
		streamError(w, err, timeout, req.TypeURL)
		return
	}
	for {
		resp, err := stream.Recv()
		if err != nil {
			streamError(w, err, timeout, req.TypeURL)
			return
		}
		if resp.GetTypeUrl() != req.TypeURL {
			continue
		}
		resources := []json.RawMessage{}
		names := []string{}
		for _, a := range resp.GetResources() {
			names = append(names, resourceName(a))
			j, err := render(a)
			if err != nil {
				writeError(w, 500, "rendering a %s: %v", a.GetTypeUrl(), err)
				return
			}
			resources = append(resources, j)
		}
		writeJSON(w, 200, map[string]any{
			"delta": false, "type_url": resp.GetTypeUrl(), "version_info": resp.GetVersionInfo(),
			"nonce": resp.GetNonce(), "names": names, "resources": resources,
			"elapsed_ms": time.Since(start).Milliseconds(),
		})
		return
	}
}

// streamError: 504 when Istio sent nothing of the type in time (it does not
// answer a type it has no generator for), 502 with the gRPC status when
// Istio ended the stream.
func streamError(w http.ResponseWriter, err error, timeout time.Duration, typeURL string) {
	if errors.Is(err, context.DeadlineExceeded) || status.Code(err) == codes.DeadlineExceeded {
		writeError(w, 504, "no response of type %s from Istio within %v", typeURL, timeout)
		return
	}
	st := status.Convert(err)
	writeJSON(w, 502, map[string]any{
		"error": "Istio ended the stream: " + st.Message(), "grpc_code": st.Code().String(),
	})
}
