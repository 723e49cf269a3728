package web

import (
	"errors"
	"net"
	"os"
	"testing"
	"time"
)

// TestLingerBoundsLaterReadDeadlines closes a server-side connection whose
// client neither sends nor closes, then sets a read deadline an hour away,
// as the server does for the next request when a shutdown's close comes
// between its check and that call. A read must still end with the linger
// instead of waiting the hour (and holding the shutdown).
func TestLingerBoundsLaterReadDeadlines(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	raw, err := lingerListener{ln}.Accept()
	if err != nil {
		t.Fatal(err)
	}
	conn := raw.(*lingerConn)
	defer conn.TCPConn.Close()

	if err := conn.Close(); err != nil {
		t.Fatal(err)
	}
	// Let the linger's own reader start, so the deadlines below come
	// after anything it sets.
	time.Sleep(200 * time.Millisecond)
	for _, set := range []func(time.Time) error{conn.SetReadDeadline, conn.SetDeadline} {
		if err := set(time.Now().Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
		if err := set(time.Time{}); err != nil {
			t.Fatal(err)
		}
	}
	read := make(chan error, 1)
	go func() {
		_, err := conn.TCPConn.Read(make([]byte, 1))
		read <- err
	}()
	select {
	case err := <-read:
		// The linger's own reader may take the deadline first and close
		// the socket; either way the read has ended.
		if !errors.Is(err, os.ErrDeadlineExceeded) && !errors.Is(err, net.ErrClosed) {
			t.Fatalf("read after the linger: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("a read on a closed connection outlived its linger by far: a later deadline undid it")
	}
}
