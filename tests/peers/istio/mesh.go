package main

import (
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"

	meshconfig "istio.io/api/mesh/v1alpha1"
	"istio.io/istio/pkg/config/mesh"
)

// The mesh: a small bookinfo in namespace default (productpage, details,
// reviews v1/v2/v3, ratings, all on port 9080), httpbin in namespace other
// (port 8000, behind a Sidecar that restricts its egress), and the ingress
// gateway in istio-system (label istio=ingressgateway), as Kubernetes objects
// (Namespaces, Nodes, Services, Pods with IPs, labels and service accounts,
// EndpointSlices as Kubernetes' endpoint controller would write them) and
// Istio config (meshConfigString). One PeerAuthentication selects only
// reviews-v2's pods (STRICT mTLS), so that reviews-v2's own view (its
// inbound listener) differs from reviews-v1's: a node that Istio does not
// recognise as reviews-v2 does not get it.

// Kubernetes' cluster name in Istio: the fake's default cluster id.
const clusterID = "Kubernetes"

// The ISTIO_VERSION the peer's example nodes announce.
const proxyIstioVersion = "1.31.0"

type servicePort struct {
	name   string
	port   int32
	target int32
}

type service struct {
	namespace, name, clusterIP string
	ports                      []servicePort
	selector                   map[string]string
}

type pod struct {
	namespace, name, ip, serviceAccount, node string
	labels                                    map[string]string
	containerPorts                            []int32
	sidecar                                   bool // injected: a sidecar proxy, else a gateway (router)
	workload                                  string
}

var nodes = []struct{ name, region, zone string }{
	{"worker-1", "us-east1", "us-east1-b"},
	{"worker-2", "us-east1", "us-east1-c"},
}

var services = []service{
	{"default", "productpage", "10.96.10.1", []servicePort{{"http", 9080, 9080}}, map[string]string{"app": "productpage"}},
	{"default", "details", "10.96.10.2", []servicePort{{"http", 9080, 9080}}, map[string]string{"app": "details"}},
	{"default", "reviews", "10.96.10.3", []servicePort{{"http", 9080, 9080}}, map[string]string{"app": "reviews"}},
	{"default", "ratings", "10.96.10.4", []servicePort{{"http", 9080, 9080}}, map[string]string{"app": "ratings"}},
	{"other", "httpbin", "10.96.20.1", []servicePort{{"http", 8000, 8080}}, map[string]string{"app": "httpbin"}},
	{"istio-system", "istio-ingressgateway", "10.96.30.1", []servicePort{
		{"status-port", 15021, 15021}, {"http2", 80, 8080}, {"https", 443, 8443},
	}, map[string]string{"app": "istio-ingressgateway", "istio": "ingressgateway"}},
}

func bookinfoPod(app, version, hash, ip, node string) pod {
	return pod{
		namespace:      "default",
		name:           fmt.Sprintf("%s-%s-%s", app, version, hash),
		ip:             ip,
		serviceAccount: "bookinfo-" + app,
		node:           node,
		labels: map[string]string{
			"app":                                 app,
			"version":                             version,
			"pod-template-hash":                   strings.SplitN(hash, "-", 2)[0],
			"security.istio.io/tlsMode":           "istio",
			"service.istio.io/canonical-name":     app,
			"service.istio.io/canonical-revision": version,
		},
		containerPorts: []int32{9080},
		sidecar:        true,
		workload:       app + "-" + version,
	}
}

var pods = []pod{
	bookinfoPod("productpage", "v1", "6b746f74dc-9stvs", "10.244.1.10", "worker-1"),
	bookinfoPod("details", "v1", "79f774bdb9-wq4rt", "10.244.1.11", "worker-1"),
	bookinfoPod("reviews", "v1", "545db77b95-2psdf", "10.244.1.12", "worker-1"),
	bookinfoPod("reviews", "v2", "7bf8c9648f-6q8kx", "10.244.1.13", "worker-1"),
	bookinfoPod("reviews", "v3", "84779c7bbc-b5t7p", "10.244.1.14", "worker-2"),
	bookinfoPod("ratings", "v1", "7dc98c7588-x7k5n", "10.244.1.15", "worker-1"),
	{
		namespace: "other", name: "httpbin-5c5c5f8c6b-k2v9d", ip: "10.244.2.10", serviceAccount: "httpbin", node: "worker-2",
		labels: map[string]string{
			"app": "httpbin", "version": "v1", "pod-template-hash": "5c5c5f8c6b",
			"security.istio.io/tlsMode":           "istio",
			"service.istio.io/canonical-name":     "httpbin",
			"service.istio.io/canonical-revision": "v1",
		},
		containerPorts: []int32{8080}, sidecar: true, workload: "httpbin",
	},
	{
		namespace: "istio-system", name: "istio-ingressgateway-7b5c9c6d8f-q9xzm", ip: "10.244.0.20",
		serviceAccount: "istio-ingressgateway-service-account", node: "worker-2",
		labels: map[string]string{
			"app": "istio-ingressgateway", "istio": "ingressgateway", "pod-template-hash": "7b5c9c6d8f",
			"service.istio.io/canonical-name":     "istio-ingressgateway",
			"service.istio.io/canonical-revision": "latest",
			"sidecar.istio.io/inject":             "false",
		},
		containerPorts: []int32{8080, 8443, 15021, 15090}, workload: "istio-ingressgateway",
	},
}

// sidecarStatus is the annotation Istio's injector puts on an injected pod.
const sidecarStatus = `{"initContainers":["istio-init"],"containers":["istio-proxy"],"volumes":["workload-socket","credential-socket","workload-certs","istio-envoy","istio-data","istio-podinfo","istio-token","istiod-ca-cert"],"imagePullSecrets":null,"revision":"default"}`

func (p pod) object() *corev1.Pod {
	annotations := map[string]string{}
	containers := []corev1.Container{}
	app := p.labels["app"]
	var ports []corev1.ContainerPort
	for _, cp := range p.containerPorts {
		ports = append(ports, corev1.ContainerPort{ContainerPort: cp, Protocol: corev1.ProtocolTCP})
	}
	if p.sidecar {
		annotations["sidecar.istio.io/status"] = sidecarStatus
		annotations["kubectl.kubernetes.io/default-container"] = app
		containers = append(containers,
			corev1.Container{Name: app, Image: "docker.io/istio/examples-bookinfo-" + app, Ports: ports},
			corev1.Container{Name: "istio-proxy", Image: "docker.io/istio/proxyv2:" + proxyIstioVersion})
	} else {
		containers = append(containers, corev1.Container{Name: "istio-proxy", Image: "docker.io/istio/proxyv2:" + proxyIstioVersion, Ports: ports})
	}
	return &corev1.Pod{
		TypeMeta: metav1.TypeMeta{Kind: "Pod", APIVersion: "v1"},
		ObjectMeta: metav1.ObjectMeta{
			Name: p.name, Namespace: p.namespace, Labels: p.labels, Annotations: annotations,
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "apps/v1", Kind: "ReplicaSet", Name: p.workload + "-" + p.labels["pod-template-hash"],
				UID: "00000000-0000-0000-0000-000000000001",
			}},
		},
		Spec: corev1.PodSpec{
			ServiceAccountName: p.serviceAccount,
			NodeName:           p.node,
			Containers:         containers,
		},
		Status: corev1.PodStatus{
			Phase:  corev1.PodRunning,
			PodIP:  p.ip,
			PodIPs: []corev1.PodIP{{IP: p.ip}},
			HostIP: "192.168.0.1",
			Conditions: []corev1.PodCondition{
				{Type: corev1.PodReady, Status: corev1.ConditionTrue},
				{Type: corev1.ContainersReady, Status: corev1.ConditionTrue},
			},
		},
	}
}

func (s service) object() *corev1.Service {
	var ports []corev1.ServicePort
	for _, sp := range s.ports {
		ports = append(ports, corev1.ServicePort{
			Name: sp.name, Port: sp.port, TargetPort: intstr.FromInt32(sp.target), Protocol: corev1.ProtocolTCP,
		})
	}
	return &corev1.Service{
		TypeMeta: metav1.TypeMeta{Kind: "Service", APIVersion: "v1"},
		ObjectMeta: metav1.ObjectMeta{
			Name: s.name, Namespace: s.namespace,
			Labels: map[string]string{"app": s.selector["app"], "service": s.name},
		},
		Spec: corev1.ServiceSpec{
			Type: corev1.ServiceTypeClusterIP, ClusterIP: s.clusterIP, ClusterIPs: []string{s.clusterIP},
			Ports: ports, Selector: s.selector,
		},
	}
}

// selects: the service's selector matches the pod's labels.
func (s service) selects(namespace string, labels map[string]string) bool {
	if s.namespace != namespace || len(s.selector) == 0 {
		return false
	}
	for k, v := range s.selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}

func nodeZone(node string) string {
	for _, n := range nodes {
		if n.name == node {
			return n.zone
		}
	}
	return ""
}

// sliceEndpoint is pod p's entry in an EndpointSlice.
func sliceEndpoint(p *corev1.Pod) discoveryv1.Endpoint {
	t := true
	f := false
	nodeName := p.Spec.NodeName
	ep := discoveryv1.Endpoint{
		Addresses:  []string{p.Status.PodIP},
		Conditions: discoveryv1.EndpointConditions{Ready: &t, Serving: &t, Terminating: &f},
		TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: p.Namespace, Name: p.Name, UID: p.UID},
	}
	if nodeName != "" {
		ep.NodeName = &nodeName
		if z := nodeZone(nodeName); z != "" {
			ep.Zone = &z
		}
	}
	return ep
}

// sliceFor is the EndpointSlice Kubernetes' endpoint slice controller
// writes for s over podObjs.
func (s service) sliceFor(podObjs []*corev1.Pod) *discoveryv1.EndpointSlice {
	var ports []discoveryv1.EndpointPort
	for _, sp := range s.ports {
		name, port, proto := sp.name, sp.target, corev1.ProtocolTCP
		ports = append(ports, discoveryv1.EndpointPort{Name: &name, Port: &port, Protocol: &proto})
	}
	slice := &discoveryv1.EndpointSlice{
		TypeMeta: metav1.TypeMeta{Kind: "EndpointSlice", APIVersion: "discovery.k8s.io/v1"},
		ObjectMeta: metav1.ObjectMeta{
			Name: s.name + "-x7k2p", Namespace: s.namespace,
			Labels: map[string]string{
				discoveryv1.LabelServiceName: s.name,
				discoveryv1.LabelManagedBy:   "endpointslice-controller.k8s.io",
			},
		},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       ports,
	}
	for _, p := range podObjs {
		if s.selects(p.Namespace, p.Labels) {
			slice.Endpoints = append(slice.Endpoints, sliceEndpoint(p))
		}
	}
	return slice
}

// meshConfig is Istio's default mesh config as a default install (helm or
// istioctl) writes it: Prometheus as the default metrics provider, so that
// sidecars and gateways get Istio's stats filter.
func meshConfig() *meshconfig.MeshConfig {
	m := mesh.DefaultMeshConfig()
	m.DefaultProviders = &meshconfig.MeshConfig_DefaultProviders{Metrics: []string{"prometheus"}}
	return m
}

// meshObjects: every Kubernetes object of the mesh.
func meshObjects() ([]runtime.Object, error) {
	var out []runtime.Object
	for _, ns := range []string{"default", "other", "istio-system"} {
		labels := map[string]string{"kubernetes.io/metadata.name": ns}
		if ns != "istio-system" {
			labels["istio-injection"] = "enabled"
		}
		out = append(out, &corev1.Namespace{
			TypeMeta:   metav1.TypeMeta{Kind: "Namespace", APIVersion: "v1"},
			ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: labels},
		})
	}
	for _, n := range nodes {
		out = append(out, &corev1.Node{
			TypeMeta: metav1.TypeMeta{Kind: "Node", APIVersion: "v1"},
			ObjectMeta: metav1.ObjectMeta{Name: n.name, Labels: map[string]string{
				"kubernetes.io/hostname":        n.name,
				"topology.kubernetes.io/region": n.region,
				"topology.kubernetes.io/zone":   n.zone,
			}},
		})
	}
	seen := map[string]bool{}
	var podObjs []*corev1.Pod
	for _, p := range pods {
		if seen[p.namespace+"/"+p.name] || seen[p.ip] {
			return nil, fmt.Errorf("duplicate pod %s/%s or IP %s", p.namespace, p.name, p.ip)
		}
		seen[p.namespace+"/"+p.name], seen[p.ip] = true, true
		o := p.object()
		podObjs = append(podObjs, o)
		out = append(out, o)
		out = append(out, &corev1.ServiceAccount{
			TypeMeta:   metav1.TypeMeta{Kind: "ServiceAccount", APIVersion: "v1"},
			ObjectMeta: metav1.ObjectMeta{Name: p.serviceAccount, Namespace: p.namespace},
		})
	}
	for _, s := range services {
		out = append(out, s.object(), s.sliceFor(podObjs))
	}
	return dedupeServiceAccounts(out), nil
}

func dedupeServiceAccounts(objs []runtime.Object) []runtime.Object {
	seen := map[string]bool{}
	out := objs[:0]
	for _, o := range objs {
		if sa, ok := o.(*corev1.ServiceAccount); ok {
			key := sa.Namespace + "/" + sa.Name
			if seen[key] {
				continue
			}
			seen[key] = true
		}
		out = append(out, o)
	}
	return out
}

// meshConfigString: the Istio config the fake server starts with.
const meshConfigString = `
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata:
  name: reviews
  namespace: default
spec:
  host: reviews.default.svc.cluster.local
  subsets:
  - name: v1
    labels:
      version: v1
  - name: v2
    labels:
      version: v2
  - name: v3
    labels:
      version: v3
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata:
  name: reviews
  namespace: default
spec:
  hosts:
  - reviews
  http:
  - match:
    - headers:
        end-user:
          exact: jason
    route:
    - destination:
        host: reviews
        subset: v2
  - route:
    - destination:
        host: reviews
        subset: v1
      weight: 80
    - destination:
        host: reviews
        subset: v2
      weight: 20
---
apiVersion: networking.istio.io/v1
kind: Gateway
metadata:
  name: bookinfo-gateway
  namespace: istio-system
spec:
  selector:
    istio: ingressgateway
  servers:
  - port:
      number: 80
      name: http
      protocol: HTTP
    hosts:
    - "*"
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata:
  name: bookinfo
  namespace: default
spec:
  hosts:
  - "*"
  gateways:
  - istio-system/bookinfo-gateway
  http:
  - match:
    - uri:
        exact: /productpage
    - uri:
        prefix: /static
    - uri:
        exact: /login
    - uri:
        exact: /logout
    - uri:
        prefix: /api/v1/products
    route:
    - destination:
        host: productpage.default.svc.cluster.local
        port:
          number: 9080
---
apiVersion: security.istio.io/v1
kind: PeerAuthentication
metadata:
  name: reviews-v2-strict
  namespace: default
spec:
  selector:
    matchLabels:
      app: reviews
      version: v2
  mtls:
    mode: STRICT
---
apiVersion: networking.istio.io/v1
kind: Sidecar
metadata:
  name: default
  namespace: other
spec:
  egress:
  - hosts:
    - "./*"
    - "istio-system/*"
`

// nodeID is the Envoy node id Istio's agent gives pod p's proxy.
func (p pod) nodeID() string {
	kind := "router"
	if p.sidecar {
		kind = "sidecar"
	}
	return fmt.Sprintf("%s~%s~%s.%s~%s.svc.cluster.local", kind, p.ip, p.name, p.namespace, p.namespace)
}

// nodeJSON is the Envoy Node (as protojson reads it) that Istio's agent
// would send for pod p: the metadata keys pilot reads (README.md lists
// which of them decide the node's view).
func (p pod) nodeJSON() map[string]any {
	labels := map[string]any{}
	for k, v := range p.labels {
		labels[k] = v
	}
	var podPorts []string
	for _, cp := range p.containerPorts {
		podPorts = append(podPorts, fmt.Sprintf(`{"containerPort":%d,"protocol":"TCP"}`, cp))
	}
	meta := map[string]any{
		"CLUSTER_ID":            clusterID,
		"INSTANCE_IPS":          p.ip,
		"ISTIO_VERSION":         proxyIstioVersion,
		"LABELS":                labels,
		"MESH_ID":               "cluster.local",
		"NAME":                  p.name,
		"NAMESPACE":             p.namespace,
		"NODE_NAME":             p.node,
		"OWNER":                 fmt.Sprintf("kubernetes://apis/apps/v1/namespaces/%s/deployments/%s", p.namespace, p.workload),
		"POD_PORTS":             "[" + strings.Join(podPorts, ",") + "]",
		"SERVICE_ACCOUNT":       p.serviceAccount,
		"WORKLOAD_NAME":         p.workload,
		"ENVOY_PROMETHEUS_PORT": 15090,
		"ENVOY_STATUS_PORT":     15021,
		"PILOT_SAN":             []any{"istiod.istio-system.svc"},
	}
	if p.sidecar {
		meta["INTERCEPTION_MODE"] = "REDIRECT"
		meta["APP_CONTAINERS"] = p.labels["app"]
		meta["ANNOTATIONS"] = map[string]any{"sidecar.istio.io/status": sidecarStatus}
	} else {
		meta["UNPRIVILEGED_POD"] = "true"
	}
	cluster := p.labels["app"] + "." + p.namespace
	return map[string]any{
		"id":            p.nodeID(),
		"cluster":       cluster,
		"metadata":      meta,
		"locality":      map[string]any{"region": "us-east1", "zone": nodeZone(p.node)},
		"userAgentName": "envoy",
	}
}

// meshView is GET /mesh: the pods (with their node ids and the node Istio's
// agent would send) and services of the initial mesh.
func meshView() map[string]any {
	var ps []map[string]any
	for _, p := range pods {
		keys := make([]string, 0, len(p.labels))
		for k := range p.labels {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		ps = append(ps, map[string]any{
			"namespace": p.namespace, "name": p.name, "ip": p.ip, "service_account": p.serviceAccount,
			"labels": p.labels, "node_id": p.nodeID(), "node": p.nodeJSON(), "sidecar": p.sidecar,
		})
	}
	var ss []map[string]any
	for _, s := range services {
		var ports []map[string]any
		for _, sp := range s.ports {
			ports = append(ports, map[string]any{"name": sp.name, "port": sp.port, "target_port": sp.target})
		}
		ss = append(ss, map[string]any{
			"namespace": s.namespace, "name": s.name, "cluster_ip": s.clusterIP, "ports": ports,
			"hostname": fmt.Sprintf("%s.%s.svc.cluster.local", s.name, s.namespace),
		})
	}
	return map[string]any{"cluster_id": clusterID, "pods": ps, "services": ss}
}
