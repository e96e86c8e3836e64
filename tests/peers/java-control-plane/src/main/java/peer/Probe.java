package peer;

import com.google.protobuf.Any;
import io.envoyproxy.controlplane.cache.Resources;
import io.envoyproxy.envoy.config.core.v3.Node;
import io.envoyproxy.envoy.service.cluster.v3.ClusterDiscoveryServiceGrpc;
import io.envoyproxy.envoy.service.discovery.v3.AggregatedDiscoveryServiceGrpc;
import io.envoyproxy.envoy.service.discovery.v3.DeltaDiscoveryRequest;
import io.envoyproxy.envoy.service.discovery.v3.DeltaDiscoveryResponse;
import io.envoyproxy.envoy.service.discovery.v3.DiscoveryRequest;
import io.envoyproxy.envoy.service.discovery.v3.DiscoveryResponse;
import io.envoyproxy.envoy.service.discovery.v3.Resource;
import io.envoyproxy.envoy.service.endpoint.v3.EndpointDiscoveryServiceGrpc;
import io.envoyproxy.envoy.service.runtime.v3.RuntimeDiscoveryServiceGrpc;
import io.grpc.CallOptions;
import io.grpc.Channel;
import io.grpc.ClientCall;
import io.grpc.ClientInterceptor;
import io.grpc.ClientInterceptors;
import io.grpc.ForwardingClientCall;
import io.grpc.ForwardingClientCallListener;
import io.grpc.ManagedChannel;
import io.grpc.Metadata;
import io.grpc.MethodDescriptor;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import io.grpc.health.v1.HealthCheckRequest;
import io.grpc.health.v1.HealthGrpc;
import io.grpc.netty.shaded.io.grpc.netty.NettyChannelBuilder;
import io.grpc.stub.StreamObserver;
import java.net.InetSocketAddress;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.util.List;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import java.util.function.BiFunction;

/**
 * Checks, against a real {@link Main.Peer} in this process (over loopback gRPC and its HTTP
 * control API), the behaviours of java-control-plane that README.md lists, and prints what it
 * observed, one line each. Run: {@code java -cp java-control-plane-peer.jar peer.Probe}.
 */
public final class Probe {
  static final String CDS = Resources.V3.CLUSTER_TYPE_URL;
  static final String EDS = Resources.V3.ENDPOINT_TYPE_URL;
  static final String RUNTIME = "type.googleapis.com/envoy.service.runtime.v3.Runtime";
  /** How long "never answered" waits. */
  static final long SILENCE_MS = 3000;

  final Main.Peer peer;
  final ManagedChannel channel;
  final HttpClient http = HttpClient.newHttpClient();
  final long t0 = System.nanoTime();

  Probe(Main.Peer peer) {
    this.peer = peer;
    this.channel = NettyChannelBuilder.forTarget(peer.grpcAddress()).usePlaintext().build();
  }

  public static void main(String[] args) throws Exception {
    System.setProperty("org.slf4j.simpleLogger.logFile", "System.err");
    System.setProperty("org.slf4j.simpleLogger.defaultLogLevel", "warn");
    Main.Peer peer = Main.Peer.start(
        new InetSocketAddress("127.0.0.1", 0), new InetSocketAddress("127.0.0.1", 0), true);
    Probe p = new Probe(peer);
    p.say("peer", "java-control-plane 1.0.49 on " + peer.grpcAddress()
        + ", control API on " + peer.httpAddress());
    p.say("health", "Check(\"\") -> " + HealthGrpc.newBlockingStub(p.channel)
        .check(HealthCheckRequest.getDefaultInstance()).getStatus());
    p.unknownTypeOnAds();
    p.unknownPerTypeService();
    p.currentVersionIsNotAnswered();
    p.missingEdsNameOnAds();
    p.deltaWildcardAndInitialVersions();
    p.nackLoop();
    p.nodeOnFirstRequestOnly();
    p.channel.shutdownNow();
    System.exit(0);
  }

  // --- the checks --------------------------------------------------------------------------

  /** (a) An ADS request for a type java-control-plane does not serve. */
  void unknownTypeOnAds() throws Exception {
    snapshot("*", "v1");
    Sotw ads = sotwAds();
    ads.send(req(CDS, "n1", "", "").build());
    DiscoveryResponse cds = ads.next(SILENCE_MS);
    say("a", "SotW ADS: CDS -> " + show(cds));
    long sent = System.nanoTime();
    ads.send(req(RUNTIME, "n1", "", "").build());
    Status end = ads.ended(SILENCE_MS);
    say("a", "SotW ADS: then Runtime -> the whole stream ends: " + show(end)
        + " after " + ms(sent) + " ms; nothing else received: " + (ads.next(0) == null));

    Delta delta = deltaAds();
    delta.send(dreq(CDS, "n1").build());
    say("a", "delta ADS: CDS -> " + show(delta.next(SILENCE_MS)));
    sent = System.nanoTime();
    delta.send(dreq(RUNTIME, null).build());
    say("a", "delta ADS: then Runtime -> the whole stream ends: "
        + show(delta.ended(SILENCE_MS)) + " after " + ms(sent) + " ms");
    Thread.sleep(200);
    say("a", "peer's record of those calls: " + Main.GSON.toJson(stats("calls", 2)));
    say("a", "java-control-plane's own callbacks on those streams: "
        + Main.GSON.toJson(stats("streams", 4)));
  }

  /** (b) The per-type services java-control-plane lacks, and the unary Fetch it lacks. */
  void unknownPerTypeService() throws Exception {
    Sotw rtds = new Sotw((ch, o) -> RuntimeDiscoveryServiceGrpc.newStub(ch).streamRuntime(o));
    long sent = System.nanoTime();
    rtds.send(req(RUNTIME, "n1", "", "").build());
    say("b", "RuntimeDiscoveryService/StreamRuntime -> " + show(rtds.ended(SILENCE_MS))
        + " after " + ms(sent) + " ms");
    Delta drtds = new Delta((ch, o) -> RuntimeDiscoveryServiceGrpc.newStub(ch).deltaRuntime(o));
    drtds.send(dreq(RUNTIME, "n1").build());
    say("b", "RuntimeDiscoveryService/DeltaRuntime -> " + show(drtds.ended(SILENCE_MS)));
    try {
      ClusterDiscoveryServiceGrpc.newBlockingStub(channel).fetchClusters(req(CDS, "n1", "", "").build());
      say("b", "ClusterDiscoveryService/FetchClusters -> answered");
    } catch (StatusRuntimeException e) {
      say("b", "ClusterDiscoveryService/FetchClusters (unary Fetch) -> " + show(e.getStatus()));
    }
  }

  /** (c) A SotW request presenting the version the server holds (a new stream after a restart). */
  void currentVersionIsNotAnswered() throws Exception {
    for (String kind : List.of("ADS", "per-type CDS")) {
      snapshot("*", "v1");
      Sotw s = kind.equals("ADS") ? sotwAds()
          : new Sotw((ch, o) -> ClusterDiscoveryServiceGrpc.newStub(ch).streamClusters(o));
      long sent = System.nanoTime();
      s.send(req(CDS, "n1", "v1", "").build());
      DiscoveryResponse r = s.next(SILENCE_MS);
      say("c", "SotW " + kind + ": a new stream's CDS request with version_info v1 (current) -> "
          + (r == null ? "nothing within " + SILENCE_MS + " ms (response headers received: "
              + s.headers + ", stream ended: " + (s.ended(0) != null) + ")" : show(r)));
      snapshot("*", "v2");
      r = s.next(SILENCE_MS);
      say("c", "SotW " + kind + ": then a snapshot v2 -> " + show(r) + " " + ms(sent) + " ms after the request");
      s.close();
    }
    Delta d = deltaAds();
    d.send(dreq(CDS, "n1").build());
    say("c", "delta ADS for comparison: a new stream's CDS subscription -> " + show(d.next(SILENCE_MS)));
    d.close();
  }

  /** (d) On SotW ADS, an EDS request naming a resource the snapshot lacks. */
  void missingEdsNameOnAds() throws Exception {
    snapshot("*", "v1");
    Sotw ads = sotwAds();
    ads.send(req(EDS, "n1", "", "", "c1", "nope").build());
    DiscoveryResponse r = ads.next(SILENCE_MS);
    say("d", "SotW ADS: EDS [c1, nope] (nope absent) -> "
        + (r == null ? "nothing within " + SILENCE_MS + " ms" : show(r)));
    snapshot("*", "v2");
    r = ads.next(SILENCE_MS);
    say("d", "SotW ADS: then snapshot v2 (nope still absent) -> "
        + (r == null ? "nothing; java-control-plane dropped the watch" : show(r)));
    snapshotWith("*", "v3", "nope");
    r = ads.next(SILENCE_MS);
    say("d", "SotW ADS: then snapshot v3 WITH nope -> "
        + (r == null ? "still nothing: the watch is gone (java-control-plane issue #219); "
            + "only a new request revives it" : show(r)));
    ads.send(req(EDS, "n1", "", "", "c1", "nope").build());
    say("d", "SotW ADS: the same request sent again -> " + show(ads.next(SILENCE_MS)));
    ads.close();
    snapshot("*", "v1");
    Sotw eds = new Sotw((ch, o) -> EndpointDiscoveryServiceGrpc.newStub(ch).streamEndpoints(o));
    eds.send(req(EDS, "n1", "", "", "c1", "nope").build());
    say("d", "per-type EDS stream (not ADS): EDS [c1, nope] -> " + show(eds.next(SILENCE_MS)));
    eds.close();
  }

  /** (e) Delta: which types are wildcard, and initial_resource_versions. */
  void deltaWildcardAndInitialVersions() throws Exception {
    snapshot("*", "v1");
    Delta d = deltaAds();
    d.send(dreq(CDS, "n1").build());
    DeltaDiscoveryResponse cds = d.next(SILENCE_MS);
    say("e", "delta ADS: CDS, no names (wildcard) -> " + show(cds));
    d.send(dreq(CDS, null).setResponseNonce(cds.getNonce()).build());
    d.send(dreq(EDS, null).build());
    DeltaDiscoveryResponse r = d.next(SILENCE_MS);
    say("e", "delta ADS: EDS, no names (wildcard by the protocol) -> "
        + (r == null ? "nothing within " + SILENCE_MS + " ms: EDS is not a wildcard type here" : show(r)));
    d.send(dreq(EDS, null).addResourceNamesSubscribe("*").build());
    r = d.next(SILENCE_MS);
    say("e", "delta ADS: EDS subscribing \"*\" (explicit wildcard) -> "
        + (r == null ? "nothing: \"*\" is taken as a resource name" : show(r)));
    d.close();

    Delta again = deltaAds();
    DeltaDiscoveryRequest.Builder resume = dreq(CDS, "n1");
    for (Resource res : cds.getResourcesList()) {
      resume.putInitialResourceVersions(res.getName(), res.getVersion());
    }
    again.send(resume.build());
    r = again.next(SILENCE_MS);
    say("e", "delta ADS: a new stream's CDS with initial_resource_versions "
        + resume.getInitialResourceVersionsMap() + " (exactly what it holds) -> "
        + (r == null ? "nothing" : show(r) + ": sent again, the versions ignored"));
    again.close();
  }

  /** (f) After a NACK, is the same version sent again at once? */
  void nackLoop() throws Exception {
    snapshot("*", "v1");
    for (String presented : List.of("", "v1")) {
      Sotw ads = sotwAds();
      ads.send(req(CDS, "n1", "", "").build());
      DiscoveryResponse r = ads.next(SILENCE_MS);
      int resent = 0;
      long start = System.nanoTime();
      while (r != null && ms(start) < 1000) {
        ads.send(req(CDS, "n1", presented, r.getNonce())
            .setErrorDetail(com.google.rpc.Status.newBuilder().setCode(3).setMessage("refused"))
            .build());
        r = ads.next(500);
        if (r != null) {
          resent++;
        }
      }
      say("f", "SotW ADS: NACKing every CDS response with version_info \"" + presented
          + "\" for 1 s -> " + resent + " re-sends of the same version"
          + (resent > 0 ? " (" + (1000 * resent / Math.max(1, ms(start))) + "/s: a NACK loop)"
              : " (none: the watch waits for a new version)"));
      ads.close();
    }
    say("f", "peer's /stats: nack_counts " + statsJson().get("nack_counts"));
    Delta d = deltaAds();
    d.send(dreq(CDS, "n1").build());
    DeltaDiscoveryResponse r = d.next(SILENCE_MS);
    d.send(dreq(CDS, null).setResponseNonce(r.getNonce())
        .setErrorDetail(com.google.rpc.Status.newBuilder().setCode(3).setMessage("refused")).build());
    DeltaDiscoveryResponse again = d.next(SILENCE_MS);
    say("f", "delta ADS: NACK of the CDS response -> "
        + (again == null ? "nothing re-sent within " + SILENCE_MS + " ms" : show(again)));
    d.close();
  }

  /**
   * (g) java-control-plane hashes every request by the node in that request; the protocol
   * sends the node on a stream's first request only (the gateway does so).
   */
  void nodeOnFirstRequestOnly() throws Exception {
    snapshot("*", "v1");
    snapshot("solo", "s1");
    Sotw ads = sotwAds();
    ads.send(req(CDS, "solo", "", "").build());
    DiscoveryResponse r = ads.next(SILENCE_MS);
    say("g", "SotW ADS: node solo (its own snapshot s1) CDS -> " + show(r));
    ads.send(req(CDS, null, r.getVersionInfo(), r.getNonce()).build());
    DiscoveryResponse next = ads.next(SILENCE_MS);
    say("g", "SotW ADS: its ACK, without the node -> " + (next == null ? "nothing" : show(next)
        + ": the ACK was hashed as node \"\", which has the default snapshot"));
    Sotw ads2 = sotwAds();
    ads2.send(req(CDS, "solo", "", "").build());
    r = ads2.next(SILENCE_MS);
    ads2.send(req(CDS, "solo", r.getVersionInfo(), r.getNonce()).build());
    ads2.send(req(EDS, "solo", "", "", "c1").build());
    say("g", "SotW ADS with the node on every request: CDS " + show(r) + ", EDS -> "
        + show(ads2.next(SILENCE_MS)));
    ads.close();
    ads2.close();
  }

  // --- plumbing ----------------------------------------------------------------------------

  void say(String check, String what) {
    System.out.printf("(%s) %s%n", check, what);
    System.out.flush();
  }

  static long ms(long since) {
    return TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - since);
  }

  /** Snapshot v: clusters c1 (EDS) and c2 (STATIC), the assignment of c1 (and extra ones). */
  void snapshot(String node, String version) throws Exception {
    snapshotWith(node, version);
  }

  void snapshotWith(String node, String version, String... extraAssignments) throws Exception {
    StringBuilder cla = new StringBuilder(assignment("c1"));
    for (String extra : extraAssignments) {
      cla.append(',').append(assignment(extra));
    }
    String body = """
        {"version": "%s", "resources": {
          "%s": [
            {"@type": "%s", "name": "c1", "type": "EDS", "eds_cluster_config": {"eds_config": {"ads": {}}}, "connect_timeout": "1s"},
            {"@type": "%s", "name": "c2", "type": "STATIC", "connect_timeout": "3s"}],
          "%s": [%s]}}""".formatted(version, CDS, CDS, CDS, EDS, cla);
    HttpResponse<String> reply = http.send(HttpRequest.newBuilder(
            URI.create("http://" + peer.httpAddress() + "/snapshot?node=" + node))
        .PUT(HttpRequest.BodyPublishers.ofString(body)).build(),
        HttpResponse.BodyHandlers.ofString());
    if (reply.statusCode() != 200) {
      throw new IllegalStateException("PUT /snapshot: " + reply.body());
    }
  }

  static String assignment(String name) {
    return "{\"@type\": \"" + EDS + "\", \"cluster_name\": \"" + name + "\"}";
  }

  com.google.gson.JsonObject statsJson() throws Exception {
    String body = http.send(HttpRequest.newBuilder(
            URI.create("http://" + peer.httpAddress() + "/stats")).build(),
        HttpResponse.BodyHandlers.ofString()).body();
    return com.google.gson.JsonParser.parseString(body).getAsJsonObject();
  }

  /** The last n entries of one of the peer's /stats lists. */
  Object stats(String list, int n) throws Exception {
    var all = statsJson().getAsJsonArray(list);
    var out = new com.google.gson.JsonArray();
    for (int i = Math.max(0, all.size() - n); i < all.size(); i++) {
      var e = all.get(i).getAsJsonObject();
      e.remove("time");
      e.remove("seq");
      out.add(e);
    }
    return out;
  }

  static DiscoveryRequest.Builder req(String type, String node, String version, String nonce,
      String... names) {
    DiscoveryRequest.Builder b = DiscoveryRequest.newBuilder().setTypeUrl(type)
        .setVersionInfo(version).setResponseNonce(nonce).addAllResourceNames(List.of(names));
    if (node != null) {
      b.setNode(Node.newBuilder().setId(node).setCluster("probe"));
    }
    return b;
  }

  static DeltaDiscoveryRequest.Builder dreq(String type, String node) {
    DeltaDiscoveryRequest.Builder b = DeltaDiscoveryRequest.newBuilder().setTypeUrl(type);
    if (node != null) {
      b.setNode(Node.newBuilder().setId(node).setCluster("probe"));
    }
    return b;
  }

  static String show(Status s) {
    return s == null ? "still open" : s.getCode() + " \"" + s.getDescription() + "\""
        + (s.getCause() != null ? " (cause " + s.getCause() + ")" : "");
  }

  static String show(DiscoveryResponse r) {
    if (r == null) {
      return "nothing within " + SILENCE_MS + " ms";
    }
    return "version " + r.getVersionInfo() + " nonce \"" + r.getNonce() + "\" "
        + r.getResourcesList().stream().map(Probe::name).toList();
  }

  static String show(DeltaDiscoveryResponse r) {
    if (r == null) {
      return "nothing within " + SILENCE_MS + " ms";
    }
    return "system_version " + r.getSystemVersionInfo() + " nonce \"" + r.getNonce() + "\" "
        + r.getResourcesList().stream().map(Resource::getName).toList()
        + (r.getRemovedResourcesCount() > 0 ? " removed " + r.getRemovedResourcesList() : "");
  }

  static String name(Any a) {
    return Resources.getResourceName(a);
  }

  /** One client stream: what it received, and how it ended. */
  class Stream<Q, R> implements StreamObserver<R> {
    final BlockingQueue<R> got = new LinkedBlockingQueue<>();
    final CompletableFuture<Status> end = new CompletableFuture<>();
    final StreamObserver<Q> out;
    /** Whether the server sent response headers. */
    volatile boolean headers;

    Stream(BiFunction<Channel, StreamObserver<R>, StreamObserver<Q>> open) {
      out = open.apply(ClientInterceptors.intercept(channel, new ClientInterceptor() {
        @Override
        public <A, B> ClientCall<A, B> interceptCall(
            MethodDescriptor<A, B> method, CallOptions options, Channel next) {
          return new ForwardingClientCall.SimpleForwardingClientCall<>(next.newCall(method, options)) {
            @Override
            public void start(ClientCall.Listener<B> listener, Metadata md) {
              super.start(new ForwardingClientCallListener.SimpleForwardingClientCallListener<>(listener) {
                @Override
                public void onHeaders(Metadata h) {
                  headers = true;
                  super.onHeaders(h);
                }
              }, md);
            }
          };
        }
      }), this);
    }

    void send(Q request) {
      out.onNext(request);
    }

    R next(long ms) throws InterruptedException {
      return got.poll(ms, TimeUnit.MILLISECONDS);
    }

    Status ended(long ms) throws Exception {
      try {
        return end.get(ms, TimeUnit.MILLISECONDS);
      } catch (java.util.concurrent.TimeoutException e) {
        return null;
      }
    }

    void close() {
      out.onCompleted();
    }

    @Override
    public void onNext(R value) {
      got.add(value);
    }

    @Override
    public void onError(Throwable t) {
      end.complete(Status.fromThrowable(t));
    }

    @Override
    public void onCompleted() {
      end.complete(Status.OK);
    }
  }

  final class Sotw extends Stream<DiscoveryRequest, DiscoveryResponse> {
    Sotw(BiFunction<Channel, StreamObserver<DiscoveryResponse>, StreamObserver<DiscoveryRequest>> open) {
      super(open);
    }
  }

  final class Delta extends Stream<DeltaDiscoveryRequest, DeltaDiscoveryResponse> {
    Delta(BiFunction<Channel, StreamObserver<DeltaDiscoveryResponse>, StreamObserver<DeltaDiscoveryRequest>> open) {
      super(open);
    }
  }

  Sotw sotwAds() {
    return new Sotw((ch, o) -> AggregatedDiscoveryServiceGrpc.newStub(ch).streamAggregatedResources(o));
  }

  Delta deltaAds() {
    return new Delta((ch, o) -> AggregatedDiscoveryServiceGrpc.newStub(ch).deltaAggregatedResources(o));
  }
}
