package main

// The Content Credentials section: the time to send a generated file with
// its C2PA manifest signed and embedded (infra/c2pa: hash the file, build
// and sign the manifest, stream the signed bytes) beside sending the same
// file unsigned, both read from a file on disk into a discarding writer,
// in one run.

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"image"
	"image/png"
	"io"
	"os"
	"path/filepath"
	"time"

	"threadbox/infra/c2pa"
)

// benchCredentials prints the Content Credentials table.
func benchCredentials(ctx context.Context, n int, out io.Writer) error {
	work, err := os.MkdirTemp("", "threadbox-bench-c2pa-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	key, chain, _, err := c2pa.SelfSignedIssuer(filepath.Join(work, "issuer"), "threadbox bench")
	if err != nil {
		return err
	}
	signer, err := c2pa.NewSigner(key, chain, "bench")
	if err != nil {
		return err
	}
	// A 1 MiB PNG of noise (incompressible) and a 10 MiB WAV.
	img := image.NewNRGBA(image.Rect(0, 0, 512, 512))
	if _, err := rand.Read(img.Pix); err != nil {
		return err
	}
	var pngBuf bytes.Buffer
	if err := png.Encode(&pngBuf, img); err != nil {
		return err
	}
	files := []struct {
		name   string
		format c2pa.Format
		body   []byte
	}{
		{fmt.Sprintf("PNG %.1f MiB", float64(pngBuf.Len())/(1<<20)), c2pa.PNG, pngBuf.Bytes()},
		{"WAV 10 MiB", c2pa.WAV, benchWAV(10 << 20)},
		{"MP4 10 MiB", c2pa.MP4, benchMP4(10<<20, 64<<10)},
	}
	fmt.Fprintf(out, "\nContent Credentials: sending a generated file signed vs as written (read from disk, p50/p99 of %d)\n", n)
	fmt.Fprintf(out, "%-16s %12s %12s %12s %12s %14s\n", "file", "plain p50", "signed p50", "signed p99", "added p50", "manifest bytes")
	for _, f := range files {
		if err := ctx.Err(); err != nil {
			return err
		}
		path := filepath.Join(work, string(f.format))
		if err := os.WriteFile(path, f.body, 0o600); err != nil {
			return err
		}
		plain, err := measure(n, func() error {
			fh, err := os.Open(path)
			if err != nil {
				return err
			}
			defer fh.Close()
			_, err = io.Copy(io.Discard, fh)
			return err
		})
		if err != nil {
			return err
		}
		var grown int64
		signed, err := measure(n, func() error {
			fh, err := os.Open(path)
			if err != nil {
				return err
			}
			defer fh.Close()
			a, err := signer.Sign(ctx, fh, int64(len(f.body)), f.format, c2pa.Provenance{Org: "org_bench", Thread: "thr_bench", ToolUseID: "srvtoolu_bench"})
			if err != nil {
				return err
			}
			grown = a.Size - int64(len(f.body))
			_, err = io.Copy(io.Discard, a.Reader(fh))
			return err
		})
		if err != nil {
			return err
		}
		p50, _ := percentiles(plain)
		s50, s99 := percentiles(signed)
		fmt.Fprintf(out, "%-16s %12s %12s %12s %12s %14d\n", f.name, round(p50), round(s50), round(s99), round(s50-p50), grown)
	}
	return nil
}

func round(d time.Duration) time.Duration { return d.Round(10 * time.Microsecond) }

// benchMP4 is an MP4 of about size bytes as a recorder writes it: ftyp,
// then mdat (random bytes in chunks of chunk bytes), then moov, whose
// track's chunk offset table points at each chunk (so signing rewrites
// every entry).
func benchMP4(size, chunk int) []byte {
	box := func(typ string, parts ...[]byte) []byte {
		n := 8
		for _, p := range parts {
			n += len(p)
		}
		out := binary.BigEndian.AppendUint32(make([]byte, 0, n), uint32(n))
		out = append(out, typ...)
		for _, p := range parts {
			out = append(out, p...)
		}
		return out
	}
	u32 := func(v ...uint32) []byte {
		var out []byte
		for _, x := range v {
			out = binary.BigEndian.AppendUint32(out, x)
		}
		return out
	}
	ftyp := box("ftyp", []byte("isom"), u32(0x200), []byte("isomiso2mp41"))
	data := make([]byte, size)
	_, _ = rand.Read(data)
	mdat := box("mdat", data)
	n := size / chunk
	var offsets []byte
	for i := range n {
		offsets = binary.BigEndian.AppendUint32(offsets, uint32(len(ftyp)+8+i*chunk))
	}
	stbl := box("stbl",
		box("stsd", u32(0, 0)),
		box("stts", u32(0, 1, uint32(n), 1000)),
		box("stsc", u32(0, 1, 1, 1, 1)),
		box("stsz", u32(0, uint32(chunk), uint32(n))),
		box("stco", u32(0, uint32(n)), offsets),
	)
	trak := box("trak", box("tkhd", u32(3), make([]byte, 80)),
		box("mdia", box("mdhd", u32(0, 0, 0, 1000, uint32(n)*1000), []byte{0x55, 0xc4, 0, 0}),
			box("hdlr", u32(0, 0), []byte("vide"), u32(0, 0, 0), []byte("video\x00")),
			box("minf", box("vmhd", u32(1), make([]byte, 8)), stbl)))
	moov := box("moov", box("mvhd", make([]byte, 100)), trak)
	return append(append(ftyp, mdat...), moov...)
}

// benchWAV is a WAV of about size bytes of 16-bit mono samples.
func benchWAV(size int) []byte {
	data := make([]byte, size&^1)
	_, _ = rand.Read(data)
	var b bytes.Buffer
	le := binary.LittleEndian
	b.WriteString("RIFF")
	_ = binary.Write(&b, le, uint32(36+len(data)))
	b.WriteString("WAVEfmt ")
	for _, v := range []any{uint32(16), uint16(1), uint16(1), uint32(44100), uint32(88200), uint16(2), uint16(16)} {
		_ = binary.Write(&b, le, v)
	}
	b.WriteString("data")
	_ = binary.Write(&b, le, uint32(len(data)))
	b.Write(data)
	return b.Bytes()
}
