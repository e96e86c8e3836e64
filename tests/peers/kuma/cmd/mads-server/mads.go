package main

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"github.com/prometheus/prometheus/discovery/xds"
)

// Kuma's MonitoringAssignmentDiscoveryService, registered by hand.
//
// Prometheus vendors Kuma's observability/v1/mads.proto as
// discovery/xds/kuma_mads.pb.go ("gRPC-removed vendored file from Kuma"): the
// file descriptor (registered in protoregistry.GlobalFiles, so reflection
// serves it) declares the service with DeltaMonitoringAssignments,
// StreamMonitoringAssignments and FetchMonitoringAssignments, but the package
// ships no grpc.ServiceDesc, no Register function and no client stubs; only a
// one-method MonitoringAssignmentDiscoveryServiceServer interface (Fetch).
// madsServiceDesc is what protoc-gen-go-grpc would generate from that
// descriptor, with each method handed to go-control-plane's server for the
// MonitoringAssignment type URL, as its per-type Envoy services are.

const madsServiceName = "kuma.observability.v1.MonitoringAssignmentDiscoveryService"

// madsServer is the service's server API (the HandlerType).
type madsServer interface {
	DeltaMonitoringAssignments(grpc.BidiStreamingServer[discovery.DeltaDiscoveryRequest, discovery.DeltaDiscoveryResponse]) error
	StreamMonitoringAssignments(grpc.BidiStreamingServer[discovery.DiscoveryRequest, discovery.DiscoveryResponse]) error
	FetchMonitoringAssignments(context.Context, *discovery.DiscoveryRequest) (*discovery.DiscoveryResponse, error)
}

// Prometheus's interface, to keep the two in step.
var _ xds.MonitoringAssignmentDiscoveryServiceServer = (madsServer)(nil)

type madsImpl struct{ xds serverv3.Server }

func (m madsImpl) DeltaMonitoringAssignments(s grpc.BidiStreamingServer[discovery.DeltaDiscoveryRequest, discovery.DeltaDiscoveryResponse]) error {
	return m.xds.DeltaStreamHandler(s, typeURL)
}

func (m madsImpl) StreamMonitoringAssignments(s grpc.BidiStreamingServer[discovery.DiscoveryRequest, discovery.DiscoveryResponse]) error {
	return m.xds.StreamHandler(s, typeURL)
}

func (m madsImpl) FetchMonitoringAssignments(ctx context.Context, req *discovery.DiscoveryRequest) (*discovery.DiscoveryResponse, error) {
	if req == nil {
		return nil, status.Errorf(codes.Unavailable, "empty request")
	}
	req.TypeUrl = typeURL // as go-control-plane's FetchClusters etc. do
	return m.xds.Fetch(ctx, req)
}

var madsServiceDesc = grpc.ServiceDesc{
	ServiceName: madsServiceName,
	HandlerType: (*madsServer)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "FetchMonitoringAssignments",
		Handler: func(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
			in := new(discovery.DiscoveryRequest)
			if err := dec(in); err != nil {
				return nil, err
			}
			if interceptor == nil {
				return srv.(madsServer).FetchMonitoringAssignments(ctx, in)
			}
			info := &grpc.UnaryServerInfo{Server: srv, FullMethod: "/" + madsServiceName + "/FetchMonitoringAssignments"}
			return interceptor(ctx, in, info, func(ctx context.Context, req any) (any, error) {
				return srv.(madsServer).FetchMonitoringAssignments(ctx, req.(*discovery.DiscoveryRequest))
			})
		},
	}},
	Streams: []grpc.StreamDesc{
		{
			StreamName: "DeltaMonitoringAssignments",
			Handler: func(srv any, stream grpc.ServerStream) error {
				return srv.(madsServer).DeltaMonitoringAssignments(&grpc.GenericServerStream[discovery.DeltaDiscoveryRequest, discovery.DeltaDiscoveryResponse]{ServerStream: stream})
			},
			ServerStreams: true,
			ClientStreams: true,
		},
		{
			StreamName: "StreamMonitoringAssignments",
			Handler: func(srv any, stream grpc.ServerStream) error {
				return srv.(madsServer).StreamMonitoringAssignments(&grpc.GenericServerStream[discovery.DiscoveryRequest, discovery.DiscoveryResponse]{ServerStream: stream})
			},
			ServerStreams: true,
			ClientStreams: true,
		},
	},
	// The descriptor's path in protoregistry.GlobalFiles (kuma_mads.pb.go).
	Metadata: "observability/v1/mads.proto",
}
