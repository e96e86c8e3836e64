package main

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"google.golang.org/protobuf/types/known/anypb"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	gcplog "github.com/envoyproxy/go-control-plane/pkg/log"
	"github.com/prometheus/prometheus/discovery/xds"
)

// typeURL is the one resource type this server serves.
const typeURL = xds.KumaMadsV1ResourceTypeURL

// assignmentCache is the go-control-plane cache.Cache behind the server.
//
// go-control-plane's SnapshotCache cannot hold this type: cachev3.NewSnapshot
// rejects any type URL outside Envoy's fixed list ("unknown resource type").
// Its LinearCache takes any type URL, but in SotW it sends only the changed
// resources of a type that is not CDS/LDS (it cannot express a removal, and a
// change to an empty set is never sent), and it does not implement Fetch.
// Kuma's own MADS server keeps a full-state snapshot per client (a fork of
// SnapshotCache, kuma pkg/mads/v1/cache), so this cache does what
// SnapshotCache does for one type:
//
//   - SotW (ADS, StreamMonitoringAssignments): every response carries the
//     whole set (filtered by resource_names unless the request is wildcard)
//     at the version given in PUT /assignments. A request whose version_info
//     differs from the current version is answered at once; one that equals
//     it (an ACK, a NACK, a reconnect at the same version) is held until a
//     PUT with a different version. A PUT answers every held watch whose
//     request version differs from the new version, as SnapshotCache's
//     SetSnapshot does. Before the first PUT nothing is answered.
//   - Fetch (FetchMonitoringAssignments): as SnapshotCache.Fetch: the set, or
//     types.SkipFetchError when version_info equals the current version, or
//     an error before the first PUT.
//   - Delta (ADS, DeltaMonitoringAssignments): go-control-plane's LinearCache
//     untouched, fed the same resources on every PUT. Its system_version_info
//     is LinearCache's own counter (one step per PUT), its resource versions
//     are hashes of the serialized resources, and it answers a first wildcard
//     request even before any PUT (with no resources).
//
// Requests for any other type URL (on ADS) get a watch that is never answered.
type assignmentCache struct {
	log    gcplog.Logger
	linear *cachev3.LinearCache
	setMu  sync.Mutex // serializes Set: the SotW state and the LinearCache change together

	mu      sync.Mutex
	set     bool
	version string
	names   []string                  // resource names, in PUT order
	res     map[string]types.Resource // name -> *xds.MonitoringAssignment
	watches map[uint64]*sotwWatch
	nextID  uint64
}

type sotwWatch struct {
	req *cachev3.Request
	sub cachev3.Subscription
	ch  chan cachev3.Response
}

var _ cachev3.Cache = (*assignmentCache)(nil)

func newAssignmentCache(logger gcplog.Logger) *assignmentCache {
	return &assignmentCache{
		log:     logger,
		linear:  cachev3.NewLinearCache(typeURL, cachev3.WithLogger(logger)),
		res:     map[string]types.Resource{},
		watches: map[uint64]*sotwWatch{},
	}
}

// Set replaces the whole set of assignments (for every node) and answers the
// held SotW watches whose request version differs from version.
func (c *assignmentCache) Set(version string, names []string, res map[string]types.Resource) int {
	c.setMu.Lock()
	defer c.setMu.Unlock()
	c.mu.Lock()
	c.set = true
	c.version = version
	c.names = names
	c.res = res
	answered := 0
	for id, w := range c.watches {
		if w.req.GetVersionInfo() == version {
			continue
		}
		delete(c.watches, id)
		// Each watch has a buffered channel and is answered once.
		w.ch <- c.responseLocked(w.req, subscribed(w.sub))
		answered++
	}
	c.mu.Unlock()
	c.linear.SetResources(res)
	return answered
}

// Current returns the version and assignments last set.
func (c *assignmentCache) Current() (set bool, version string, names []string, res map[string]types.Resource) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.set, c.version, c.names, c.res
}

func (c *assignmentCache) HeldWatches() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.watches)
}

// subscribed is the set of names a SotW subscription asks for; nil: all.
func subscribed(sub cachev3.Subscription) map[string]struct{} {
	if sub == nil || sub.IsWildcard() {
		return nil
	}
	return sub.SubscribedResources()
}

// responseLocked builds a full-state response for req, limited to only (nil:
// every resource). c.mu must be held.
func (c *assignmentCache) responseLocked(req *cachev3.Request, only map[string]struct{}) cachev3.Response {
	out := &discovery.DiscoveryResponse{
		VersionInfo: c.version,
		TypeUrl:     typeURL,
		Resources:   []*anypb.Any{},
	}
	returned := map[string]string{}
	for _, name := range c.names {
		if only != nil {
			if _, ok := only[name]; !ok {
				continue
			}
		}
		a, err := anypb.New(c.res[name])
		if err != nil {
			c.log.Errorf("marshal %s: %v", name, err)
			continue
		}
		out.Resources = append(out.Resources, a)
		returned[name] = c.version
	}
	// A new DiscoveryResponse per response: the server writes the nonce into it.
	return &cachev3.PassthroughResponse{Request: req, DiscoveryResponse: out, ReturnedResources: returned}
}

func (c *assignmentCache) CreateWatch(req *cachev3.Request, sub cachev3.Subscription, ch chan cachev3.Response) (func(), error) {
	if req.GetTypeUrl() != typeURL {
		c.log.Warnf("[mads] watch for unsupported type %q: never answered", req.GetTypeUrl())
		return func() {}, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.set && req.GetVersionInfo() != c.version {
		ch <- c.responseLocked(req, subscribed(sub))
		return func() {}, nil
	}
	c.nextID++
	id := c.nextID
	c.watches[id] = &sotwWatch{req: req, sub: sub, ch: ch}
	return func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		delete(c.watches, id)
	}, nil
}

func (c *assignmentCache) CreateDeltaWatch(req *cachev3.DeltaRequest, sub cachev3.Subscription, ch chan cachev3.DeltaResponse) (func(), error) {
	if req.GetTypeUrl() != typeURL {
		c.log.Warnf("[mads] delta watch for unsupported type %q: never answered", req.GetTypeUrl())
		return func() {}, nil
	}
	return c.linear.CreateDeltaWatch(req, sub, ch)
}

func (c *assignmentCache) Fetch(_ context.Context, req *cachev3.Request) (cachev3.Response, error) {
	if req.GetTypeUrl() != typeURL {
		return nil, fmt.Errorf("unsupported type %q", req.GetTypeUrl())
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.set {
		return nil, errors.New("no assignments set yet (PUT /assignments)")
	}
	if req.GetVersionInfo() == c.version {
		return nil, &types.SkipFetchError{}
	}
	// As SnapshotCache.Fetch: resource_names, when given, select resources.
	var only map[string]struct{}
	if len(req.GetResourceNames()) > 0 {
		only = map[string]struct{}{}
		for _, n := range req.GetResourceNames() {
			only[n] = struct{}{}
		}
	}
	return c.responseLocked(req, only), nil
}
