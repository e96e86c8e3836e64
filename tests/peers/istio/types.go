package main

// Blank imports that make sure every message type Istio can put inside Envoy
// config is in the global protobuf registry, so that protojson can render
// the nested google.protobuf.Any values of what Istio sends (POST /xds) and
// the recorder can read resource names. Istio's pilot links most of them
// already; these are named so that the set does not depend on what pilot
// happens to import.
import (
	// Every Envoy extension (and contrib extension) Istio knows, and the
	// Istio-specific filter configs (istio.io/api/envoy/...): the
	// generated list Istio itself uses to validate EnvoyFilters.
	_ "istio.io/istio/pkg/config/xds"

	// TypedStruct, which Istio wraps its own filters' configs in.
	_ "github.com/cncf/xds/go/udpa/type/v1"
	_ "github.com/cncf/xds/go/xds/type/v3"

	// Well-known types used as Any payloads.
	_ "google.golang.org/protobuf/types/known/emptypb"
	_ "google.golang.org/protobuf/types/known/structpb"
	_ "google.golang.org/protobuf/types/known/wrapperspb"
)
