package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"istio.io/istio/pilot/pkg/config/kube/crd"
	"istio.io/istio/pilot/test/xds"
	"istio.io/istio/pkg/config"
	"istio.io/istio/pkg/config/schema/collections"
	"istio.io/istio/pkg/config/schema/resource"
	kubelib "istio.io/istio/pkg/kube"
)

// pushWait bounds how long a control call waits for Istio to take the
// change into its push context.
const pushWait = 5 * time.Second

type peer struct {
	fake     *xds.FakeDiscoveryServer
	grpcAddr string
	rec      *recorder

	mu      sync.Mutex // serialises changes to the mesh
	removed map[string]removedPod

	connMu sync.Mutex
	conn   *grpc.ClientConn // the peer's own client connection (POST /xds)
}

// removedPod is what POST /pods/remove took out, for POST /pods/add.
type removedPod struct {
	pod *corev1.Pod
}

func newPeer(fake *xds.FakeDiscoveryServer, grpcAddr string, rec *recorder) *peer {
	return &peer{fake: fake, grpcAddr: grpcAddr, rec: rec, removed: map[string]removedPod{}}
}

func (p *peer) close() {
	p.connMu.Lock()
	defer p.connMu.Unlock()
	if p.conn != nil {
		_ = p.conn.Close()
		p.conn = nil
	}
}

func (p *peer) controlAPI() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, 200, map[string]any{
			"ok": true, "ready": p.fake.Discovery.IsServerReady(), "grpc": p.grpcAddr,
			"connections": len(p.fake.Discovery.AllClients()),
		})
	})
	mux.HandleFunc("GET /mesh", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, 200, meshView()) })
	mux.HandleFunc("GET /config", p.listConfig)
	mux.HandleFunc("POST /config", p.postConfig)
	mux.HandleFunc("DELETE /config", p.deleteConfig)
	mux.HandleFunc("POST /pods/remove", p.removePod)
	mux.HandleFunc("POST /pods/add", p.addPod)
	mux.HandleFunc("GET /stats", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, 200, p.rec.view(p.fake.Discovery))
	})
	mux.HandleFunc("DELETE /stats", func(w http.ResponseWriter, _ *http.Request) {
		p.rec.reset()
		writeJSON(w, 200, map[string]any{"ok": true})
	})
	mux.HandleFunc("POST /xds", p.directXDS)
	mux.HandleFunc("GET /descriptors", serveDescriptors)
	return mux
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}

func writeError(w http.ResponseWriter, code int, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	log.Printf("control API: %d %s", code, msg)
	writeJSON(w, code, map[string]any{"error": msg})
}

// change runs fn (a change to the mesh) and waits until Istio has taken
// every update it caused into its push context (InboundUpdates grew and
// CommittedUpdates caught up), as Istio's own tests do (EnsureSynced).
// Pushes to the connections follow from Istio's push queue.
func (p *peer) change(fn func() error) (map[string]any, error) {
	ds := p.fake.Discovery
	before := ds.InboundUpdates.Load()
	if err := fn(); err != nil {
		return nil, err
	}
	deadline := time.Now().Add(pushWait)
	for time.Now().Before(deadline) {
		in := ds.InboundUpdates.Load()
		if in > before && ds.CommittedUpdates.Load() >= in {
			// Let a burst of handlers that fire one after the other land too.
			time.Sleep(20 * time.Millisecond)
			if ds.InboundUpdates.Load() == in {
				return map[string]any{"push_triggered": true, "inbound_updates": in, "committed_updates": ds.CommittedUpdates.Load()}, nil
			}
			continue
		}
		time.Sleep(5 * time.Millisecond)
	}
	return map[string]any{
		"push_triggered":    ds.InboundUpdates.Load() > before,
		"inbound_updates":   ds.InboundUpdates.Load(),
		"committed_updates": ds.CommittedUpdates.Load(),
	}, nil
}

// ---------------------------------------------------------------------------
// Istio config: the config store istiod's config controller writes to; its
// event handlers (registered by the fake server as istiod's server.go does)
// turn each change into the push istiod would make.

func (p *peer) listConfig(w http.ResponseWriter, _ *http.Request) {
	store := p.fake.Store()
	out := []map[string]any{}
	for _, s := range collections.PilotGatewayAPI().All() {
		for _, c := range store.List(s.GroupVersionKind(), "") {
			out = append(out, map[string]any{
				"kind": s.Kind(), "group": s.Group(), "namespace": c.Namespace, "name": c.Name,
				"resource_version": c.ResourceVersion,
			})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		return fmt.Sprint(a["kind"], a["namespace"], a["name"]) < fmt.Sprint(b["kind"], b["namespace"], b["name"])
	})
	writeJSON(w, 200, map[string]any{"configs": out})
}

func (p *peer) postConfig(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 16<<20))
	if err != nil {
		writeError(w, 400, "body: %v", err)
		return
	}
	// Istio's own parser of kubectl-style YAML or JSON, with its validation.
	configs, others, err := crd.ParseInputs(string(body))
	if err != nil {
		writeError(w, 400, "%v", err)
		return
	}
	if len(others) > 0 {
		writeError(w, 400, "not an Istio config kind: %s %s", others[0].APIVersion, others[0].Kind)
		return
	}
	if len(configs) == 0 {
		writeError(w, 400, "no config object in the body")
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	store := p.fake.Store()
	var applied []map[string]any
	push, err := p.change(func() error {
		for _, c := range configs {
			if c.Namespace == "" {
				c.Namespace = "default"
			}
			c.ResourceVersion = ""
			event := "created"
			if old := store.Get(c.GroupVersionKind, c.Name, c.Namespace); old != nil {
				event = "updated"
				if c.CreationTimestamp.IsZero() {
					c.CreationTimestamp = old.CreationTimestamp
				}
				if _, err := store.Update(c); err != nil {
					return fmt.Errorf("update %s %s/%s: %v", c.GroupVersionKind.Kind, c.Namespace, c.Name, err)
				}
			} else {
				if c.CreationTimestamp.IsZero() {
					c.CreationTimestamp = time.Now()
				}
				if _, err := store.Create(c); err != nil {
					return fmt.Errorf("create %s %s/%s: %v", c.GroupVersionKind.Kind, c.Namespace, c.Name, err)
				}
			}
			applied = append(applied, map[string]any{
				"kind": c.GroupVersionKind.Kind, "group": c.GroupVersionKind.Group,
				"namespace": c.Namespace, "name": c.Name, "event": event,
			})
		}
		return nil
	})
	if err != nil {
		writeError(w, 400, "%v", err)
		return
	}
	log.Printf("control API: config %v", applied)
	writeJSON(w, 200, map[string]any{"applied": applied, "push": push})
}

// schemaFor finds the config kind a DELETE names: ?kind= (e.g. ServiceEntry)
// and, where a kind is in several groups (Gateway), ?group= (default: an
// Istio group).
func schemaFor(kindName, group string) (config.GroupVersionKind, error) {
	var matches []resource.Schema
	for _, s := range collections.PilotGatewayAPI().All() {
		if strings.EqualFold(s.Kind(), kindName) && (group == "" || s.Group() == group) {
			matches = append(matches, s)
		}
	}
	if len(matches) > 1 && group == "" {
		for _, s := range matches {
			if strings.HasSuffix(s.Group(), "istio.io") {
				matches = []resource.Schema{s}
				break
			}
		}
	}
	if len(matches) == 0 {
		return config.GroupVersionKind{}, fmt.Errorf("unknown config kind %q (group %q)", kindName, group)
	}
	return matches[0].GroupVersionKind(), nil
}

func (p *peer) deleteConfig(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	name, ns := q.Get("name"), q.Get("namespace")
	if ns == "" {
		ns = "default"
	}
	if q.Get("kind") == "" || name == "" {
		writeError(w, 400, "DELETE /config needs ?kind=KIND&name=NAME[&namespace=NS][&group=GROUP]")
		return
	}
	gvk, err := schemaFor(q.Get("kind"), q.Get("group"))
	if err != nil {
		writeError(w, 400, "%v", err)
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	store := p.fake.Store()
	if store.Get(gvk, name, ns) == nil {
		writeError(w, 404, "no %s %s/%s", gvk.Kind, ns, name)
		return
	}
	push, err := p.change(func() error { return store.Delete(gvk, name, ns, nil) })
	if err != nil {
		writeError(w, 500, "delete: %v", err)
		return
	}
	log.Printf("control API: deleted %s %s/%s", gvk.Kind, ns, name)
	writeJSON(w, 200, map[string]any{
		"deleted": map[string]any{"kind": gvk.Kind, "group": gvk.Group, "namespace": ns, "name": name},
		"push":    push,
	})
}

// ---------------------------------------------------------------------------
// Pods: through the fake Kubernetes client, as Kubernetes would change them,
// so that Istio's own informers and endpoint handlers see the change (an
// incremental EDS push of the changed services only, as istiod makes).

func (p *peer) removePod(w http.ResponseWriter, r *http.Request) {
	ns, name := r.URL.Query().Get("namespace"), r.URL.Query().Get("name")
	if ns == "" {
		ns = "default"
	}
	if name == "" {
		writeError(w, 400, "POST /pods/remove needs ?name=POD[&namespace=NS]")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	kube := p.fake.KubeClient().Kube()
	p.mu.Lock()
	defer p.mu.Unlock()
	pod, err := kube.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		writeError(w, 404, "no pod %s/%s", ns, name)
		return
	}
	if err != nil {
		writeError(w, 500, "get pod: %v", err)
		return
	}
	var slicesChanged []string
	push, err := p.change(func() error {
		// As Kubernetes does: the endpoint slice controller drops the
		// pod's endpoint, and the pod goes.
		slices, err := kube.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		for i := range slices.Items {
			s := &slices.Items[i]
			kept := s.Endpoints[:0:0]
			for _, ep := range s.Endpoints {
				if endpointIsPod(ep, pod) {
					continue
				}
				kept = append(kept, ep)
			}
			if len(kept) == len(s.Endpoints) {
				continue
			}
			s.Endpoints = kept
			if _, err := kube.DiscoveryV1().EndpointSlices(ns).Update(ctx, s, metav1.UpdateOptions{}); err != nil {
				return fmt.Errorf("update EndpointSlice %s: %v", s.Name, err)
			}
			slicesChanged = append(slicesChanged, s.Name)
		}
		return kube.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{})
	})
	if err != nil {
		writeError(w, 500, "%v", err)
		return
	}
	p.removed[ns+"/"+name] = removedPod{pod: pod}
	log.Printf("control API: removed pod %s/%s (EndpointSlices %v)", ns, name, slicesChanged)
	writeJSON(w, 200, map[string]any{
		"removed":         map[string]any{"namespace": ns, "name": name, "ip": pod.Status.PodIP},
		"endpoint_slices": nonNil(slicesChanged), "services": servicesOf(pod), "push": push,
	})
}

func endpointIsPod(ep discoveryv1.Endpoint, pod *corev1.Pod) bool {
	if ref := ep.TargetRef; ref != nil && ref.Kind == "Pod" && ref.Name == pod.Name && ref.Namespace == pod.Namespace {
		return true
	}
	for _, a := range ep.Addresses {
		if a == pod.Status.PodIP {
			return true
		}
	}
	return false
}

func servicesOf(pod *corev1.Pod) []string {
	out := []string{}
	for _, s := range services {
		if s.selects(pod.Namespace, pod.Labels) {
			out = append(out, fmt.Sprintf("%s.%s.svc.cluster.local", s.name, s.namespace))
		}
	}
	return out
}

// addPod: POST /pods/add?namespace=NS&name=NAME puts back a pod that
// POST /pods/remove took out; POST /pods/add with a Pod (YAML or JSON) as the
// body adds that pod (it needs status.podIP). Either way the pod is created
// first, then its endpoint goes into the EndpointSlice of every service of
// the mesh that selects it, as Kubernetes does.
func (p *peer) addPod(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 4<<20))
	if err != nil {
		writeError(w, 400, "body: %v", err)
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	var pod *corev1.Pod
	if len(strings.TrimSpace(string(body))) > 0 {
		obj, _, err := kubelib.IstioCodec.UniversalDeserializer().Decode(body, nil, nil)
		if err != nil {
			writeError(w, 400, "pod: %v", err)
			return
		}
		var ok bool
		if pod, ok = obj.(*corev1.Pod); !ok {
			writeError(w, 400, "the body is a %T, not a Pod", obj)
			return
		}
		if pod.Namespace == "" {
			pod.Namespace = "default"
		}
		if pod.Status.PodIP == "" {
			writeError(w, 400, "the pod needs status.podIP")
			return
		}
		if len(pod.Status.PodIPs) == 0 {
			pod.Status.PodIPs = []corev1.PodIP{{IP: pod.Status.PodIP}}
		}
		if pod.Status.Phase == "" {
			pod.Status.Phase = corev1.PodRunning
			pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
		}
	} else {
		ns, name := r.URL.Query().Get("namespace"), r.URL.Query().Get("name")
		if ns == "" {
			ns = "default"
		}
		rp, ok := p.removed[ns+"/"+name]
		if !ok {
			writeError(w, 404, "no removed pod %s/%s to put back (or send a Pod as the body)", ns, name)
			return
		}
		pod = rp.pod.DeepCopy()
	}
	pod.ResourceVersion = ""
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	kube := p.fake.KubeClient().Kube()
	var slicesChanged []string
	push, err := p.change(func() error {
		if _, err := kube.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create pod: %v", err)
		}
		for _, s := range services {
			if !s.selects(pod.Namespace, pod.Labels) {
				continue
			}
			slices, err := kube.DiscoveryV1().EndpointSlices(s.namespace).List(ctx, metav1.ListOptions{
				LabelSelector: discoveryv1.LabelServiceName + "=" + s.name,
			})
			if err != nil {
				return err
			}
			if len(slices.Items) == 0 {
				slice := s.sliceFor([]*corev1.Pod{pod})
				if _, err := kube.DiscoveryV1().EndpointSlices(s.namespace).Create(ctx, slice, metav1.CreateOptions{}); err != nil {
					return fmt.Errorf("create EndpointSlice: %v", err)
				}
				slicesChanged = append(slicesChanged, slice.Name)
				continue
			}
			slice := &slices.Items[0]
			present := false
			for _, ep := range slice.Endpoints {
				present = present || endpointIsPod(ep, pod)
			}
			if present {
				continue
			}
			slice.Endpoints = append(slice.Endpoints, sliceEndpoint(pod))
			if _, err := kube.DiscoveryV1().EndpointSlices(s.namespace).Update(ctx, slice, metav1.UpdateOptions{}); err != nil {
				return fmt.Errorf("update EndpointSlice %s: %v", slice.Name, err)
			}
			slicesChanged = append(slicesChanged, slice.Name)
		}
		return nil
	})
	if err != nil {
		writeError(w, 409, "%v", err)
		return
	}
	delete(p.removed, pod.Namespace+"/"+pod.Name)
	log.Printf("control API: added pod %s/%s (EndpointSlices %v)", pod.Namespace, pod.Name, slicesChanged)
	writeJSON(w, 200, map[string]any{
		"added":           map[string]any{"namespace": pod.Namespace, "name": pod.Name, "ip": pod.Status.PodIP},
		"endpoint_slices": nonNil(slicesChanged), "services": servicesOf(pod), "push": push,
	})
}
