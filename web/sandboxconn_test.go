package web

import (
	"bufio"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
)

// TestSandboxConnServesOnlyTheAPI sends requests from inside a sandbox
// whose path is normalised into /api/gpt/ (an encoded slash before "..")
// while the router takes it as sent, to routes outside the product's API
// that authenticate no bearer token (download tickets, the frontend's
// assets): each is answered with the connection's 404, as every path
// outside /api/gpt/ is, and none reaches its route.
func TestSandboxConnServesOnlyTheAPI(t *testing.T) {
	srv := New(Services{}, slog.New(slog.DiscardHandler), Options{})
	srv.app.Handler() // builds the routes, as listening does
	for _, path := range []string{
		"/api/v1/app/artifact/..%2F..%2F..%2Fgpt%2Fx/content?ticket=t",
		"/api/v1/app/thread/..%2F..%2F..%2Fgpt%2Fx/download-file?ticket=t&path=a",
		"/ui/..%2Fapi%2Fgpt%2Fapp.js",
		"/api/gpt/../v1/app/me",
	} {
		client, server := net.Pipe()
		done := make(chan struct{})
		go func() { defer close(done); srv.ServeSandboxConn(server, "ctr_1") }()
		go fmt.Fprintf(client, "GET %s HTTP/1.1\r\nHost: 127.0.0.1:47800\r\nConnection: close\r\n\r\n", path)
		resp, err := http.ReadResponse(bufio.NewReader(client), nil)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		client.Close()
		<-done
		if resp.StatusCode != http.StatusNotFound || !strings.Contains(string(body), "Only the product's API") {
			t.Errorf("GET %s from inside a sandbox: %d %s, want the connection's 404", path, resp.StatusCode, body)
		}
	}
}
