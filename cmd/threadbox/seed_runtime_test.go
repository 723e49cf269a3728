package main

import (
	"context"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
)

// TestSeedRuntime imports, inside a real Docker sandbox, every runtime
// library of the seeds that the offline image provides, and runs the
// command-line tools they need (unrar, wkhtmltopdf through pdfkit, img2pdf
// on a generated image). The libraries Debian bookworm does not package
// (docs/sandbox.md) are checked to be missing, so the document stays true.
// The cell runs under code_execution_20250522, the Python-only tool, through
// the official SDK.
func TestSeedRuntime(t *testing.T) {
	bin := needDocker(t)
	s, fake := modelServer(t, "", "anthropic", map[string]string{"SANDBOX_BACKEND": "docker", "THREADBOX_AGENT_BIN": bin})
	tok := s.bootstrap("acme", "admin@acme.test")
	cl := msgClient(s, tok)
	code := `import importlib, io, subprocess
present = ["numpy", "pandas", "scipy", "sklearn", "statsmodels", "matplotlib", "seaborn", "openpyxl",
    "xlsxwriter", "xlrd", "PIL", "docx", "pypdf", "pdfminer", "reportlab", "sympy", "mpmath", "tqdm",
    "dateutil", "pytz", "joblib", "lxml", "pdfkit", "img2pdf"]
for m in present:
    importlib.import_module(m)
for m in ["pptx", "pdfplumber", "pyarrow", "pypdfium2", "pdf2image", "tabula"]:
    try:
        importlib.import_module(m)
        print("unexpected", m)
    except ImportError:
        print("missing", m)
import pdfkit, img2pdf
from PIL import Image
pdfkit.from_string("<h1>seed</h1>", "page.pdf")
buf = io.BytesIO()
Image.new("RGB", (8, 8), "red").save(buf, "PNG")
print("pdfkit", open("page.pdf", "rb").read(5), "img2pdf", img2pdf.convert(buf.getvalue())[:5])
print("unrar", subprocess.run(["unrar"], capture_output=True, text=True).returncode is not None)
print("imported", len(present))
`
	fake.Push(steps(pyStep(code)), textStep("checked"))
	tools := []anthropic.ToolUnionParam{{OfCodeExecutionTool20250522: &anthropic.CodeExecutionTool20250522Param{}}}
	msg, err := cl.Messages.New(context.Background(), msgParams("seed-runtime", userText("check the runtime"), tools...))
	if err != nil {
		t.Fatal(err)
	}
	r := pyResult(t, msg.Content, 0)
	want := "missing pptx\nmissing pdfplumber\nmissing pyarrow\nmissing pypdfium2\nmissing pdf2image\nmissing tabula\n" +
		"pdfkit b'%PDF-' img2pdf b'%PDF-'\nunrar True\nimported 24\n"
	if r.ReturnCode != 0 || r.Stdout != want {
		t.Fatalf("cell: return code %d\nstdout:\n%s\nstderr:\n%s", r.ReturnCode, r.Stdout, r.Stderr)
	}
	if up := lastUpstream(t, fake, 2); strings.Contains(up, `"name":"bash_code_execution"`) {
		t.Fatalf("the Python-only tool gave the model bash: %s", up)
	}
}
