package main

// The floor of the Messages API's added latency: a bare pass-through proxy
// built from the same parts as threadbox's hot path (a Fiber server and a
// keep-alive net/http client), run as its own process with the same
// scheduler size, in front of the same fake upstream. Whatever it adds is
// the cost of one more HTTP hop on this machine, before any of threadbox's
// own work; threadbox's added latency is read against it.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gofiber/fiber/v2"
)

// floorProxyEnv names the upstream when the bench binary runs as the proxy.
const floorProxyEnv = "THREADBOX_BENCH_FLOOR_UPSTREAM"

// floorProc is a running floor proxy.
type floorProc struct {
	base string
	cmd  *exec.Cmd
}

// startFloorProxy starts this binary as the floor proxy in front of
// upstream, with GOMAXPROCS set to procs.
func startFloorProxy(ctx context.Context, upstream string, procs int) (*floorProc, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, self, "-floor-proxy", addr)
	cmd.Env = append(os.Environ(), floorProxyEnv+"="+upstream, "GOMAXPROCS="+strconv.Itoa(procs))
	cmd.Stdout, cmd.Stderr = io.Discard, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // gone with the bench
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &floorProc{base: "http://" + addr, cmd: cmd}
	for deadline := time.Now().Add(10 * time.Second); ; {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return p, nil
		}
		if time.Now().After(deadline) {
			p.stop()
			return nil, fmt.Errorf("floor proxy did not start on %s", addr)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (p *floorProc) stop() {
	_ = p.cmd.Process.Kill()
	_ = p.cmd.Wait()
}

// serveFloorProxy forwards every POST to the upstream named by
// floorProxyEnv: the request body as it came, the response passed back
// whole, or chunk by chunk, each flushed, when it is an event stream.
func serveFloorProxy(addr string) error {
	upstream := os.Getenv(floorProxyEnv)
	if upstream == "" {
		return errors.New("floor proxy: " + floorProxyEnv + " is not set")
	}
	hc := &http.Client{Transport: &http.Transport{MaxIdleConns: 64, MaxIdleConnsPerHost: 64, IdleConnTimeout: time.Minute}}
	app := fiber.New(fiber.Config{DisableStartupMessage: true})
	app.Post("/*", func(c *fiber.Ctx) error {
		req, err := http.NewRequestWithContext(c.UserContext(), "POST", upstream+c.OriginalURL(), strings.NewReader(string(c.Body())))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := hc.Do(req)
		if err != nil {
			return err
		}
		c.Status(resp.StatusCode)
		ct := resp.Header.Get("Content-Type")
		c.Set("Content-Type", ct)
		if !strings.HasPrefix(ct, "text/event-stream") {
			defer resp.Body.Close()
			b, err := io.ReadAll(resp.Body)
			if err != nil {
				return err
			}
			return c.Send(b)
		}
		c.Context().SetBodyStreamWriter(func(w *bufio.Writer) {
			defer resp.Body.Close()
			buf := make([]byte, 4096)
			for {
				n, err := resp.Body.Read(buf)
				if n > 0 {
					if _, werr := w.Write(buf[:n]); werr != nil || w.Flush() != nil {
						return
					}
				}
				if err != nil {
					return
				}
			}
		})
		return nil
	})
	return app.Listen(addr)
}
