package peer;

import com.google.gson.Gson;
import com.google.gson.GsonBuilder;
import com.google.gson.JsonElement;
import com.google.gson.JsonObject;
import com.google.gson.JsonParser;
import com.google.protobuf.Any;
import com.google.protobuf.Message;
import com.google.protobuf.util.JsonFormat;
import com.sun.net.httpserver.HttpExchange;
import com.sun.net.httpserver.HttpServer;
import io.envoyproxy.controlplane.cache.Resources;
import io.envoyproxy.controlplane.cache.SnapshotConsistencyException;
import io.envoyproxy.controlplane.cache.v3.SimpleCache;
import io.envoyproxy.controlplane.cache.v3.Snapshot;
import io.envoyproxy.controlplane.server.V3DiscoveryServer;
import io.envoyproxy.envoy.config.cluster.v3.Cluster;
import io.envoyproxy.envoy.config.endpoint.v3.ClusterLoadAssignment;
import io.envoyproxy.envoy.config.listener.v3.Listener;
import io.envoyproxy.envoy.config.route.v3.RouteConfiguration;
import io.envoyproxy.envoy.extensions.transport_sockets.tls.v3.Secret;
import io.grpc.Server;
import io.grpc.ServerInterceptors;
import io.grpc.health.v1.HealthCheckResponse.ServingStatus;
import io.grpc.netty.shaded.io.grpc.netty.NettyServerBuilder;
import io.grpc.netty.shaded.io.netty.channel.ChannelOption;
import io.grpc.protobuf.services.HealthStatusManager;
import java.io.IOException;
import java.io.InputStream;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.URLDecoder;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;

/**
 * java-control-plane as a test peer: a {@link SimpleCache} served by {@link V3DiscoveryServer}
 * (ADS SotW and delta, the CDS/EDS/LDS/RDS/SDS services, no RTDS: java-control-plane has none) on
 * a gRPC port, plus the gRPC health service; and a small JSON control API on an HTTP port. See
 * README.md beside the pom.
 *
 * <pre>java -jar java-control-plane-peer.jar [--grpc 127.0.0.1:0] [--http 127.0.0.1:0] [--no-ads] [-v]</pre>
 */
public final class Main {
  static final Gson GSON = new GsonBuilder().serializeNulls().disableHtmlEscaping().create();

  /** The five types java-control-plane's v3 Snapshot holds, by type URL. */
  static final Map<String, Class<? extends Message>> TYPES = Map.of(
      Resources.V3.CLUSTER_TYPE_URL, Cluster.class,
      Resources.V3.ENDPOINT_TYPE_URL, ClusterLoadAssignment.class,
      Resources.V3.LISTENER_TYPE_URL, Listener.class,
      Resources.V3.ROUTE_TYPE_URL, RouteConfiguration.class,
      Resources.V3.SECRET_TYPE_URL, Secret.class);

  public static void main(String[] args) throws Exception {
    String grpc = "127.0.0.1:0";
    String http = "127.0.0.1:0";
    boolean ads = true;
    boolean verbose = false;
    for (int i = 0; i < args.length; i++) {
      switch (args[i]) {
        case "--grpc" -> grpc = value(args, ++i);
        case "--http" -> http = value(args, ++i);
        case "--no-ads" -> ads = false;
        case "-v" -> verbose = true;
        default -> die("unknown argument: " + args[i]
            + " (usage: [--grpc ADDR] [--http ADDR] [--no-ads] [-v])");
      }
    }
    // Before any logger exists: slf4j-simple to stderr, debug with -v.
    System.setProperty("org.slf4j.simpleLogger.logFile", "System.err");
    System.setProperty("org.slf4j.simpleLogger.showDateTime", "true");
    System.setProperty("org.slf4j.simpleLogger.dateTimeFormat", "HH:mm:ss.SSS");
    System.setProperty("org.slf4j.simpleLogger.defaultLogLevel", verbose ? "debug" : "info");

    Peer peer = Peer.start(loopback(grpc), loopback(http), ads);
    Map<String, String> addresses = new LinkedHashMap<>();
    addresses.put("grpc", peer.grpcAddress());
    addresses.put("http", peer.httpAddress());
    System.out.println(GSON.toJson(addresses));
    System.out.flush();

    // Exit when stdin closes (the parent test went away) or on SIGTERM/SIGINT.
    for (String signal : new String[] {"TERM", "INT"}) {
      sun.misc.Signal.handle(new sun.misc.Signal(signal), s -> System.exit(0));
    }
    InputStream in = System.in;
    byte[] buf = new byte[256];
    while (in.read(buf) >= 0) {
      // discard
    }
    System.err.println("stdin closed: exiting");
    System.exit(0);
  }

  private static String value(String[] args, int i) {
    if (i >= args.length) {
      die(args[i - 1] + " needs a value");
    }
    return args[i];
  }

  static void die(String message) {
    System.err.println(message);
    System.exit(1);
  }

  /** HOST:PORT where HOST is a loopback IP literal or localhost; anything else exits 1. */
  static InetSocketAddress loopback(String address) {
    int colon = address.lastIndexOf(':');
    String host = colon < 0 ? "" : address.substring(0, colon);
    if (host.startsWith("[") && host.endsWith("]")) {
      host = host.substring(1, host.length() - 1);
    }
    boolean literal = host.equals("localhost") || host.matches("[0-9.]+") || host.contains(":");
    try {
      int port = Integer.parseInt(address.substring(colon + 1));
      InetAddress ip = InetAddress.getByName(host.equals("localhost") ? "127.0.0.1" : host);
      if (literal && ip.isLoopbackAddress()) {
        return new InetSocketAddress(ip, port);
      }
    } catch (IOException | RuntimeException e) {
      // refused below
    }
    die("refusing address: \"" + address + "\" is not a loopback address");
    return null;
  }

  /** The running peer: cache, xDS server, gRPC listener and control API. */
  static final class Peer {
    final SimpleCache<String> cache = new SimpleCache<>(node -> node.getId());
    final Recorder recorder = new Recorder(this::sawNode);
    final V3DiscoveryServer xds = new V3DiscoveryServer(recorder, cache);
    final HealthStatusManager health = new HealthStatusManager();
    final boolean ads;
    InetSocketAddress grpcAddr;
    HttpServer http;
    Server grpc; // null while stopped

    // Snapshots: per node, and the default (node=*) one. Guarded by this.
    final Map<String, NodeSnap> snaps = new TreeMap<>();
    final Set<String> seen = new HashSet<>();
    NodeSnap def;

    private Peer(boolean ads) {
      this.ads = ads;
    }

    static Peer start(InetSocketAddress grpc, InetSocketAddress http, boolean ads)
        throws IOException {
      Peer peer = new Peer(ads);
      peer.health.setStatus("", ServingStatus.SERVING);
      peer.grpcAddr = grpc;
      peer.startGrpc();
      peer.http = HttpServer.create(http, 64);
      peer.http.createContext("/", peer::handle);
      peer.http.setExecutor(Executors.newCachedThreadPool());
      peer.http.start();
      return peer;
    }

    String grpcAddress() {
      return hostPort(grpcAddr);
    }

    String httpAddress() {
      return hostPort(http.getAddress());
    }

    private static String hostPort(InetSocketAddress a) {
      String host = a.getAddress().getHostAddress();
      return (host.contains(":") ? "[" + host + "]" : host) + ":" + a.getPort();
    }

    synchronized boolean grpcRunning() {
      return grpc != null;
    }

    /** Listens on grpcAddr (the same port again after a stop) with a new gRPC server. */
    synchronized void startGrpc() throws IOException {
      if (grpc != null) {
        return;
      }
      NettyServerBuilder builder = NettyServerBuilder.forAddress(grpcAddr)
          .withOption(ChannelOption.SO_REUSEADDR, true)
          .permitKeepAliveTime(1, TimeUnit.SECONDS)
          .permitKeepAliveWithoutCalls(true)
          .maxInboundMessageSize(64 << 20)
          .addService(ServerInterceptors.intercept(xds.getClusterDiscoveryServiceImpl(), recorder))
          .addService(ServerInterceptors.intercept(xds.getEndpointDiscoveryServiceImpl(), recorder))
          .addService(ServerInterceptors.intercept(xds.getListenerDiscoveryServiceImpl(), recorder))
          .addService(ServerInterceptors.intercept(xds.getRouteDiscoveryServiceImpl(), recorder))
          .addService(ServerInterceptors.intercept(xds.getSecretDiscoveryServiceImpl(), recorder))
          .addService(health.getHealthService());
      if (ads) {
        builder.addService(
            ServerInterceptors.intercept(xds.getAggregatedDiscoveryServiceImpl(), recorder));
      }
      Server server = builder.build();
      IOException last = null;
      for (int attempt = 0; attempt < 50; attempt++) { // the old port may linger for a moment
        try {
          server.start();
          grpc = server;
          grpcAddr = new InetSocketAddress(grpcAddr.getAddress(), server.getPort());
          return;
        } catch (IOException e) {
          last = e;
          server = builder.build();
          try {
            Thread.sleep(100);
          } catch (InterruptedException ie) {
            Thread.currentThread().interrupt();
            break;
          }
        }
      }
      throw last;
    }

    /** Closes the listener and every stream at once (shutdownNow). */
    synchronized void stopGrpc() throws InterruptedException {
      if (grpc == null) {
        return;
      }
      grpc.shutdownNow();
      grpc.awaitTermination(10, TimeUnit.SECONDS);
      grpc = null;
    }

    // -------------------------------------------------------------------------------------
    // Snapshots

    /** One snapshot as set: its version and resources by type URL (java's Snapshot built once). */
    record NodeSnap(String version, Map<String, List<Message>> resources, Snapshot snapshot) {
      static NodeSnap of(String version, Map<String, List<Message>> resources) {
        return new NodeSnap(version, resources, Snapshot.create(
            list(resources, Resources.V3.CLUSTER_TYPE_URL, Cluster.class),
            list(resources, Resources.V3.ENDPOINT_TYPE_URL, ClusterLoadAssignment.class),
            list(resources, Resources.V3.LISTENER_TYPE_URL, Listener.class),
            list(resources, Resources.V3.ROUTE_TYPE_URL, RouteConfiguration.class),
            list(resources, Resources.V3.SECRET_TYPE_URL, Secret.class),
            version));
      }

      private static <T> List<T> list(Map<String, List<Message>> r, String url, Class<T> cls) {
        return r.getOrDefault(url, List.of()).stream().map(cls::cast).toList();
      }

      /** ensureConsistent()'s complaint, or null: reported, never enforced. */
      String consistentError() {
        try {
          snapshot.ensureConsistent();
          return null;
        } catch (SnapshotConsistencyException e) {
          return e.getMessage();
        }
      }
    }

    /**
     * Called by the callbacks with the node id java-control-plane will hash the request under
     * (the request's own node: "" when a request carries none). The first time an id shows up
     * without a snapshot of its own, it gets the default one, before the watch is created.
     */
    synchronized void sawNode(String id) {
      if (seen.add(id) && !snaps.containsKey(id) && def != null) {
        set(id, def);
      }
    }

    private synchronized void set(String node, NodeSnap ns) {
      cache.setSnapshot(node, ns.snapshot());
      snaps.put(node, ns);
    }

    /** The nodes a node=* update applies to: every node seen or set so far. */
    private synchronized List<String> targets() {
      Set<String> ids = new TreeSet<>(seen);
      ids.addAll(snaps.keySet());
      return new ArrayList<>(ids);
    }

    // -------------------------------------------------------------------------------------
    // Control API

    private void handle(HttpExchange ex) throws IOException {
      int code = 200;
      Object out;
      try {
        String route = ex.getRequestMethod() + " " + ex.getRequestURI().getPath();
        Map<String, String> query = query(ex.getRequestURI().getRawQuery());
        String body = new String(ex.getRequestBody().readAllBytes(), StandardCharsets.UTF_8);
        out = switch (route) {
          case "GET /healthz" -> Map.of("ok", true, "grpc_running", grpcRunning());
          case "PUT /snapshot" -> putSnapshot(query.get("node"), body);
          case "POST /cluster" -> postCluster(query.get("node"), query.get("version"), body);
          case "POST /grpc/stop" -> {
            stopGrpc();
            yield Map.of("grpc", grpcAddress(), "running", false);
          }
          case "POST /grpc/start" -> {
            startGrpc();
            yield Map.of("grpc", grpcAddress(), "running", true);
          }
          case "GET /stats" -> recorder.view(targets());
          case "DELETE /stats" -> {
            recorder.clear();
            yield Map.of("ok", true);
          }
          default -> throw new HttpError(404, "no endpoint " + route);
        };
      } catch (HttpError e) {
        code = e.code;
        out = Map.of("error", e.getMessage());
      } catch (Exception e) {
        code = 500;
        out = Map.of("error", String.valueOf(e));
      }
      byte[] bytes = (GSON.toJson(out) + "\n").getBytes(StandardCharsets.UTF_8);
      ex.getResponseHeaders().set("Content-Type", "application/json");
      ex.sendResponseHeaders(code, bytes.length);
      ex.getResponseBody().write(bytes);
      ex.close();
    }

    /** PUT /snapshot?node=ID with {"version":"v1","resources":{"TYPE URL":[Any JSON...]}}. */
    private Object putSnapshot(String node, String body) throws HttpError {
      JsonObject root = parseObject(body);
      String version = root.has("version") ? root.get("version").getAsString() : "";
      Map<String, List<Message>> resources = new LinkedHashMap<>();
      Map<String, List<String>> names = new LinkedHashMap<>();
      JsonObject byType = root.has("resources") ? root.getAsJsonObject("resources") : new JsonObject();
      for (Map.Entry<String, JsonElement> e : byType.entrySet()) {
        String url = e.getKey();
        if (!TYPES.containsKey(url)) {
          throw new HttpError(400, "unknown resource type: " + url + " (java-control-plane's "
              + "Snapshot holds " + new TreeSet<>(TYPES.keySet()) + " only)");
        }
        List<Message> list = new ArrayList<>();
        List<String> listNames = new ArrayList<>();
        int i = 0;
        for (JsonElement raw : e.getValue().getAsJsonArray()) {
          Message m = parseAs(raw, TYPES.get(url), "resources[\"" + url + "\"][" + i++ + "]");
          list.add(m);
          listNames.add(Resources.getResourceName(m));
        }
        resources.put(url, list);
        names.put(url, listNames);
      }
      NodeSnap ns = NodeSnap.of(version, resources);
      boolean all = node == null || node.isEmpty() || node.equals("*");
      List<String> targets;
      synchronized (this) {
        if (all) {
          def = ns;
          targets = targets();
        } else {
          targets = List.of(node);
        }
        for (String id : targets) {
          set(id, ns);
        }
      }
      Map<String, Object> out = new LinkedHashMap<>();
      out.put("nodes", targets);
      out.put("default", all);
      out.put("version", version);
      out.put("resources", names);
      out.put("consistent_error", ns.consistentError());
      return out;
    }

    /**
     * POST /cluster?node=ID[&version=V] with one Cluster (plain JSON or Any JSON with @type):
     * replaces the cluster of that name, or adds it, in the node's snapshot (the default one if
     * it has none; node=* or none: the default and every known node), at V or the previous
     * version + "+1".
     */
    private Object postCluster(String node, String version, String body) throws HttpError {
      Cluster cluster = (Cluster) parseAs(JsonParser.parseString(body), Cluster.class, "cluster");
      boolean all = node == null || node.isEmpty() || node.equals("*");
      List<Map<String, Object>> updated = new ArrayList<>();
      synchronized (this) {
        if (all) {
          def = withCluster(def, cluster, version);
          updated.add(Map.of("node", "*", "version", def.version()));
        }
        for (String id : all ? targets() : List.of(node)) {
          NodeSnap base = snaps.getOrDefault(id, def);
          NodeSnap ns = withCluster(base, cluster, version);
          set(id, ns);
          Map<String, Object> u = new LinkedHashMap<>();
          u.put("node", id);
          u.put("version", ns.version());
          u.put("consistent_error", ns.consistentError());
          updated.add(u);
        }
      }
      return Map.of("cluster", cluster.getName(), "updated", updated);
    }

    private static NodeSnap withCluster(NodeSnap base, Cluster cluster, String version) {
      Map<String, List<Message>> resources = new LinkedHashMap<>();
      if (base != null) {
        base.resources().forEach((t, l) -> resources.put(t, new ArrayList<>(l)));
      }
      List<Message> clusters =
          resources.computeIfAbsent(Resources.V3.CLUSTER_TYPE_URL, t -> new ArrayList<>());
      int at = -1;
      for (int i = 0; i < clusters.size(); i++) {
        if (((Cluster) clusters.get(i)).getName().equals(cluster.getName())) {
          at = i;
        }
      }
      if (at >= 0) {
        clusters.set(at, cluster);
      } else {
        clusters.add(cluster);
      }
      String v = version != null && !version.isEmpty() ? version
          : (base == null ? "" : base.version()) + "+1";
      return NodeSnap.of(v, resources);
    }

    private static JsonObject parseObject(String body) throws HttpError {
      try {
        return JsonParser.parseString(body).getAsJsonObject();
      } catch (RuntimeException e) {
        throw new HttpError(400, "body: " + e.getMessage());
      }
    }
  }

  /**
   * A resource's JSON as {@code cls}: Any JSON ("@type" plus the fields; nested Anys resolved
   * from the Envoy, xds and protobuf classes on the class path), or plain JSON of {@code cls}.
   */
  static Message parseAs(JsonElement raw, Class<? extends Message> cls, String what)
      throws HttpError {
    try {
      JsonFormat.TypeRegistry.Builder registry = JsonFormat.TypeRegistry.newBuilder();
      Set<String> urls = new TreeSet<>();
      typeUrls(raw, urls);
      for (String url : urls) {
        registry.add(descriptorOf(url));
      }
      JsonFormat.Parser parser = JsonFormat.parser().usingTypeRegistry(registry.build());
      String text = raw.toString();
      if (raw.isJsonObject() && raw.getAsJsonObject().has("@type")) {
        Any.Builder any = Any.newBuilder();
        parser.merge(text, any);
        return any.build().unpack(cls);
      }
      Message.Builder b = (Message.Builder) cls.getMethod("newBuilder").invoke(null);
      parser.merge(text, b);
      return b.build();
    } catch (HttpError e) {
      throw e;
    } catch (Exception e) {
      throw new HttpError(400, what + ": " + e.getMessage());
    }
  }

  private static void typeUrls(JsonElement e, Set<String> out) {
    if (e.isJsonObject()) {
      for (Map.Entry<String, JsonElement> f : e.getAsJsonObject().entrySet()) {
        if (f.getKey().equals("@type") && f.getValue().isJsonPrimitive()) {
          out.add(f.getValue().getAsString());
        } else {
          typeUrls(f.getValue(), out);
        }
      }
    } else if (e.isJsonArray()) {
      e.getAsJsonArray().forEach(x -> typeUrls(x, out));
    }
  }

  /**
   * The descriptor of a type URL's message, from its generated class: envoy.* lives in
   * io.envoyproxy.envoy.*, xds.* and udpa.* in com.github.{xds,udpa.udpa}.*, google.protobuf.*
   * in com.google.protobuf.*; a nested message is Outer$Inner. (TypeRegistry.add also takes in
   * every type of the class's .proto file and its imports.)
   */
  static com.google.protobuf.Descriptors.Descriptor descriptorOf(String url) throws HttpError {
    String name = url.substring(url.lastIndexOf('/') + 1);
    for (String prefix : new String[] {"io.envoyproxy.", "com.github.", "com.github.udpa.", "com."}) {
      String cls = prefix + name;
      while (true) {
        try {
          return (com.google.protobuf.Descriptors.Descriptor)
              Class.forName(cls).getMethod("getDescriptor").invoke(null);
        } catch (ReflectiveOperationException | LinkageError e) {
          int dot = cls.lastIndexOf('.');
          if (dot < 0 || cls.indexOf('.') == dot) {
            break;
          }
          cls = cls.substring(0, dot) + "$" + cls.substring(dot + 1);
        }
      }
    }
    throw new HttpError(400, "unable to resolve \"" + url + "\": no such message class");
  }

  static Map<String, String> query(String raw) {
    Map<String, String> q = new LinkedHashMap<>();
    if (raw != null) {
      for (String kv : raw.split("&")) {
        int eq = kv.indexOf('=');
        String k = eq < 0 ? kv : kv.substring(0, eq);
        String v = eq < 0 ? "" : kv.substring(eq + 1);
        q.put(URLDecoder.decode(k, StandardCharsets.UTF_8), URLDecoder.decode(v, StandardCharsets.UTF_8));
      }
    }
    return q;
  }

  static final class HttpError extends Exception {
    final int code;

    HttpError(int code, String message) {
      super(message);
      this.code = code;
    }
  }
}
