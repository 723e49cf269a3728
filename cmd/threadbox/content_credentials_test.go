package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"threadbox/infra/c2pa/c2patest"
)

// mediaScript writes a PNG, a JPEG, a GIF, a WebP and a TIFF with Pillow, an
// SVG with matplotlib, a WAV with the wave module, MPEG audio frames as an
// MP3, a FLAC stream (flacScript), the BMFF files of bmffScript, a text
// file and a PDF to outputs.
var mediaScript = "```python\nimport os\nfrom PIL import Image\nos.makedirs('/mnt/user-data/outputs', exist_ok=True)\n" +
	"img = Image.new('RGB', (64, 48), (200, 40, 90))\n" +
	"img.save('/mnt/user-data/outputs/plot.png')\nimg.save('/mnt/user-data/outputs/photo.jpg', quality=90)\n" +
	"img.save('/mnt/user-data/outputs/anim.gif')\nimg.save('/mnt/user-data/outputs/pic.webp')\nimg.save('/mnt/user-data/outputs/scan.tif')\n" +
	"import matplotlib\nmatplotlib.use('Agg')\nimport matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.savefig('/mnt/user-data/outputs/chart.svg')\n" +
	"import wave\nw = wave.open('/mnt/user-data/outputs/tone.wav', 'wb')\nw.setnchannels(1)\nw.setsampwidth(2)\nw.setframerate(8000)\n" +
	"w.writeframes(bytes(range(256)) * 40)\nw.close()\n" +
	"open('/mnt/user-data/outputs/beep.mp3', 'wb').write((b'\\xff\\xfb\\x90\\x64' + bytes(413)) * 10)\n" +
	"open('/mnt/user-data/outputs/notes.txt', 'w').write('plain notes\\n')\n" +
	"open('/mnt/user-data/outputs/doc.pdf', 'wb').write(b'%PDF-1.4\\n%%EOF\\n')\n" + flacScript + bmffScript() + "print('saved')\n```"

// bmffScript writes an MP4, a MOV, an M4A, a HEIC and an AVIF. No tool in
// the sandbox image encodes these, so their bytes are built in Go
// (c2patest) and the sandbox's code writes them.
func bmffScript() string {
	var b strings.Builder
	b.WriteString("import base64\n")
	for name, data := range map[string][]byte{
		"clip.mp4":   c2patest.MP4(c2patest.MP4Options{Brand: "isom"}),
		"clip.mov":   c2patest.MP4(c2patest.MP4Options{Brand: "qt", MoovLast: true}),
		"voice.m4a":  c2patest.MP4(c2patest.MP4Options{Brand: "M4A", CO64: true}),
		"photo.heic": c2patest.HEIF(c2patest.HEIFOptions{Brand: "heic", ILocVersion: 1}),
		"photo.avif": c2patest.HEIF(c2patest.HEIFOptions{Brand: "avif"}),
	} {
		fmt.Fprintf(&b, "open('/mnt/user-data/outputs/%s', 'wb').write(base64.b64decode('%s'))\n", name, base64.StdEncoding.EncodeToString(data))
	}
	return b.String()
}

// flacScript writes a FLAC stream (the sandbox has no FLAC encoder): a
// STREAMINFO block and one frame of 4096 16-bit mono samples at 8 kHz in a
// verbatim subframe, with the frame's CRC-8 and CRC-16.
const flacScript = `import struct
def crc(b, poly, bits):
    c, top, mask = 0, 1 << (bits - 1), (1 << bits) - 1
    for x in b:
        c ^= x << (bits - 8)
        for _ in range(8):
            c = ((c << 1) ^ poly) & mask if c & top else (c << 1) & mask
    return c
n = 4096
info = struct.pack('>HH', n, n) + bytes(6) + struct.pack('>Q', 8000 << 44 | 15 << 36 | n) + bytes(16)
head = bytes([0xff, 0xf8, 0xc4, 0x08, 0])
frame = head + bytes([crc(head, 7, 8)]) + b'\x02' + b''.join(struct.pack('>h', (i % 100) * 500 - 25000) for i in range(n))
frame += struct.pack('>H', crc(frame, 0x8005, 16))
open('/mnt/user-data/outputs/tone.flac', 'wb').write(b'fLaC\x80\x00\x00\x22' + info + frame)
`

// TestContentCredentialsDownloads: media written by code in a Docker
// sandbox come back from every download path (thread download-file, the
// Files API content, artifact content) with a C2PA manifest the reference
// implementation validates (signature, data hash, the threadbox assertion
// with the org, thread, tool_use_id when known and the SHA-256 of the file
// as written); a flipped byte is a hash mismatch; text, PDF and uploads
// come back byte for byte; size_bytes stays the stored size; a range is a
// slice of the signed bytes; and the org's contentCredentials switch off
// serves the file as written.
func TestContentCredentialsDownloads(t *testing.T) {
	bin := needDocker(t)
	s := startServer(t, "", map[string]string{"SANDBOX_BACKEND": "docker", "THREADBOX_AGENT_BIN": bin, "MODEL_PROVIDER": "runner"})
	f := newWSFixture(t, s)
	a, tid := f.admin, f.tid
	orgID := s.do("GET", "/api/v1/app/me", a, nil).json(t)["org_id"].(string)

	r := s.do("POST", appAPI+"/thread/"+tid+"/messages", a, map[string]any{"content": mediaScript, "pgpt": map[string]any{"tools": []any{"code_execution"}}})
	if r.status != 200 || !strings.Contains(string(r.body), "saved") {
		t.Fatalf("turn: %d %s", r.status, r.body)
	}
	artifacts := map[string]map[string]any{}
	for _, x := range s.do("GET", appAPI+"/project/"+f.pid+"/artifacts", a, nil).json(t)["data"].([]any) {
		x := x.(map[string]any)
		artifacts[x["name"].(string)] = x
	}

	type path struct {
		name, url  string
		toolUseID  bool // the path knows the tool call that wrote the file
		filesAPIID string
	}
	paths := func(name string) []path {
		p := "/mnt/user-data/outputs/" + name
		return []path{
			{"download-file", appAPI + "/thread/" + tid + "/download-file?path=" + url.QueryEscape(p), false, ""},
			{"files api", filesAPI + "/" + fileID(p) + "/content?scope_id=" + tid, false, fileID(p)},
			{"artifact", artifacts[name]["download_url"].(string), true, ""},
		}
	}
	for _, tc := range []struct{ name, mime string }{{"plot.png", "image/png"}, {"photo.jpg", "image/jpeg"}, {"anim.gif", "image/gif"}, {"tone.wav", "audio/wav"}, {"chart.svg", "image/svg+xml"}, {"pic.webp", "image/webp"}, {"beep.mp3", "audio/mpeg"}, {"scan.tif", "image/tiff"}, {"tone.flac", "audio/flac"},
		{"clip.mp4", "video/mp4"}, {"clip.mov", "video/quicktime"}, {"voice.m4a", "audio/mp4"}, {"photo.heic", "image/heic"}, {"photo.avif", "image/avif"}} {
		art := artifacts[tc.name]
		if art == nil {
			t.Fatalf("no artifact %s; the turn said: %s", tc.name, r.body)
		}
		stored := art["sha256"].(string)
		size := int(art["size_bytes"].(float64))
		for _, p := range paths(tc.name) {
			t.Run(tc.name+" "+p.name, func(t *testing.T) {
				dl := s.do("GET", p.url, a, nil)
				if dl.status != 200 || dl.header.Get("Content-Type") != tc.mime {
					t.Fatalf("download: %d %v", dl.status, dl.header)
				}
				if len(dl.body) <= size {
					t.Fatalf("signed download is %d bytes, the stored file %d", len(dl.body), size)
				}
				rep := c2patest.Validate(t, tc.mime, dl.body)
				binding, mismatch := "assertion.dataHash.match", "assertion.dataHash.mismatch"
				if strings.HasPrefix(tc.mime, "video/") || tc.mime == "audio/mp4" || tc.mime == "image/heic" || tc.mime == "image/avif" {
					binding, mismatch = "assertion.bmffHash.match", "assertion.bmffHash.mismatch"
				}
				if rep.ActiveManifest == "" || len(rep.Failures()) > 0 || !rep.Has("claimSignature.validated") || !rep.Has(binding) {
					t.Fatalf("validation: %+v\n%s", rep.Failures(), rep.Raw)
				}
				var tb struct {
					Org       string `json:"org"`
					Thread    string `json:"thread"`
					ToolUseID string `json:"tool_use_id"`
					SHA256    string `json:"sha256"`
				}
				if err := json.Unmarshal(rep.Assertion("io.threadbox.provenance"), &tb); err != nil {
					t.Fatalf("threadbox assertion: %v\n%s", err, rep.Raw)
				}
				if tb.Org != orgID || tb.SHA256 != stored || (p.name != "files api" && tb.Thread != tid) {
					t.Errorf("threadbox assertion %+v, want org %s, thread %s, sha256 %s", tb, orgID, tid, stored)
				}
				if p.toolUseID != (tb.ToolUseID == art["tool_use_id"]) {
					t.Errorf("tool_use_id %q, the artifact's %v", tb.ToolUseID, art["tool_use_id"])
				}
				// A range is a slice of the same signed bytes.
				rg := s.do("GET", p.url, a, nil, "Range", "bytes=10-99")
				if rg.status != 206 || string(rg.body) != string(dl.body[10:100]) {
					t.Errorf("range: %d, %d bytes, not the signed bytes 10-99", rg.status, len(rg.body))
				}
				flipped := []byte(string(dl.body))
				at := len(flipped) - 16 // image data, after the manifest near the start
				switch tc.mime {
				case "audio/wav", "image/webp":
					at = 50 // samples or bitstream, before the manifest at the end
				case "audio/mpeg", "audio/flac":
					at = len(flipped) - 100 // audio frames, after the manifest in the tag at the start
				case "image/tiff":
					at = size - 1 // the stored file, before the directory and manifest appended
				case "image/svg+xml":
					at = bytes.Index(flipped, []byte(`d="M `)) + 5 // a digit of a path, before the manifest at the end
				}
				flipped[at] ^= 0x01
				if rep := c2patest.Validate(t, tc.mime, flipped); !rep.Has(mismatch) {
					t.Errorf("a flipped byte is not a hash mismatch:\n%s", rep.Raw)
				}
				if p.filesAPIID != "" {
					meta := s.do("GET", filesAPI+"/"+p.filesAPIID+"?scope_id="+tid, a, nil).json(t)
					if meta["size_bytes"] != float64(size) {
						t.Errorf("size_bytes %v, want the stored %d", meta["size_bytes"], size)
					}
				}
			})
		}
	}

	// Not media: byte for byte on every path.
	for name, want := range map[string]string{"notes.txt": "plain notes\n", "doc.pdf": "%PDF-1.4\n%%EOF\n"} {
		for _, p := range paths(name) {
			if dl := s.do("GET", p.url, a, nil); dl.status != 200 || string(dl.body) != want {
				t.Errorf("%s by %s: %d %q", name, p.name, dl.status, dl.body)
			}
		}
	}

	// An upload is served as it came, even an image.
	img := s.do("GET", paths("plot.png")[2].url, a, nil).body
	if r := f.upload(t, a, tid, "mine.png", "mine.png", string(img)); r.status != 200 && r.status != 201 {
		t.Fatalf("upload: %d %s", r.status, r.body)
	}
	if dl := f.download(a, tid, url.QueryEscape("/mnt/user-data/uploads/mine.png")); dl.status != 200 || string(dl.body) != string(img) {
		t.Errorf("uploaded image: %d, %d bytes, want the %d uploaded", dl.status, len(dl.body), len(img))
	}

	// The org's switch off: the file as written.
	f.patchFeatures(t, map[string]any{"contentCredentials": map[string]any{"enabled": false}})
	if got := s.do("GET", appAPI+"/org/features", a, nil).json(t)["contentCredentials"]; got.(map[string]any)["enabled"] != false {
		t.Fatalf("features: %v", got)
	}
	for _, p := range paths("plot.png") {
		dl := s.do("GET", p.url, a, nil)
		sum := sha256.Sum256(dl.body)
		if dl.status != 200 || hex.EncodeToString(sum[:]) != artifacts["plot.png"]["sha256"] {
			t.Errorf("plot.png by %s with contentCredentials off: %d, not the stored file", p.name, dl.status)
		}
	}
	if r := s.do("PATCH", appAPI+"/org/features", a, map[string]any{"contentCredentials": map[string]any{"enable": true}}); r.status != 400 {
		t.Errorf("a misspelt member: %d %s", r.status, r.body)
	}
}

// TestContentCredentialsPresigned: with BLOB_PRESIGN and an S3-compatible
// store, a generated media file is not redirected to the store (which
// holds it as written): the server streams its signed form, which the
// reference implementation validates. A text artifact is still
// redirected, and with the org's switch off the image streams as written.
func TestContentCredentialsPresigned(t *testing.T) {
	bin := needDocker(t)
	o, _ := needS3(t)
	o.Bucket = "c2pa-" + o.Bucket
	// The in-process server's S3 client reads its credentials from the
	// process environment.
	t.Setenv("AWS_ACCESS_KEY_ID", o.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", o.SecretKey)
	s := startServer(t, "", map[string]string{
		"SANDBOX_BACKEND": "docker", "THREADBOX_AGENT_BIN": bin, "MODEL_PROVIDER": "runner",
		"BLOB_URL":           fmt.Sprintf("s3://%s?endpoint=%s&region=%s", o.Bucket, url.QueryEscape(o.Endpoint), o.Region),
		"BLOB_CREATE_BUCKET": "true", "BLOB_PRESIGN": "true",
	})
	f := newWSFixture(t, s)
	script := "```python\nfrom PIL import Image\nImage.new('RGB', (32, 24), (10, 200, 90)).save('/mnt/user-data/outputs/plot.png')\n" +
		"open('/mnt/user-data/outputs/notes.txt', 'w').write('plain notes\\n')\nprint('saved')\n```"
	if r := s.do("POST", appAPI+"/thread/"+f.tid+"/messages", f.admin, map[string]any{"content": script, "pgpt": map[string]any{"tools": []any{"code_execution"}}}); r.status != 200 {
		t.Fatalf("turn: %d %s", r.status, r.body)
	}
	artifacts := map[string]map[string]any{}
	for _, x := range s.do("GET", appAPI+"/project/"+f.pid+"/artifacts", f.admin, nil).json(t)["data"].([]any) {
		x := x.(map[string]any)
		artifacts[x["name"].(string)] = x
	}
	if artifacts["plot.png"] == nil || artifacts["notes.txt"] == nil {
		t.Fatalf("artifacts: %v", artifacts)
	}
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	get := func(u string) (*http.Response, []byte) {
		req, _ := http.NewRequest("GET", s.base+u, nil)
		req.Header.Set("Authorization", "Bearer "+f.admin)
		resp, err := noFollow.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp, b
	}
	png := artifacts["plot.png"]
	resp, body := get(png["download_url"].(string))
	if resp.StatusCode != 200 || len(body) <= int(png["size_bytes"].(float64)) {
		t.Fatalf("media download with presigning: %d %v, %d bytes", resp.StatusCode, resp.Header, len(body))
	}
	rep := c2patest.Validate(t, "image/png", body)
	if rep.ActiveManifest == "" || len(rep.Failures()) > 0 || !rep.Has("assertion.dataHash.match") {
		t.Fatalf("validation: %+v\n%s", rep.Failures(), rep.Raw)
	}
	if !strings.Contains(string(rep.Assertion("io.threadbox.provenance")), png["sha256"].(string)) {
		t.Errorf("the threadbox assertion does not name the stored file's SHA-256\n%s", rep.Raw)
	}
	resp, _ = get(artifacts["notes.txt"]["download_url"].(string))
	if loc := resp.Header.Get("Location"); resp.StatusCode != 307 || !strings.Contains(loc, "X-Amz-Signature") {
		t.Fatalf("text download with presigning: %d %v", resp.StatusCode, resp.Header)
	}
	f.patchFeatures(t, map[string]any{"contentCredentials": map[string]any{"enabled": false}})
	resp, body = get(png["download_url"].(string))
	sum := sha256.Sum256(body)
	if resp.StatusCode != 200 || hex.EncodeToString(sum[:]) != png["sha256"] {
		t.Fatalf("media download with contentCredentials off: %d, not the stored file", resp.StatusCode)
	}
}
