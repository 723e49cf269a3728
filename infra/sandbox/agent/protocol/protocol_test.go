package protocol

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"testing"
)

func TestFrameRoundTrip(t *testing.T) {
	frames := []Frame{
		{Type: TypePing, ID: 0},
		{Type: TypeExec, ID: 1, Payload: []byte(`{"args":["true"]}`)},
		{Type: TypeStdout, ID: 0xFFFFFFFF, Payload: bytes.Repeat([]byte{0, 1, 2}, 20000)},
		{Type: Type(0x7f), ID: 42, Payload: []byte("x")},
	}
	var buf bytes.Buffer
	for _, f := range frames {
		if err := WriteFrame(&buf, f.Type, f.ID, f.Payload); err != nil {
			t.Fatal(err)
		}
	}
	for i, want := range frames {
		got, err := ReadFrame(&buf)
		if err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		if got.Type != want.Type || got.ID != want.ID || !bytes.Equal(got.Payload, want.Payload) {
			t.Fatalf("frame %d: got %v/%d/%d bytes, want %v/%d/%d bytes", i, got.Type, got.ID, len(got.Payload), want.Type, want.ID, len(want.Payload))
		}
	}
	if _, err := ReadFrame(&buf); !errors.Is(err, io.EOF) {
		t.Fatalf("after the last frame: %v, want io.EOF", err)
	}
}

func TestHeaderLayout(t *testing.T) {
	b := AppendFrame(nil, TypeStderr, 0x01020304, []byte("hi"))
	want := []byte{0x22, 1, 2, 3, 4, 0, 0, 0, 2, 'h', 'i'}
	if !bytes.Equal(b, want) {
		t.Fatalf("encoded % x, want % x", b, want)
	}
}

func TestReadFrameErrors(t *testing.T) {
	tooLarge := make([]byte, HeaderSize)
	tooLarge[0] = byte(TypeStdout)
	binary.BigEndian.PutUint32(tooLarge[5:], MaxPayload+1)
	full := AppendFrame(nil, TypeStdout, 7, []byte("hello"))
	tests := []struct {
		name string
		in   []byte
		want error
	}{
		{"empty", nil, io.EOF},
		{"partial header", full[:4], io.ErrUnexpectedEOF},
		{"partial payload", full[:len(full)-2], io.ErrUnexpectedEOF},
		{"too large", tooLarge, ErrFrameTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ReadFrame(bytes.NewReader(tt.in))
			if !errors.Is(err, tt.want) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
		})
	}
}

func TestWriteFrameRejectsOversizedPayload(t *testing.T) {
	var buf bytes.Buffer
	err := WriteFrame(&buf, TypeStdin, 1, make([]byte, MaxPayload+1))
	if !errors.Is(err, ErrFrameTooLarge) || buf.Len() != 0 {
		t.Fatalf("err = %v, wrote %d bytes", err, buf.Len())
	}
}

// oneByteReader returns at most one byte per Read, as a slow pipe may.
type oneByteReader struct{ r io.Reader }

func (o oneByteReader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	return o.r.Read(p[:1])
}

func TestReadFrameFromByteAtATimeStream(t *testing.T) {
	b := AppendFrame(nil, TypeExit, 9, []byte(`{"exit_code":3}`))
	f, err := ReadFrame(oneByteReader{bytes.NewReader(b)})
	if err != nil {
		t.Fatal(err)
	}
	var e Exit
	if err := Decode(f.Payload, &e); err != nil {
		t.Fatal(err)
	}
	if f.Type != TypeExit || f.ID != 9 || e.ExitCode != 3 {
		t.Fatalf("got %v %d %+v", f.Type, f.ID, e)
	}
}

func TestExecJSONRoundTrip(t *testing.T) {
	in := Exec{Args: []string{"bash", "-c", "echo"}, Dir: "d", Env: []string{"A=1"}, TimeoutMillis: 1500,
		MaxOutput: 10, OutputDir: true, OpenStdin: true, TTY: &TTY{Rows: 24, Cols: 80}}
	b, err := Encode(in)
	if err != nil {
		t.Fatal(err)
	}
	var out Exec
	if err := Decode(b, &out); err != nil {
		t.Fatal(err)
	}
	if out.Dir != in.Dir || out.TimeoutMillis != in.TimeoutMillis || out.MaxOutput != in.MaxOutput ||
		!out.OutputDir || !out.OpenStdin || out.TTY == nil || *out.TTY != *in.TTY || len(out.Args) != 3 || out.Env[0] != "A=1" {
		t.Fatalf("round trip: %+v", out)
	}
	if err := Decode([]byte("{"), &out); err == nil {
		t.Fatal("bad JSON decoded without error")
	}
}

func TestTypeString(t *testing.T) {
	tests := map[Type]string{TypePing: "ping", TypeExit: "exit", TypeStreamData: "stream(0x32)", Type(0xEE): "unknown(0xee)"}
	for ty, want := range tests {
		if got := ty.String(); got != want {
			t.Errorf("%d.String() = %q, want %q", ty, got, want)
		}
	}
}
