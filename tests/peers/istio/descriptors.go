package main

import (
	"encoding/base64"
	"net/http"
	"sort"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"

	peermetadatahttp "github.com/envoyproxy/go-control-plane/contrib/envoy/extensions/filters/http/peer_metadata/v3"
	metadataexchange "github.com/envoyproxy/go-control-plane/contrib/envoy/extensions/filters/network/metadata_exchange/v3"
	peermetadatanet "github.com/envoyproxy/go-control-plane/contrib/envoy/extensions/filters/network/peer_metadata/v3"
	alpn "istio.io/api/envoy/config/filter/http/alpn/v2alpha1"
	jwtauth "istio.io/api/envoy/config/filter/http/jwt_auth/v2alpha1"
	tcprewrite "istio.io/api/envoy/config/filter/network/tcp_cluster_rewrite/v2alpha1"
	istiostats "istio.io/api/envoy/extensions/stats"
)

// istioFiles: the .proto files of the types Istio puts inside Envoy config
// that are not part of Envoy's own API (data-plane-api and cncf/xds, which
// xds-gateway embeds): Istio's own filter configs (istio.io/api/envoy/...)
// and the Envoy contrib extensions Istio's proxy builds in and Istio
// configures (peer metadata, metadata exchange). Only what Istio itself links:
// istio.io/api's older metadata_exchange.proto defines the same message name
// as the contrib one and cannot be registered beside it.
func istioFiles() []protoreflect.FileDescriptor {
	return []protoreflect.FileDescriptor{
		alpn.File_envoy_config_filter_http_alpn_v2alpha1_config_proto,
		jwtauth.File_envoy_config_filter_http_jwt_auth_v2alpha1_config_proto,
		tcprewrite.File_envoy_config_filter_network_tcp_cluster_rewrite_v2alpha1_config_proto,
		istiostats.File_envoy_extensions_stats_config_proto,
		peermetadatahttp.File_contrib_envoy_extensions_filters_http_peer_metadata_v3_peer_metadata_proto,
		metadataexchange.File_contrib_envoy_extensions_filters_network_metadata_exchange_v3_metadata_exchange_proto,
		peermetadatanet.File_contrib_envoy_extensions_filters_network_peer_metadata_v3_peer_metadata_proto,
	}
}

// descriptorSet is a FileDescriptorSet of files and everything they import,
// each file after its imports (the order protoc's --include_imports
// writes, which every reader accepts).
func descriptorSet(files []protoreflect.FileDescriptor) *descriptorpb.FileDescriptorSet {
	set := &descriptorpb.FileDescriptorSet{}
	seen := map[string]bool{}
	var visit func(fd protoreflect.FileDescriptor)
	visit = func(fd protoreflect.FileDescriptor) {
		if seen[fd.Path()] {
			return
		}
		seen[fd.Path()] = true
		imports := fd.Imports()
		for i := 0; i < imports.Len(); i++ {
			imp := imports.Get(i).FileDescriptor
			if imp.IsPlaceholder() {
				// Resolve a placeholder through the registry if it can.
				if real, err := protoregistry.GlobalFiles.FindFileByPath(imp.Path()); err == nil {
					imp = real
				}
			}
			visit(imp)
		}
		set.File = append(set.File, protodesc.ToFileDescriptorProto(fd))
	}
	for _, fd := range files {
		visit(fd)
	}
	return set
}

// serveDescriptors: GET /descriptors returns, base64 (standard, padded),
// the binary FileDescriptorSet of istioFiles() and their imports: the
// format of protoc's --descriptor_set_out --include_imports, which is what
// xds-gateway's --descriptor-set reads (decode it and write it to a file).
// ?format=binary returns the bytes themselves; ?format=json lists the files
// and messages instead; ?type=FULL.NAME (repeatable) builds the set for
// those message types instead of the default list.
func serveDescriptors(w http.ResponseWriter, r *http.Request) {
	files := istioFiles()
	if names := r.URL.Query()["type"]; len(names) > 0 {
		files = nil
		for _, n := range names {
			d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(n))
			if err != nil {
				writeError(w, 404, "type %s: %v", n, err)
				return
			}
			files = append(files, d.ParentFile())
		}
	}
	set := descriptorSet(files)
	switch r.URL.Query().Get("format") {
	case "json":
		var out []map[string]any
		for _, f := range set.File {
			var msgs []string
			for _, m := range f.GetMessageType() {
				msgs = append(msgs, f.GetPackage()+"."+m.GetName())
			}
			sort.Strings(msgs)
			out = append(out, map[string]any{"file": f.GetName(), "package": f.GetPackage(), "messages": msgs})
		}
		writeJSON(w, 200, map[string]any{"files": out})
		return
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(set)
	if err != nil {
		writeError(w, 500, "marshal: %v", err)
		return
	}
	if r.URL.Query().Get("format") == "binary" {
		w.Header().Set("Content-Type", "application/octet-stream")
		_, _ = w.Write(b)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = w.Write([]byte(base64.StdEncoding.EncodeToString(b)))
}
