package main

import (
	"fmt"
	"log"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"istio.io/istio/pkg/test"
)

// failer is the testing.TB that Istio's fake discovery server asks for
// (istio.io/istio/pkg/test.Failer), for a long-running program rather than
// a test: Cleanup functions run when the peer exits (last registered first,
// as testing does), Log goes to stderr, and a Fatal is fatal: the peer
// logs it, runs the cleanups and exits 1 (a test peer in a broken state
// should die loudly, not serve half a mesh). During shutdown a Fatal only
// ends the goroutine that called it, as testing's FailNow does.
type failer struct {
	mu       sync.Mutex
	cleanups []func()
	closing  atomic.Bool
	failed   atomic.Bool
}

var _ test.Failer = (*failer)(nil)

func newFailer() *failer { return &failer{} }

func (f *failer) Helper() {}

func (f *failer) Log(args ...any) { log.Print(append([]any{"[istio test log] "}, args...)...) }

func (f *failer) Logf(format string, args ...any) { log.Printf("[istio test log] "+format, args...) }

func (f *failer) Fail() {
	f.failed.Store(true)
	log.Printf("[istio test log] Fail() called")
}

func (f *failer) FailNow() {
	f.failed.Store(true)
	f.die("FailNow() called")
}

func (f *failer) Fatal(args ...any) { f.die(fmt.Sprint(args...)) }

func (f *failer) Fatalf(format string, args ...any) { f.die(fmt.Sprintf(format, args...)) }

// Skip: nothing a program can skip to; the caller gave up.
func (f *failer) Skip(args ...any) { f.die("Skip: " + fmt.Sprint(args...)) }

func (f *failer) TempDir() string {
	dir, err := os.MkdirTemp("", "istio-peer-")
	if err != nil {
		f.Fatalf("TempDir: %v", err)
	}
	f.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

func (f *failer) Cleanup(fn func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cleanups = append(f.cleanups, fn)
}

func (f *failer) die(msg string) {
	if f.closing.Load() {
		log.Printf("[istio test log] fatal during shutdown (ignored): %s", msg)
		runtime.Goexit()
	}
	log.Printf("FATAL (from Istio's test helpers): %s", msg)
	f.shutdown()
	os.Exit(1)
}

// shutdown runs the cleanups once, last registered first, each bounded (a
// stuck cleanup must not keep a dying peer alive).
func (f *failer) shutdown() {
	if f.closing.Swap(true) {
		return
	}
	f.mu.Lock()
	fns := f.cleanups
	f.cleanups = nil
	f.mu.Unlock()
	for i := len(fns) - 1; i >= 0; i-- {
		done := make(chan struct{})
		go func(fn func()) {
			defer close(done)
			defer func() {
				if r := recover(); r != nil {
					log.Printf("cleanup panicked: %v", r)
				}
			}()
			fn()
		}(fns[i])
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			log.Printf("a cleanup did not return within 5s; going on")
		}
	}
}
