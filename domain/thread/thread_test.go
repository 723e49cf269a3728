package thread

import (
	"strings"
	"testing"
	"time"
)

func TestThreadRules(t *testing.T) {
	now := time.Now()
	th, err := New("thr_1", "org", "prj", "usr", "  ", now)
	if err != nil || th.Title() != "New thread" || th.ContainerID() != "thr_1" {
		t.Fatalf("default title: %v %q", err, th.Title())
	}
	for _, tc := range []struct {
		title string
		ok    bool
	}{{"Plot sales", true}, {"", false}, {strings.Repeat("x", 501), false}} {
		if _, err := th.Retitle(tc.title, now); (err == nil) != tc.ok {
			t.Errorf("%q: %v", tc.title, err)
		}
	}
	if !th.AccessibleBy("org", "usr") || th.AccessibleBy("org", "other") || th.AccessibleBy("other", "usr") {
		t.Fatal("access")
	}
	if _, err := New("", "org", "prj", "usr", "x", now); err == nil {
		t.Fatal("missing id accepted")
	}
	m, err := NewMessage("msg_1", "thr_1", Assistant, []byte("[]"), false, now)
	if err != nil || m.Complete() {
		t.Fatal(err)
	}
	if f := m.Finish([]byte(`[{"type":"text","text":"x"}]`), nil); !f.Complete() {
		t.Fatal("finish")
	}
	if _, err := NewMessage("msg_2", "thr_1", "system", []byte("[]"), true, now); err == nil {
		t.Fatal("bad role accepted")
	}
}

func TestProposeTitle(t *testing.T) {
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	long := "Compare the monthly revenue of every region over the last three fiscal years please"
	tests := []struct {
		name, title, text, want string
	}{
		{"first line", "", "Plot monthly sales\nby region", "Plot monthly sales"},
		{"spaces folded", "", "  Plot   monthly\tsales  ", "Plot monthly sales"},
		{"code fence skipped", "", "```python\nprint(1)\n```", "print(1)"},
		{"long cut at a word", "", long, "Compare the monthly revenue of every region over the last…"},
		{"chosen title kept", "Q3 numbers", "Plot monthly sales", "Q3 numbers"},
		{"nothing to take", "", "  \n ", DefaultTitle},
		{"heading marks dropped", "", "## Sales check\nPlease look", "Sales check"},
		{"closing hashes dropped", "", "# Sales check ##", "Sales check"},
		{"strong and emphasis", "", "**Plot** the _monthly_ sales", "Plot the monthly sales"},
		{"snake_case kept", "", "Fix load_data_file in app", "Fix load_data_file in app"},
		{"multiplication kept", "", "What is 2*3*4", "What is 2*3*4"},
		{"link text kept", "", "Read [the report](https://example.test/r) again", "Read the report again"},
		{"inline code", "", "Why does `df.plot()` fail", "Why does df.plot() fail"},
		{"list and task markers", "", "- [ ] Check the totals", "Check the totals"},
		{"numbered item", "", "1. Load the file", "Load the file"},
		{"quote", "", "> Summarize this", "Summarize this"},
		{"rule skipped", "", "---\nNext steps", "Next steps"},
		{"only marks", "", "##\n**Sales**", "Sales"},
		{"NUL and controls dropped", "", "Plot\x00 sales\x1b[1m", "Plot sales[1m"},
		{"bytes not UTF-8 dropped", "", "caf\xe9 sales", "caf sales"},
		{"only a NUL", "", "\x00", DefaultTitle},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			th, err := New("thr_1", "org_1", "prj_1", "usr_1", tt.title, now)
			if err != nil {
				t.Fatal(err)
			}
			if got := th.ProposeTitle(tt.text, now).Title(); got != tt.want {
				t.Fatalf("title %q, want %q", got, tt.want)
			}
		})
	}
}

func TestWriteTitle(t *testing.T) {
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	const proposed = "Plot monthly sales"
	tests := []struct {
		name, title, written, want string
	}{
		{"written replaces proposed", proposed, "Monthly sales chart", "Monthly sales chart"},
		{"quotes and period dropped", proposed, "\"Monthly sales chart.\"", "Monthly sales chart"},
		{"curly quotes dropped", proposed, "“Monthly sales”", "Monthly sales"},
		{"markdown dropped", proposed, "## **Monthly** sales", "Monthly sales"},
		{"first line only", proposed, "Monthly sales\nThis title sums it up", "Monthly sales"},
		{"empty keeps proposed", proposed, "  \n", proposed},
		{"only quotes keeps proposed", proposed, "\"\"", proposed},
		{"renamed since kept", "Q3 numbers", "Monthly sales chart", "Q3 numbers"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			th, err := New("thr_1", "org_1", "prj_1", "usr_1", tt.title, now)
			if err != nil {
				t.Fatal(err)
			}
			if got := th.WriteTitle(proposed, tt.written, now).Title(); got != tt.want {
				t.Fatalf("title %q, want %q", got, tt.want)
			}
		})
	}
}
