package main

// The Files API section: upload and download MB/s of a large file
// through a running threadbox server vs plain loopback baselines, and the
// server's peak memory growth per transfer (VmHWM after clear_refs, minus
// VmRSS before: resident memory, not page cache).

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"threadbox/infra/sandbox/docker"
)

// filesOpts configure the Files API section.
type filesOpts struct {
	threadboxBin string // the server binary; built when missing
	size         int64  // bytes per transfer
	runs         int    // transfers per row; the median is reported
}

// filesRow is one measured row.
type filesRow struct {
	name, baselineName string
	mbps, baseMBps     float64
	memGrowth          int64 // bytes; -1 when not measured
	target             string
}

// benchFiles starts threadbox on loopback with a fresh data folder and
// SQLite, and prints the Files API table.
func benchFiles(ctx context.Context, o filesOpts, out io.Writer) error {
	work, err := os.MkdirTemp("", "threadbox-bench-files-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	bin := o.threadboxBin
	if _, err := os.Stat(bin); err != nil {
		bin = filepath.Join(work, "threadbox")
		fmt.Fprintln(os.Stderr, "bench: building threadbox")
		if b, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/threadbox").CombinedOutput(); err != nil {
			return fmt.Errorf("build threadbox: %w: %s", err, b)
		}
	}
	srv, err := startThreadbox(ctx, bin, work)
	if err != nil {
		return err
	}
	defer srv.stop()
	if r, err := srv.call("PATCH", "/api/v1/app/org/features", strings.NewReader(`{"uploads":{"maxBytes":`+strconv.FormatInt(4*o.size, 10)+`}}`), "application/json", -1); err != nil || r != http.StatusOK {
		return fmt.Errorf("raise the upload cap: %d %v", r, err)
	}

	src := filepath.Join(work, "src.bin")
	if err := writeSource(src, o.size); err != nil {
		return err
	}
	const scope = "bench"
	key := "outputs/big.bin"
	hostFile := filepath.Join(work, "data", "containers") // completed below, after the first upload
	var rows []filesRow

	// Uploads: PUT with a known length, then a multipart POST; each durable
	// (the server fsyncs the file and its folder before answering).
	put := func() (int, error) {
		f, err := os.Open(src)
		if err != nil {
			return 0, err
		}
		defer f.Close()
		return srv.call("PUT", "/api/gpt/v1/files/"+key+"?scope_id="+scope, f, "application/octet-stream", o.size)
	}
	post := func() (int, error) {
		pr, pw := io.Pipe()
		mw := multipart.NewWriter(pw)
		go func() {
			f, err := os.Open(src)
			if err == nil {
				defer f.Close()
				var fw io.Writer
				if fw, err = mw.CreateFormFile("file", "big.bin"); err == nil {
					if _, err = io.Copy(fw, f); err == nil {
						err = mw.Close()
					}
				}
			}
			pw.CloseWithError(err)
		}()
		return srv.call("POST", "/api/gpt/v1/files?scope_id="+scope+"&path="+key, pr, mw.FormDataContentType(), -1)
	}
	// The first PUT creates the container; its folder is the host file's.
	if st, err := put(); err != nil || st != http.StatusOK {
		return fmt.Errorf("first upload: %d %v", st, err)
	}
	matches, _ := filepath.Glob(filepath.Join(hostFile, "*", "outputs", "big.bin"))
	if len(matches) != 1 {
		return fmt.Errorf("uploaded file not found under %s", hostFile)
	}
	hostFile = matches[0]

	baseUp, err := uploadBaseline(src, filepath.Join(work, "baseline-upload.bin"), o)
	if err != nil {
		return err
	}
	for _, u := range []struct {
		name string
		fn   func() (int, error)
	}{{"upload PUT (durable)", put}, {"upload multipart POST (durable)", post}} {
		mbps, mem, err := srv.measure(o, u.fn)
		if err != nil {
			return fmt.Errorf("%s: %w", u.name, err)
		}
		rows = append(rows, filesRow{u.name, "net/http io.Copy + fsync", mbps, baseUp, mem, ">= 300 MB/s, <= 8 MiB"})
	}

	// Downloads of the stored file, vs http.ServeFile of the same host file.
	id := base64.RawURLEncoding.EncodeToString([]byte("/mnt/user-data/" + key))
	get := func() (int, error) {
		return srv.download("/api/gpt/v1/files/" + id + "/content?scope_id=" + scope)
	}
	baseDown, err := downloadBaseline(hostFile, o)
	if err != nil {
		return err
	}
	mbps, mem, err := srv.measure(o, get)
	if err != nil {
		return fmt.Errorf("download: %w", err)
	}
	rows = append(rows, filesRow{"download GET content", "http.ServeFile", mbps, baseDown, mem, ">= 80% of baseline, <= 8 MiB"})

	fmt.Fprintf(out, "\n### Files API: %d MiB transfers over loopback (median of %d), %s\n\n", o.size>>20, o.runs, time.Now().UTC().Format(time.RFC3339))
	fmt.Fprintln(out, "| measurement | MB/s | baseline | baseline MB/s | ratio | server peak memory growth | target |")
	fmt.Fprintln(out, "|---|---:|---|---:|---:|---:|---|")
	for _, r := range rows {
		fmt.Fprintf(out, "| %s | %.0f | %s | %.0f | %.0f%% | %s | %s |\n", r.name, r.mbps, r.baselineName, r.baseMBps, 100*r.mbps/r.baseMBps, mib(r.memGrowth), r.target)
	}
	return nil
}

func mib(b int64) string {
	if b < 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20))
}

// writeSource writes size bytes of incompressible data.
func writeSource(path string, size int64) error {
	block := make([]byte, 1<<20)
	if _, err := rand.Read(block); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	for n := int64(0); n < size; n += int64(len(block)) {
		if _, err := f.Write(block[:min(int64(len(block)), size-n)]); err != nil {
			f.Close()
			return err
		}
	}
	return f.Close()
}

// threadboxProc is a threadbox server started for the bench.
type threadboxProc struct {
	cmd      *exec.Cmd
	base     string
	token    string
	instance string // THREADBOX_INSTANCE: the label of its sandboxes
	data     string // DATA_DIR
	// term sends SIGTERM and waits for the process to end (SIGKILL after
	// 10 s); later calls wait for the same end.
	term func()
	// stop ends the process as term does and removes the instance's
	// sandboxes.
	stop func()
}

// freeAddr returns a loopback address with a free port for a server the
// bench starts.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// startThreadbox starts the server with a fresh data folder and SQLite;
// extra holds more KEY=value settings (later ones win).
func startThreadbox(ctx context.Context, bin, work string, extra ...string) (*threadboxProc, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	// Its own instance label, so that it never adopts or removes the
	// sandboxes of a threadbox running on the same daemon.
	instance := fmt.Sprintf("bench%d-%d", os.Getpid(), time.Now().UnixNano())
	data := filepath.Join(work, "data")
	env := append(os.Environ(), "LISTEN_ADDR="+addr, "DATA_DIR="+data, "DATABASE_URL=",
		"SANDBOX_BACKEND=local", "SANDBOX_DISK_QUOTA=none", "LOG_LEVEL=error", "THREADBOX_INSTANCE="+instance)
	env = append(env, extra...)
	boot := exec.CommandContext(ctx, bin, "admin", "bootstrap", "--org", "bench", "--email", "bench@bench.test")
	boot.Env = env
	tok, err := boot.Output()
	if err != nil {
		return nil, fmt.Errorf("bootstrap: %w", err)
	}
	cmd := exec.CommandContext(ctx, bin, "serve")
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = io.Discard, os.Stderr
	stopsWithTheBench(cmd)
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &threadboxProc{cmd: cmd, base: "http://" + addr, token: strings.TrimSpace(string(tok)), instance: instance, data: data}
	var once sync.Once
	p.term = func() {
		once.Do(func() {
			cmd.Process.Signal(syscall.SIGTERM)
			done := make(chan struct{})
			go func() { cmd.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				cmd.Process.Kill()
				<-done
			}
		})
	}
	p.stop = func() {
		p.term()
		_ = docker.RemoveInstance(context.WithoutCancel(ctx), instance, filepath.Join(data, "pool")) // without a daemon there are none
	}
	for deadline := time.Now().Add(20 * time.Second); ; {
		if resp, err := http.Get(p.base + "/healthz"); err == nil {
			resp.Body.Close()
			return p, nil
		}
		if time.Now().After(deadline) {
			p.stop()
			return nil, fmt.Errorf("threadbox did not start on %s", addr)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// startDockerThreadbox starts a threadbox in a fresh work folder named
// after the section, its sandboxes on Docker with the bench's agent,
// image and runtime; extra holds more settings. done stops it and removes
// the folder.
func startDockerThreadbox(ctx context.Context, o opts, section string, extra ...string) (srv *threadboxProc, done func(), err error) {
	work, err := os.MkdirTemp("", "threadbox-bench-"+section+"-")
	if err != nil {
		return nil, nil, err
	}
	fail := func(err error) (*threadboxProc, func(), error) {
		os.RemoveAll(work)
		return nil, nil, err
	}
	bin, err := threadboxBinary(ctx, o.files.threadboxBin, work)
	if err != nil {
		return fail(err)
	}
	agentBin, err := filepath.Abs(o.agentBin)
	if err != nil {
		return fail(err)
	}
	srv, err = startThreadbox(ctx, bin, work, append([]string{"SANDBOX_BACKEND=docker", "THREADBOX_AGENT_BIN=" + agentBin,
		"SANDBOX_IMAGE=" + o.image, "SANDBOX_RUNTIME=" + o.runtime}, extra...)...)
	if err != nil {
		return fail(err)
	}
	return srv, func() { srv.stop(); os.RemoveAll(work) }, nil
}

// call sends one request and reads the response to its end.
func (p *threadboxProc) call(method, path string, body io.Reader, ctype string, length int64) (int, error) {
	req, err := http.NewRequest(method, p.base+path, body)
	if err != nil {
		return 0, err
	}
	req.ContentLength = length
	req.Header.Set("Authorization", "Bearer "+p.token)
	req.Header.Set("Content-Type", ctype)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return resp.StatusCode, fmt.Errorf("%s %s: %d %s", method, path, resp.StatusCode, bytes.TrimSpace(b))
	}
	return resp.StatusCode, nil
}

// download GETs path into io.Discard.
func (p *threadboxProc) download(path string) (int, error) {
	req, _ := http.NewRequest("GET", p.base+path, nil)
	req.Header.Set("Authorization", "Bearer "+p.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return 0, err
	}
	if resp.StatusCode != http.StatusOK {
		return resp.StatusCode, fmt.Errorf("GET %s: %d", path, resp.StatusCode)
	}
	return resp.StatusCode, nil
}

// measure runs fn o.runs times and returns the median MB/s and the largest
// peak resident memory growth of the server over one transfer.
func (p *threadboxProc) measure(o filesOpts, fn func() (int, error)) (float64, int64, error) {
	var speeds []float64
	growth := int64(-1)
	for range o.runs {
		rss, err := procStatus(p.cmd.Process.Pid, "VmRSS")
		resetErr := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", p.cmd.Process.Pid), []byte("5"), 0)
		t := time.Now()
		if _, err := fn(); err != nil {
			return 0, 0, err
		}
		speeds = append(speeds, float64(o.size)/1e6/time.Since(t).Seconds())
		if hwm, herr := procStatus(p.cmd.Process.Pid, "VmHWM"); err == nil && herr == nil && resetErr == nil {
			growth = max(growth, hwm-rss)
		}
	}
	return median(speeds), growth, nil
}

// procStatus reads one "kB" field of /proc/<pid>/status, in bytes.
func procStatus(pid int, field string) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("no %s in /proc/%d/status", field, pid)
}

func median(v []float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	return s[len(s)/2]
}

// downloadBaseline serves path with http.ServeFile on loopback and returns
// the median MB/s of downloading it.
func downloadBaseline(path string, o filesOpts) (float64, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	hs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { http.ServeFile(w, r, path) })}
	go hs.Serve(l)
	defer hs.Close()
	var speeds []float64
	for range o.runs {
		t := time.Now()
		resp, err := http.Get("http://" + l.Addr().String() + "/f")
		if err != nil {
			return 0, err
		}
		n, err := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if err != nil || n != o.size {
			return 0, fmt.Errorf("baseline download: %d bytes, %v", n, err)
		}
		speeds = append(speeds, float64(o.size)/1e6/time.Since(t).Seconds())
	}
	return median(speeds), nil
}

// uploadBaseline receives src with a plain net/http handler that copies the
// body to a file and fsyncs it, and returns the median MB/s.
func uploadBaseline(src, dst string, o filesOpts) (float64, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	hs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f, err := os.Create(dst)
		if err == nil {
			_, err = io.Copy(f, r.Body)
			if err == nil {
				err = f.Sync()
			}
			if cerr := f.Close(); err == nil {
				err = cerr
			}
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		json.NewEncoder(w).Encode(map[string]bool{"ok": true})
	})}
	go hs.Serve(l)
	defer hs.Close()
	var speeds []float64
	for range o.runs {
		f, err := os.Open(src)
		if err != nil {
			return 0, err
		}
		req, _ := http.NewRequest("POST", "http://"+l.Addr().String()+"/u", f)
		req.ContentLength = o.size
		t := time.Now()
		resp, err := http.DefaultClient.Do(req)
		f.Close()
		if err != nil {
			return 0, err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return 0, fmt.Errorf("baseline upload: %d", resp.StatusCode)
		}
		speeds = append(speeds, float64(o.size)/1e6/time.Since(t).Seconds())
	}
	return median(speeds), nil
}

// stopsWithTheBench makes a server the bench starts stop as it stops
// (SIGTERM, so that it removes its sandboxes): when the bench's context
// ends, and when the bench itself dies, even by SIGKILL (the kernel's
// parent-death signal).
func stopsWithTheBench(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 30 * time.Second
}
