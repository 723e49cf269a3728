package main

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
)

// profileAddrEnv names the loopback address serve offers Go's profiles on
// (net/http/pprof) when set: a developer's tool for `make bench` runs
// (docs/benchmarks.md), never set in production.
const profileAddrEnv = "THREADBOX_PPROF_ADDR"

// startProfiling serves /debug/pprof/ on addr when addr is a loopback
// address, in the background for the life of the process.
func startProfiling(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%s: %w", profileAddrEnv, err)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return fmt.Errorf("%s: %q is not a loopback address", profileAddrEnv, addr)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("%s: %w", profileAddrEnv, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	go func() {
		if err := http.Serve(ln, mux); err != nil && !errors.Is(err, net.ErrClosed) {
			fmt.Fprintln(os.Stderr, "threadbox: profiles:", err)
		}
	}()
	return nil
}
