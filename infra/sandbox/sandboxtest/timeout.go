package sandboxtest

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// A test binary that reaches its -test.timeout panics at once: no test's
// cleanups or defers run, so the containers, pods, VMs, processes and
// mounts its tests started would outlive it. Main ends such a run itself,
// a little before the timeout: it prints all goroutine stacks, runs the
// cleanups that the tests still running registered with Cleanup, and
// exits with a failure, as the timeout would have.

// timeoutMargin is how long before the binary's timeout Main ends the
// run: a minute, or half the timeout when that is shorter. The cleanups
// get three quarters of it; the testing package's own timeout stays armed
// behind it, for a run whose cleanups do not end.
func timeoutMargin(timeout time.Duration) time.Duration {
	return min(time.Minute, timeout/2)
}

// pending holds the cleanups registered with Cleanup that have not run
// yet, in the order they were registered.
var pending struct {
	mu     sync.Mutex
	list   []*cleanup
	ending bool // Main is ending the run: no test's cleanup leaves the list
}

// cleanup is one function registered with Cleanup; it runs once, by the
// test's end or by Main at the timeout, whichever comes first (the other
// waits for it).
type cleanup struct {
	test string
	once sync.Once
	f    func()
}

func (c *cleanup) run() { c.once.Do(c.f) }

// Cleanup registers f as t.Cleanup does, and has Main run it if the test
// binary reaches its -test.timeout while t runs, before the binary ends.
// f is what removes something of t's that would outlive the binary: a
// sandbox, the backend's containers, pods or VMs, a server process, a
// mount. It runs once either way; at the timeout it runs beside t's own
// goroutine, which may still use what f removes.
func Cleanup(t testing.TB, f func()) {
	c := &cleanup{test: t.Name(), f: f}
	pending.mu.Lock()
	pending.list = append(pending.list, c)
	pending.mu.Unlock()
	t.Cleanup(func() {
		c.run()
		pending.mu.Lock()
		defer pending.mu.Unlock()
		if !pending.ending {
			pending.list = slices.DeleteFunc(pending.list, func(p *cleanup) bool { return p == c })
		}
	})
}

// endBeforeTimeout arms the end of the run timeoutMargin before the
// binary's -test.timeout, if it has one. The returned function disarms
// it; once the end has begun, it waits for the end's exit instead.
func endBeforeTimeout() (disarm func()) {
	if !flag.Parsed() {
		flag.Parse()
	}
	f := flag.Lookup("test.timeout")
	if f == nil {
		return func() {}
	}
	timeout, ok := f.Value.(flag.Getter).Get().(time.Duration)
	if !ok || timeout <= 0 {
		return func() {}
	}
	margin := timeoutMargin(timeout)
	fired := make(chan struct{})
	timer := time.AfterFunc(timeout-margin, func() {
		close(fired)
		endRun(timeout, margin)
	})
	return func() {
		if !timer.Stop() {
			<-fired
			select {} // endRun exits the process
		}
	}
}

// endRun ends a run that reached timeout less margin: the goroutines'
// stacks first (what hung), then the pending cleanups, newest first within
// each test and the tests side by side, for at most three quarters of
// margin; then it exits with status 2, as the timeout's panic would.
func endRun(timeout, margin time.Duration) {
	pending.mu.Lock()
	pending.ending = true
	list := slices.Clone(pending.list)
	pending.mu.Unlock()

	var byTest []string
	groups := map[string][]*cleanup{}
	for _, c := range list {
		if groups[c.test] == nil {
			byTest = append(byTest, c.test)
		}
		groups[c.test] = append(groups[c.test], c)
	}
	fmt.Fprintf(os.Stderr, "test timed out: the run reached %v of -test.timeout=%v; it ends now, after the cleanups of the running tests (sandboxtest.Cleanup)\n",
		timeout-margin, timeout)
	if len(byTest) > 0 {
		fmt.Fprintf(os.Stderr, "running tests with cleanups to run:\n\t%s\n", strings.Join(byTest, "\n\t"))
	}
	os.Stderr.Write(allStacks())

	done := make(chan string, len(byTest))
	for _, name := range byTest {
		go func() {
			// A cleanup that fails its test with t.FailNow ends this
			// goroutine; one that panics is reported. Either way the
			// test's other cleanups are given up.
			defer func() {
				if r := recover(); r != nil {
					fmt.Fprintf(os.Stderr, "cleanup of %s panicked: %v\n", name, r)
				}
				done <- name
			}()
			g := groups[name]
			for i := len(g) - 1; i >= 0; i-- {
				g[i].run()
			}
		}()
	}
	left := map[string]bool{}
	for _, name := range byTest {
		left[name] = true
	}
	deadline := time.After(margin * 3 / 4)
	for len(left) > 0 {
		select {
		case name := <-done:
			delete(left, name)
		case <-deadline:
			names := make([]string, 0, len(left))
			for name := range left {
				names = append(names, name)
			}
			slices.Sort(names)
			fmt.Fprintf(os.Stderr, "cleanups still running when the run ended: %s\n", strings.Join(names, ", "))
			os.Exit(2)
		}
	}
	fmt.Fprintf(os.Stderr, "FAIL: test timed out; the cleanups of the running tests have run\n")
	os.Exit(2)
}

// allStacks returns the stacks of all goroutines.
func allStacks() []byte {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return buf[:n]
		}
		buf = make([]byte, 2*len(buf))
	}
}
