package main

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"net/http"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"threadbox/e2e"
)

// onePagePDF is a minimal one-page PDF.
const onePagePDF = "%PDF-1.4\n1 0 obj<</Type/Catalog/Pages 2 0 R>>endobj 2 0 obj<</Type/Pages/Kids[3 0 R]/Count 1>>endobj " +
	"3 0 obj<</Type/Page/Parent 2 0 R/MediaBox[0 0 200 200]>>endobj\ntrailer<</Root 1 0 R>>\n%%EOF\n"

// TestE2EThreadFiles: a thread's files can be previewed in the
// side panel (a CSV as a table, text, an image, a PDF) and deleted after a
// confirmation; a download is saved by the browser from a short-lived
// ticket URL, not built in page memory (no blob: URL is made), byte for
// byte. The ticket opens its one file only, is no bearer token, and ends
// with the token it was given to; /download-url refuses what is not a
// download of the caller's.
func TestE2EThreadFiles(t *testing.T) {
	e2e.NeedChromium(t)
	s := e2eServer(t, nil)
	tid, token := apiThread(t, s, "Files", "With files")
	img := image.NewRGBA(image.Rect(0, 0, 4, 4))
	img.Set(1, 1, color.RGBA{R: 200, A: 255})
	var pngBuf bytes.Buffer
	if err := png.Encode(&pngBuf, img); err != nil {
		t.Fatal(err)
	}
	big := bytes.Repeat([]byte("\x00\x01binary\xff\xfe0123456"), 6<<16) // 6 MiB, not text
	for name, body := range map[string][]byte{"sales.csv": []byte(salesCSV), "notes.txt": []byte("hello from the notes\n"), "pixel.png": pngBuf.Bytes(), "big.bin": big, "page.pdf": []byte(onePagePDF)} {
		if r := s.do("PUT", appAPI+"/thread/"+tid+"/put-file/"+name, token, body, "Content-Type", "application/octet-stream"); r.status != 200 {
			t.Fatalf("put %s: %d %s", name, r.status, r.body)
		}
	}

	// The API: a ticket URL for one file, usable without a token, for that
	// file only, never as a bearer token.
	fileURL := func(path string) string {
		return appAPI + "/thread/" + tid + "/download-file?path=" + url.QueryEscape(path)
	}
	r := s.do("POST", appAPI+"/download-url", token, map[string]any{"url": fileURL("/mnt/user-data/uploads/notes.txt")})
	if r.status != 200 {
		t.Fatalf("download-url: %d %s", r.status, r.body)
	}
	ticketURL := r.json(t)["url"].(string)
	if got := s.do("GET", ticketURL, "", nil); got.status != 200 || string(got.body) != "hello from the notes\n" {
		t.Errorf("the ticket URL: %d %q", got.status, got.body)
	}
	ticket, _ := url.Parse(ticketURL)
	tk := ticket.Query().Get("ticket")
	if got := s.do("GET", fileURL("/mnt/user-data/uploads/sales.csv")+"&ticket="+url.QueryEscape(tk), "", nil); got.status != 401 {
		t.Errorf("a ticket for another file: %d %s", got.status, got.body)
	}
	if got := s.do("GET", appAPI+"/me", tk, nil); got.status != 401 {
		t.Errorf("a ticket as a bearer token: %d", got.status)
	}
	for _, bad := range []string{"https://example.com" + fileURL("/mnt/user-data/uploads/notes.txt"), appAPI + "/me", appAPI + "/thread/" + tid + "/download-file"} {
		if got := s.do("POST", appAPI+"/download-url", token, map[string]any{"url": bad}); got.status != 400 {
			t.Errorf("download-url for %s: %d %s", bad, got.status, got.body)
		}
	}
	if got := s.do("POST", appAPI+"/download-url", token, map[string]any{"url": fileURL("/mnt/user-data/uploads/missing.txt")}); got.status != 404 {
		t.Errorf("download-url for a missing file: %d %s", got.status, got.body)
	}
	if got := s.do("POST", appAPI+"/download-url", token, map[string]any{"url": appAPI + "/artifact/art_missing/content"}); got.status != 404 {
		t.Errorf("download-url for a missing artifact: %d %s", got.status, got.body)
	}
	// Another session's ticket ends with that session.
	login := s.do("POST", appAPI+"/auth/login", "", map[string]string{"email": e2eEmail, "password": e2ePassword}).json(t)
	other := login["token"].(string)
	ou := s.do("POST", appAPI+"/download-url", other, map[string]any{"url": fileURL("/mnt/user-data/uploads/notes.txt")}).json(t)["url"].(string)
	if got := s.do("DELETE", appAPI+"/tokens/"+login["id"].(string), token, nil); got.status != 204 {
		t.Fatalf("revoke the other session: %d %s", got.status, got.body)
	}
	if got := s.do("GET", ou, "", nil); got.status != 401 {
		t.Errorf("a ticket of a revoked session: %d", got.status)
	}

	b := e2e.Start(t, 1440, 1000)
	uiLogin(b, s.base, e2eEmail, e2ePassword)
	b.Do("open the thread", chromedp.Navigate(s.base+"/#/thread/"+tid), chromedp.WaitVisible(chromedp.ID("message")))
	b.WaitTrue("five files", `document.querySelectorAll('.file-list li[data-path]').length === 5`, 10*time.Second)
	b.Do("count blob URLs", chromedp.Evaluate[chromedp.Void](`(() => {
		window.blobURLs = 0;
		const make = URL.createObjectURL;
		URL.createObjectURL = (b) => { window.blobURLs++; return make.call(URL, b); };
	})()`))
	item := func(name string) string { return `.file-list li[data-path="/mnt/user-data/uploads/` + name + `"]` }

	// A large download goes to disk through the ticket URL.
	b.Do("download big.bin", chromedp.Click(chromedp.CSS(item("big.bin")+" button.download")))
	if got := b.WaitDownload("big.bin", 30*time.Second); !bytes.Equal(got, big) {
		t.Errorf("big.bin downloaded: %d bytes, want %d", len(got), len(big))
	}
	if n := e2e.Eval[int](b, "blob URLs", `window.blobURLs`); n != 0 {
		t.Errorf("the download made %d blob: URLs (buffered in page memory)", n)
	}
	if n := e2e.Eval[int](b, "preview of a binary", `document.querySelectorAll('`+item("big.bin")+` button.preview-toggle').length`); n != 0 {
		t.Error("a binary file offers a preview")
	}

	// Previews: a CSV as a table, text as text, an image.
	b.Do("preview the CSV", chromedp.Click(chromedp.CSS(item("sales.csv")+" button.preview-toggle")))
	b.WaitText(item("sales.csv")+" .file-preview table td", "Jan", 10*time.Second)
	if got := e2e.Eval[string](b, "expanded", `document.querySelector('`+item("sales.csv")+` button.preview-toggle').getAttribute('aria-expanded')`); got != "true" {
		t.Errorf("the preview button says aria-expanded=%s", got)
	}
	b.Do("preview the text", chromedp.Click(chromedp.CSS(item("notes.txt")+" button.preview-toggle")))
	b.WaitText(item("notes.txt")+" .file-preview pre", "hello from the notes", 10*time.Second)
	b.Do("preview the image", chromedp.Click(chromedp.CSS(item("pixel.png")+" button.preview-toggle")))
	b.WaitTrue("the image", `(() => { const i = document.querySelector('`+item("pixel.png")+` .file-preview img'); return i && i.complete && i.naturalWidth === 4 && i.alt === 'Preview of pixel.png'; })()`, 10*time.Second)
	// A PDF in the browser's own viewer, loaded as a document (not a
	// download) from a ticket URL.
	b.Do("preview the PDF", chromedp.Click(chromedp.CSS(item("page.pdf")+" button.preview-toggle")))
	b.WaitTrue("the PDF", `(() => { const f = document.querySelector('`+item("page.pdf")+` .file-preview iframe'); try { return f && f.title === 'Preview of page.pdf' && f.src.includes('ticket=') && f.src.includes('disposition=inline') && f.contentDocument && f.contentDocument.contentType === 'application/pdf'; } catch { return false; } })()`, 15*time.Second)
	shootViewport(t, b, "pdf-preview", item("page.pdf"))
	b.Do("fold the CSV again", chromedp.Click(chromedp.CSS(item("sales.csv")+" button.preview-toggle")))
	if !e2e.Eval[bool](b, "folded", `document.querySelector('`+item("sales.csv")+` .file-preview').hidden`) {
		t.Error("the preview does not fold")
	}
	everyControlLabelled(t, b, "thread files")

	// Delete, after a confirmation; Cancel deletes nothing.
	b.Do("cancel a delete", chromedp.Click(chromedp.CSS(item("notes.txt")+" button.delete-file")),
		chromedp.WaitVisible(chromedp.ID("dialog-cancel")), chromedp.Click(chromedp.ID("dialog-cancel")))
	b.Do("delete notes.txt", chromedp.Click(chromedp.CSS(item("notes.txt")+" button.delete-file")),
		chromedp.WaitVisible(chromedp.ID("dialog-ok")), chromedp.Click(chromedp.ID("dialog-ok")))
	b.WaitTrue("four files", `document.querySelectorAll('.file-list li[data-path]').length === 4 && !document.querySelector('`+item("notes.txt")+`')`, 10*time.Second)
	list := s.do("GET", "/api/gpt/v1/files?scope_id="+tid, token, nil)
	if list.status != 200 || strings.Contains(string(list.body), "notes.txt") || !strings.Contains(string(list.body), "sales.csv") {
		t.Errorf("the thread's files after the delete: %d %s", list.status, list.body)
	}
	if got := s.do("GET", fileURL("/mnt/user-data/uploads/notes.txt"), token, nil); got.status != http.StatusNotFound {
		t.Errorf("the deleted file downloads: %d", got.status)
	}
	b.SetViewport(375, 800)
	noHorizontalOverflow(t, b, 375)
}

// attachTwoFiles signs in to a new server's page, opens a new thread
// titled title and picks sales.csv and notes.txt in its composer; it
// returns the server, the user's token, the thread's id and the browser.
func attachTwoFiles(t *testing.T, title string) (*server, string, string, *e2e.Browser) {
	t.Helper()
	e2e.NeedChromium(t)
	s := e2eServer(t, nil)
	token := apiLogin(t, s, e2eEmail, e2ePassword)
	pid := s.do("POST", appAPI+"/project", token, map[string]any{"name": "Attach"}).json(t)["id"]
	tid := s.do("POST", appAPI+"/thread", token, map[string]any{"project_id": pid, "title": title}).json(t)["id"].(string)
	dir := t.TempDir()
	var paths []string
	for _, name := range []string{"sales.csv", "notes.txt"} {
		p := dir + "/" + name
		if err := os.WriteFile(p, []byte("data of "+name+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	b := e2e.Start(t, 1440, 1000)
	uiLogin(b, s.base, e2eEmail, e2ePassword)
	b.Do("open the thread", chromedp.Navigate(s.base+"/#/thread/"+tid), chromedp.WaitVisible(chromedp.ID("message")))
	b.Do("pick two files", chromedp.SetUploadFiles(chromedp.ID("file-input"), paths))
	return s, token, tid, b
}

// TestE2EAttachToMessage: files uploaded in the composer are
// attached to the message being written, listed there and removable, and
// the message sent names them (container_upload blocks before its text),
// in the page and as stored.
func TestE2EAttachToMessage(t *testing.T) {
	s, token, tid, b := attachTwoFiles(t, "With attachments")
	b.WaitTrue("both attached", `document.querySelectorAll('.attachments .attachment').length === 2`, 20*time.Second)
	everyControlLabelled(t, b, "composer with attachments")
	b.Do("remove one", chromedp.Click(chromedp.CSS(`.attachments button[aria-label="Remove notes.txt from the message"]`)))
	b.WaitTrue("one attached", `document.querySelectorAll('.attachments .attachment').length === 1`, 5*time.Second)
	if id := e2e.Eval[string](b, "focus", `document.activeElement.id`); id != "message" {
		t.Errorf("after removing an attachment the focus is on %q", id)
	}
	b.Do("send", chromedp.Focus(chromedp.ID("message")), chromedp.KeyEvent("Sum the sales\r"))
	b.WaitText(".msg.assistant .text", "offline runner model", 30*time.Second)
	if got := e2e.Eval[string](b, "the message", `document.querySelector('.msg.user .blocks').textContent`); !strings.Contains(got, "Attached file: /mnt/user-data/uploads/sales.csv") || !strings.Contains(got, "Sum the sales") || strings.Contains(got, "notes.txt") {
		t.Errorf("the message shown: %q", got)
	}
	if !e2e.Eval[bool](b, "attachments cleared", `document.querySelector('.attachments').hidden && document.querySelectorAll('.uploads .upload.done').length === 0`) {
		t.Error("the attachments are still shown after the message was sent")
	}
	msgs := s.do("GET", appAPI+"/thread/"+tid+"/messages", token, nil).json(t)["data"].([]any)
	content := msgs[0].(map[string]any)["content"].([]any)
	var kinds []string
	for _, c := range content {
		c := c.(map[string]any)
		k := c["type"].(string)
		if id, ok := c["file_id"].(string); ok {
			raw, _ := base64.RawURLEncoding.DecodeString(id)
			k += ":" + string(raw)
		}
		kinds = append(kinds, k)
	}
	if got := strings.Join(kinds, " "); got != "container_upload:/mnt/user-data/uploads/sales.csv text" {
		t.Errorf("the stored message: %s", got)
	}
}

// TestE2EDeletedFileLeavesTheMessage: a file deleted from the thread's
// files while it is attached to the message being written is taken off
// the message too; it stayed there, and the message was refused with the
// server's words about a file id no longer in the container.
func TestE2EDeletedFileLeavesTheMessage(t *testing.T) {
	_, _, _, b := attachTwoFiles(t, "Changed my mind")
	b.WaitTrue("both attached", `document.querySelectorAll('.attachments .attachment.done').length === 2`, 20*time.Second)
	item := `.file-list li[data-path="/mnt/user-data/uploads/notes.txt"]`
	b.WaitTrue("notes.txt among the files", `!!document.querySelector('`+item+` .delete-file')`, 10*time.Second)
	b.Do("delete notes.txt", chromedp.Click(chromedp.CSS(item+" .delete-file")), chromedp.WaitVisible(chromedp.ID("dialog-ok")), chromedp.Click(chromedp.ID("dialog-ok")))
	b.WaitTrue("notes.txt gone from the files", `!document.querySelector('`+item+`')`, 10*time.Second)
	if got := e2e.Eval[string](b, "attached", `[...document.querySelectorAll('.attachments .attachment')].map(a => a.dataset.name).join(' ')`); got != "sales.csv" {
		t.Errorf("attached after notes.txt was deleted: %q", got)
	}
	b.Do("send", chromedp.Focus(chromedp.ID("message")), chromedp.KeyEvent("Sum the sales\r"))
	b.WaitText(".msg.assistant .text", "offline runner model", 30*time.Second)
	if n := e2e.Eval[int](b, "errors", `document.querySelectorAll('.turn-error').length`); n != 0 {
		t.Errorf("the message was refused: %s", e2e.Eval[string](b, "error", `document.querySelector('.turn-error').textContent`))
	}
	if got := e2e.Eval[string](b, "the message", `document.querySelector('.msg.user .blocks').textContent`); !strings.Contains(got, "sales.csv") || strings.Contains(got, "notes.txt") {
		t.Errorf("the message shown: %q", got)
	}
}

// livePage is an HTML output that draws with its own script and reports to
// the page what its sandbox let it do.
const livePage = `<!doctype html><html><head><title>Live chart</title><style>body{font:16px sans-serif}</style></head>
<body><h1 id="h">not run</h1><canvas id="c" width="120" height="60"></canvas><script>
document.getElementById('h').textContent = 'Drawn by its script';
const g = document.getElementById('c').getContext('2d'); g.fillStyle = '#36c'; g.fillRect(10, 10, 100, 40);
const r = { ran: true };
try { r.parent = String(parent.document.title); } catch (e) { r.parent = 'blocked'; }
try { r.cookie = document.cookie; r.storage = String(localStorage.length); } catch (e) { r.storage = 'blocked'; }
try { top.location.href = '/#/admin'; } catch (e) { r.top = 'blocked'; }
fetch('/api/v1/app/me').then(() => { r.fetch = 'open'; }, () => { r.fetch = 'blocked'; })
  .finally(() => parent.postMessage(JSON.stringify(r), '*'));
</script></body></html>`

// TestE2ELivePreview: an HTML and an SVG file preview live, as chat apps
// show such artifacts: in a frame sandboxed to scripts (no same-origin
// access, no top navigation), loaded from a ticket URL sent with a CSP
// that runs the file's own inline script and refuses the network. The
// page's script draws, cannot read the page, its storage or the API, and
// cannot navigate the page; at 1440 px in the light theme and 375 px in
// the dark one.
func TestE2ELivePreview(t *testing.T) {
	e2e.NeedChromium(t)
	s := e2eServer(t, nil)
	tid, token := apiThread(t, s, "Previews", "Live preview")
	svg := `<svg xmlns="http://www.w3.org/2000/svg" width="80" height="40"><rect width="80" height="40" fill="#c33"/>` +
		`<script>parent.postMessage(JSON.stringify({svg: 'ran'}), '*')</script></svg>`
	for name, body := range map[string]string{"chart.html": livePage, "badge.svg": svg} {
		if r := s.do("PUT", appAPI+"/thread/"+tid+"/put-file/"+name, token, []byte(body), "Content-Type", "application/octet-stream"); r.status != 200 {
			t.Fatalf("put %s: %d %s", name, r.status, r.body)
		}
	}

	// The API: preview sends HTML inline under the sandboxing CSP; inline
	// still sends it as an attachment.
	fileURL := appAPI + "/thread/" + tid + "/download-file?path=" + url.QueryEscape("/mnt/user-data/uploads/chart.html")
	for _, tc := range []struct{ disp, wantDisp, wantCSP string }{
		{"preview", "inline", "sandbox allow-scripts; default-src 'none'"},
		{"inline", "attachment", "sandbox; default-src 'none'"},
	} {
		r := s.do("POST", appAPI+"/download-url", token, map[string]any{"url": fileURL + "&disposition=" + tc.disp})
		if r.status != 200 {
			t.Fatalf("download-url: %d %s", r.status, r.body)
		}
		got := s.do("GET", r.json(t)["url"].(string), "", nil)
		if got.status != 200 || !strings.HasPrefix(got.header.Get("Content-Disposition"), tc.wantDisp) || !strings.HasPrefix(got.header.Get("Content-Security-Policy"), tc.wantCSP) ||
			!strings.Contains(got.header.Get("Content-Security-Policy"), "frame-ancestors") && tc.disp == "preview" {
			t.Errorf("disposition=%s: %d, Content-Disposition %q, CSP %q", tc.disp, got.status, got.header.Get("Content-Disposition"), got.header.Get("Content-Security-Policy"))
		}
	}

	for _, tc := range []struct {
		width, height int
		scheme        string
	}{{1440, 1000, "light"}, {375, 812, "dark"}} {
		t.Run(fmt.Sprintf("%d px %s", tc.width, tc.scheme), func(t *testing.T) {
			b := e2e.Start(t, 1440, 1000)
			emulateScheme(t, b, tc.scheme)
			uiLogin(b, s.base, e2eEmail, e2ePassword)
			b.SetViewport(tc.width, tc.height)
			b.Do("open the thread", chromedp.Navigate(s.base+"/#/thread/"+tid), chromedp.WaitVisible(chromedp.ID("message")))
			b.WaitTrue("two files", `document.querySelectorAll('.file-list li[data-path]').length === 2`, 10*time.Second)
			b.Do("listen to the frames", chromedp.Evaluate[chromedp.Void](`window.frameSaid = []; addEventListener('message', (e) => window.frameSaid.push(e.origin + ' ' + e.data))`))
			item := func(name string) string { return `.file-list li[data-path="/mnt/user-data/uploads/` + name + `"]` }
			// One preview at a time: an opening frame moves the page under
			// the next button, and a click at its old place would miss it.
			for i, name := range []string{"chart.html", "badge.svg"} {
				b.Do("preview "+name, chromedp.Evaluate[chromedp.Void](`document.querySelector('`+item(name)+` button.preview-toggle').scrollIntoView()`),
					chromedp.Click(chromedp.CSS(item(name)+" button.preview-toggle")))
				b.WaitTrue(name+"'s frame said something", fmt.Sprintf(`window.frameSaid.length === %d`, i+1), 15*time.Second)
			}
			said := e2e.Eval[string](b, "what the frames said", `window.frameSaid.sort().join('\n')`)
			if said != `null {"ran":true,"parent":"blocked","storage":"blocked","fetch":"blocked"}`+"\n"+`null {"svg":"ran"}` &&
				said != `null {"ran":true,"parent":"blocked","storage":"blocked","top":"blocked","fetch":"blocked"}`+"\n"+`null {"svg":"ran"}` {
				t.Errorf("the frames said:\n%s", said)
			}
			if got := e2e.Eval[string](b, "the frames", `[...document.querySelectorAll('.file-preview iframe.live-preview')].map(f => f.getAttribute('sandbox') + '|' + f.title + '|' + f.src.includes('disposition=preview')).sort().join(' ')`); got != "allow-scripts|Live preview of badge.svg|true allow-scripts|Live preview of chart.html|true" {
				t.Errorf("the frames: %q", got)
			}
			if got := e2e.Eval[string](b, "the page's route", `location.hash`); got != "#/thread/"+tid {
				t.Errorf("the preview navigated the page to %q", got)
			}
			if tc.width == 375 {
				noHorizontalOverflow(t, b, 375)
			}
			shoot(t, b, fmt.Sprintf("preview-%d-%s", tc.width, tc.scheme))
		})
	}
}

// leavingPage is an HTML file whose script, asked by the page, navigates
// its own frame: by setting location to a relative address (as a report's
// link to a page beside it does) or by clicking a link to another origin.
const leavingPage = `<!doctype html><html><body><p>A report</p><script>
addEventListener('message', (e) => {
  if (e.data === 'location') location.href = 'page2.html';
  if (e.data === 'link') { const a = document.createElement('a'); a.href = 'http://127.0.0.1:9/'; document.body.append(a); a.click(); }
});
parent.postMessage('shown', '*');
</script></body></html>`

// TestE2ELivePreviewStays: a live preview whose script navigates its
// frame does not leave the frame showing another document: the file is
// put back in a fresh frame; when it leaves again, a note with a button
// that shows it once more takes the frame's place, and the file shown
// by the button is put back as before.
func TestE2ELivePreviewStays(t *testing.T) {
	e2e.NeedChromium(t)
	s := e2eServer(t, nil)
	tid, token := apiThread(t, s, "Previews", "Leaving")
	if r := s.do("PUT", appAPI+"/thread/"+tid+"/put-file/report.html", token, []byte(leavingPage), "Content-Type", "application/octet-stream"); r.status != 200 {
		t.Fatalf("put: %d %s", r.status, r.body)
	}
	b := e2e.Start(t, 1440, 1000)
	uiLogin(b, s.base, e2eEmail, e2ePassword)
	b.Do("open the thread", chromedp.Navigate(s.base+"/#/thread/"+tid), chromedp.WaitVisible(chromedp.ID("message")))
	item := `.file-list li[data-path="/mnt/user-data/uploads/report.html"]`
	frame := `document.querySelector('` + item + ` .file-preview iframe.live-preview')`
	shown := `window.frameSaid.filter((s) => s === 'null shown').length`
	b.Do("listen to the frames", chromedp.Evaluate[chromedp.Void](`window.frameSaid = []; addEventListener('message', (e) => window.frameSaid.push(e.origin + ' ' + e.data))`))
	b.Do("preview the report", chromedp.Click(chromedp.CSS(item+" button.preview-toggle")))
	b.WaitTrue("the report shown", shown+` === 1`, 15*time.Second)

	b.Do("the report sets location", chromedp.Evaluate[chromedp.Void](frame+`.contentWindow.postMessage('location', '*')`))
	b.WaitTrue("the report shown again", shown+` === 2`, 15*time.Second)
	if got := e2e.Eval[string](b, "the frame", `[...document.querySelectorAll('`+item+` .file-preview iframe')].map((f) => f.className + ' ' + new URL(f.src).searchParams.get('disposition')).join(',')`); got != "live-preview preview" {
		t.Errorf("after the report navigated, the preview holds %q, want one live-preview frame of the file", got)
	}

	b.Do("the report follows a link", chromedp.Evaluate[chromedp.Void](frame+`.contentWindow.postMessage('link', '*')`))
	b.WaitText(item+" .file-preview .preview-left", "tried to open another page", 15*time.Second)
	if n := e2e.Eval[int](b, "frames", `document.querySelectorAll('`+item+` .file-preview iframe').length`); n != 0 {
		t.Errorf("%d frames beside the note, want none", n)
	}
	b.Do("show it again", chromedp.Click(chromedp.CSS(item+" .file-preview .preview-left button")))
	b.WaitTrue("the report shown once more", shown+` === 3`, 15*time.Second)
	b.Do("the report follows the link again", chromedp.Evaluate[chromedp.Void](frame+`.contentWindow.postMessage('link', '*')`))
	b.WaitTrue("the report put back", shown+` === 4`, 15*time.Second)
	if said := e2e.Eval[string](b, "what the frames said", `window.frameSaid.join('\n')`); said != strings.Repeat("null shown\n", 3)+"null shown" {
		t.Errorf("the frames said:\n%s", said)
	}
}

// TestE2EArtifactLivePreview: an SVG file a turn's code writes to the
// outputs shows live in its artifact card, as it does among the thread's
// files: the card's frame loads it for a preview (its script runs and
// reports), not as a download the sandboxed frame refuses, which left the
// card blank.
func TestE2EArtifactLivePreview(t *testing.T) {
	e2e.NeedChromium(t)
	agent := needDocker(t)
	s := e2eServer(t, map[string]string{"SANDBOX_BACKEND": "docker", "THREADBOX_AGENT_BIN": agent, "MODEL_PROVIDER": "runner"})
	tid, token := apiThread(t, s, "Badges", "Badge")
	svg := `<svg xmlns="http://www.w3.org/2000/svg" width="80" height="40"><rect width="80" height="40" fill="#c33"/>` +
		`<script>parent.postMessage(JSON.stringify({svg: 'ran'}), '*')</script></svg>`
	r := s.do("POST", appAPI+"/thread/"+tid+"/messages", token, map[string]any{
		"content": "```bash\ncat > /mnt/user-data/outputs/badge.svg <<'SVG'\n" + svg + "\nSVG\n```", "pgpt": map[string]any{"tools": []any{"code_execution"}}})
	if r.status != 200 {
		t.Fatalf("turn: %d %s", r.status, r.body)
	}
	b := e2e.Start(t, 1440, 1000)
	uiLogin(b, s.base, e2eEmail, e2ePassword)
	b.Do("listen to the frames", chromedp.Evaluate[chromedp.Void](`window.frameSaid = []; addEventListener('message', (e) => window.frameSaid.push(e.origin + ' ' + e.data))`))
	b.Do("open the thread", chromedp.Navigate(s.base+"/#/thread/"+tid), chromedp.WaitVisible(chromedp.ID("message")))
	card := `.artifact[data-name="badge.svg"]`
	b.WaitTrue("the card's frame", `!!document.querySelector('`+card+` iframe.live-preview')`, 20*time.Second)
	b.Do("show the card", chromedp.Evaluate[chromedp.Void](`document.querySelector('`+card+`').scrollIntoView()`))
	// The frame's ticket is asked for once it is in view.
	b.WaitTrue("the frame's ticket", `document.querySelector('`+card+` iframe').src !== ''`, 15*time.Second)
	if got := e2e.Eval[string](b, "the frame's address", `new URL(document.querySelector('`+card+` iframe').src).searchParams.getAll('disposition').join(',')`); got != "preview" {
		t.Errorf("the frame asks for disposition %q, want preview", got)
	}
	b.WaitTrue("the SVG's script ran in the card", `window.frameSaid.includes('null {"svg":"ran"}')`, 15*time.Second)
}
