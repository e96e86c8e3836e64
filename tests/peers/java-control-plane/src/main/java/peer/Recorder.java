package peer;

import com.google.protobuf.Any;
import com.google.rpc.Status;
import io.envoyproxy.controlplane.cache.Resources;
import io.envoyproxy.controlplane.server.DiscoveryServerCallbacks;
import io.envoyproxy.envoy.service.discovery.v3.DeltaDiscoveryRequest;
import io.envoyproxy.envoy.service.discovery.v3.DeltaDiscoveryResponse;
import io.envoyproxy.envoy.service.discovery.v3.DiscoveryRequest;
import io.envoyproxy.envoy.service.discovery.v3.DiscoveryResponse;
import io.envoyproxy.envoy.service.discovery.v3.Resource;
import io.grpc.ForwardingServerCall;
import io.grpc.ForwardingServerCallListener;
import io.grpc.Metadata;
import io.grpc.ServerCall;
import io.grpc.ServerCallHandler;
import io.grpc.ServerInterceptor;
import java.time.Instant;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Deque;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.Consumer;

/**
 * What java-control-plane saw and sent, through its {@link DiscoveryServerCallbacks}, and how
 * each gRPC call ended (a {@link ServerInterceptor}: java-control-plane's callbacks do not hear
 * of a stream that its own exception ended). Bounded lists (the last 10,000 entries each),
 * ordered across lists by {@code seq}. java-control-plane numbers SotW and delta streams with
 * one counter from 0, so a stream id alone names a stream.
 */
final class Recorder implements DiscoveryServerCallbacks, ServerInterceptor {
  private static final int MAX = 10_000;

  private final Consumer<String> sawNode;
  private final AtomicLong callIds = new AtomicLong();
  private long seq;
  private int streamsOpened;
  private int streamsClosed;
  private final Map<String, Deque<Map<String, Object>>> lists = new LinkedHashMap<>();
  private final Map<String, Integer> nackCounts = new TreeMap<>();
  /** The node of each delta stream's first request (later ones carry none). */
  private final Map<Long, String> deltaNode = new LinkedHashMap<>();

  Recorder(Consumer<String> sawNode) {
    this.sawNode = sawNode;
    clear();
  }

  synchronized void clear() {
    for (String l : List.of("streams", "calls", "requests", "responses", "acks", "nacks")) {
      lists.put(l, new ArrayDeque<>());
    }
    nackCounts.clear();
  }

  private synchronized void push(String list, Map<String, Object> e) {
    e.put("seq", ++seq);
    e.put("time", Instant.now().toString());
    Deque<Map<String, Object>> l = lists.get(list);
    if (l.size() >= MAX) {
      l.removeFirst();
    }
    l.addLast(e);
  }

  synchronized Map<String, Object> view(List<String> nodes) {
    Map<String, Object> v = new LinkedHashMap<>();
    v.put("streams_opened", streamsOpened);
    v.put("streams_closed", streamsClosed);
    lists.forEach((k, l) -> v.put(k, new ArrayList<>(l)));
    int total = nackCounts.values().stream().mapToInt(Integer::intValue).sum();
    v.put("nacks_total", total);
    v.put("nack_counts", new TreeMap<>(nackCounts));
    v.put("nodes", nodes);
    return v;
  }

  // --- java-control-plane's callbacks ------------------------------------------------------

  @Override
  public void onStreamOpen(long streamId, String typeUrl) {
    synchronized (this) {
      streamsOpened++;
    }
    push("streams", entry("stream", streamId, "event", "open", "type_url", typeUrl));
  }

  @Override
  public void onStreamClose(long streamId, String typeUrl) {
    closed(streamId, typeUrl, null);
  }

  @Override
  public void onStreamCloseWithError(long streamId, String typeUrl, Throwable error) {
    closed(streamId, typeUrl, error);
  }

  private void closed(long streamId, String typeUrl, Throwable error) {
    synchronized (this) {
      streamsClosed++;
      deltaNode.remove(streamId);
    }
    io.grpc.Status s = error == null ? null : io.grpc.Status.fromThrowable(error);
    push("streams", entry("stream", streamId, "event", "close", "type_url", typeUrl,
        "error", s == null ? null : entry("code", s.getCode().name(), "message", s.getDescription())));
  }

  @Override
  public void onV3StreamRequest(long streamId, DiscoveryRequest req) {
    // java-control-plane hashes each request by its own node: "" when it carries none.
    sawNode.accept(req.getNode().getId());
    Map<String, Object> e = entry("stream", streamId, "delta", false,
        "type_url", req.getTypeUrl(), "node_id", req.getNode().getId(),
        "version_info", req.getVersionInfo(), "response_nonce", req.getResponseNonce(),
        "resource_names", new ArrayList<>(req.getResourceNamesList()),
        "error_detail", status(req.hasErrorDetail(), req.getErrorDetail()));
    request(e, req.getTypeUrl(), req.getResponseNonce(), req.hasErrorDetail());
  }

  @Override
  public void onV3StreamDeltaRequest(long streamId, DeltaDiscoveryRequest req) {
    String streamNode;
    synchronized (this) {
      if (req.hasNode()) {
        deltaNode.put(streamId, req.getNode().getId());
      }
      streamNode = deltaNode.get(streamId);
    }
    sawNode.accept(req.getNode().getId());
    Map<String, Object> e = entry("stream", streamId, "delta", true,
        "type_url", req.getTypeUrl(), "node_id", req.getNode().getId(),
        "stream_node_id", streamNode, "response_nonce", req.getResponseNonce(),
        "subscribe", new ArrayList<>(req.getResourceNamesSubscribeList()),
        "unsubscribe", new ArrayList<>(req.getResourceNamesUnsubscribeList()),
        "initial_resource_versions", new TreeMap<>(req.getInitialResourceVersionsMap()),
        "error_detail", status(req.hasErrorDetail(), req.getErrorDetail()));
    request(e, req.getTypeUrl(), req.getResponseNonce(), req.hasErrorDetail());
  }

  private void request(Map<String, Object> e, String typeUrl, String nonce, boolean nack) {
    push("requests", e);
    if (nonce.isEmpty()) {
      return;
    }
    if (nack) {
      synchronized (this) {
        nackCounts.merge(typeUrl, 1, Integer::sum);
      }
      push("nacks", new LinkedHashMap<>(e));
    } else {
      push("acks", new LinkedHashMap<>(e));
    }
  }

  @Override
  public void onV3StreamResponse(long streamId, DiscoveryRequest req, DiscoveryResponse resp) {
    List<String> names = new ArrayList<>();
    for (Any a : resp.getResourcesList()) {
      String name;
      try {
        name = Resources.getResourceName(a);
      } catch (RuntimeException ex) {
        name = "?";
      }
      names.add(name);
    }
    push("responses", entry("stream", streamId, "delta", false, "type_url", resp.getTypeUrl(),
        "version_info", resp.getVersionInfo(), "nonce", resp.getNonce(), "resources", names));
  }

  @Override
  public void onV3StreamDeltaResponse(
      long streamId, DeltaDiscoveryRequest req, DeltaDiscoveryResponse resp) {
    push("responses", entry("stream", streamId, "delta", true, "type_url", resp.getTypeUrl(),
        "version_info", resp.getSystemVersionInfo(), "nonce", resp.getNonce(),
        "resources", resp.getResourcesList().stream().map(Resource::getName).toList(),
        "removed_resources", new ArrayList<>(resp.getRemovedResourcesList())));
  }

  // --- how each gRPC call ended ------------------------------------------------------------

  @Override
  public <Q, R> ServerCall.Listener<Q> interceptCall(
      ServerCall<Q, R> call, Metadata headers, ServerCallHandler<Q, R> next) {
    long id = callIds.incrementAndGet();
    String method = call.getMethodDescriptor().getFullMethodName();
    ServerCall<Q, R> recorded = new ForwardingServerCall.SimpleForwardingServerCall<>(call) {
      @Override
      public void close(io.grpc.Status status, Metadata trailers) {
        push("calls", entry("call", id, "method", method, "event", "close",
            "code", status.getCode().name(), "message", status.getDescription()));
        super.close(status, trailers);
      }
    };
    return new ForwardingServerCallListener.SimpleForwardingServerCallListener<>(
        next.startCall(recorded, headers)) {
      @Override
      public void onComplete() {
        // also how a call ends that grpc-java closed itself (UNKNOWN "Application error
        // processing RPC" after an exception out of java-control-plane's onNext): ServerImpl
        // closes the stream directly, not through ServerCall.close, so no "close" is recorded
        push("calls", entry("call", id, "method", method, "event", "complete"));
        super.onComplete();
      }

      @Override
      public void onCancel() {
        // the client went away (or the server was stopped)
        push("calls", entry("call", id, "method", method, "event", "cancel"));
        super.onCancel();
      }
    };
  }

  // --- helpers -----------------------------------------------------------------------------

  private static Map<String, Object> status(boolean present, Status s) {
    return present ? entry("code", s.getCode(), "message", s.getMessage()) : null;
  }

  private static Map<String, Object> entry(Object... kv) {
    Map<String, Object> m = new LinkedHashMap<>();
    for (int i = 0; i < kv.length; i += 2) {
      m.put((String) kv[i], kv[i + 1]);
    }
    return m;
  }
}
