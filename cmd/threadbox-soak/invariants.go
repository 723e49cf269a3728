package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
)

// outcome is what the end of a run found, the input of the invariants.
type outcome struct {
	// poolSlack is how many more open files the server may keep at the
	// end than at the start for idle database connections (poolSlack).
	poolSlack   int
	warmPool    int      // the server's SANDBOX_WARM_POOL
	peakWarm    int      // the most unclaimed warm sandboxes one sample saw
	lost        []string // acknowledged writes missing or changed
	running     []string // threads with a turn still running at the end
	undesigned  []string // errors outside the designed ones (a sample)
	nUndesign   int
	refused     []string // requests the strict fake upstream refused
	baseline    sample   // host resources before the load
	final       sample   // after the load, the clean-up and the sweeps
	procBase    sample   // the last threadbox process's own baseline
	rssHalf     []int64  // RSS samples of the last half of the run (of the process that served longest in it)
	threadsHalf []int    // that process's OS thread counts at the same samples
	sigterm     []string // SIGTERMs that did not stop threadbox within its grace
	left        []string // what the soak had to remove after threadbox stopped
	repl        replTally
}

// check is one invariant and whether it held.
type check struct {
	name   string
	held   bool
	detail string
}

// Slack allowed for the process's own figures: the Go runtime keeps
// parked OS threads, and a pool may keep a database connection more.
const (
	threadSlack = 8
	fdSlack     = 4
	rssSlack    = 16 << 20
)

// invariants evaluates every invariant of the run.
func invariants(o outcome) []check {
	var cs []check
	add := func(name string, held bool, format string, a ...any) {
		cs = append(cs, check{name, held, fmt.Sprintf(format, a...)})
	}
	add("no acknowledged write lost", len(o.lost) == 0, "%d lost%s", len(o.lost), first(o.lost))
	add("REPL state held by users survives every graceful fault", len(o.repl.lost) == 0,
		"%d reads found their value, %d lost where the design allows (a fresh-start line, a failed request before, the idle stop of a files-only backend), %d lost otherwise%s",
		o.repl.kept, o.repl.fresh, len(o.repl.lost), first(o.repl.lost))
	add("no turn left running", len(o.running) == 0, "%d running%s", len(o.running), first(o.running))
	add("no error outside the designed ones", o.nUndesign == 0, "%d%s", o.nUndesign, first(o.undesigned))
	add("no request the providers refuse", len(o.refused) == 0, "%d refused by the strict upstream%s", len(o.refused), first(o.refused))
	b, f := o.baseline, o.final
	add("containers back to baseline", f.containers <= b.containers, "%d → %d", b.containers, f.containers)
	add("warm pool within its size", f.warm <= o.warmPool && o.peakWarm <= o.warmPool,
		"%d unclaimed warm sandboxes at the end, at most %d at once (every 2 s, across restarts), pool of %d", f.warm, o.peakWarm, o.warmPool)
	add("mounts back to baseline", f.mounts <= b.mounts, "%d → %d", b.mounts, f.mounts)
	add("loop devices back to baseline", f.loops <= b.loops, "%d → %d", b.loops, f.loops)
	add("container folders and disk images back to baseline", f.entries <= b.entries, "%d → %d%s", b.entries, f.entries, first(newNames(b.entryNames, f.entryNames)))
	add("disk under DATA_DIR/{containers,disks,run} back to baseline", f.diskBytes <= b.diskBytes+256<<10,
		"%s → %s (slack 256 KiB: ext4 folders do not shrink)", kib(b.diskBytes), kib(f.diskBytes))
	p := o.procBase
	held, desc := threadsBounded(p.threads, f.threads, o.threadsHalf)
	add("threadbox OS threads back to baseline or at their plateau", held, "%s", desc)
	add("threadbox open fds back to baseline", f.fds <= p.fds+fdSlack+o.poolSlack, "%d → %d (slack %d, and %d for idle database connections)", p.fds, f.fds, fdSlack, o.poolSlack)
	grew, desc := rssGrowth(o.rssHalf)
	add("RSS without growth over the last half", !grew, "%s", desc)
	add("SIGTERM stops threadbox within its grace", len(o.sigterm) == 0, "%d did not%s", len(o.sigterm), first(o.sigterm))
	add("nothing left after threadbox stopped", len(o.left) == 0, "%s", orNone(o.left))
	return cs
}

// threadsBounded judges threadbox's OS threads at the end: back within
// the slack of its baseline, or no more than the plateau the load reached
// in the first half of the run's last half. The Go runtime never ends an
// idle OS thread: it starts one for each goroutine blocked in a system
// call (a file sync, a SQLite write) beyond GOMAXPROCS and keeps it parked
// after, so a busy run ends with the most such calls it ever had at once;
// a leak keeps rising instead.
func threadsBounded(base, final int, half []int) (bool, string) {
	if final <= base+threadSlack {
		return true, fmt.Sprintf("%d → %d (slack %d)", base, final, threadSlack)
	}
	if len(half) < 8 {
		return false, fmt.Sprintf("%d → %d (slack %d; %d samples of one process: too few to see a plateau)", base, final, threadSlack, len(half))
	}
	h := len(half) / 2
	plateau := slices.Max(half[:h])
	later := max(slices.Max(half[h:]), final)
	return later <= plateau, fmt.Sprintf("%d → %d, past the slack of %d: at most %d in the first half of the run's last half, %d after (the Go runtime keeps the threads of blocking calls parked; a leak keeps rising)", base, final, threadSlack, plateau, later)
}

// rssGrowth compares the mean RSS of the second half of the samples with
// the first half's (the last quarter of the run with the third, when one
// process served the whole last half).
func rssGrowth(s []int64) (bool, string) {
	if len(s) < 8 {
		return false, fmt.Sprintf("%d samples of one process: too few to judge", len(s))
	}
	mean := func(xs []int64) int64 {
		var t int64
		for _, x := range xs {
			t += x
		}
		return t / int64(len(xs))
	}
	h := len(s) / 2
	a, b := mean(s[:h]), mean(s[h:])
	grew := b-a > rssSlack && b-a > a/5
	return grew, fmt.Sprintf("mean %s in the first half of the samples, %s in the second (%d samples of one process in the run's last half; limit +%s and +20%%)", kib(a), kib(b), len(s), kib(rssSlack))
}

func first(xs []string) string {
	if len(xs) == 0 {
		return ""
	}
	more := ""
	if len(xs) > 1 {
		more = fmt.Sprintf(" (+%d more)", len(xs)-1)
	}
	return ": " + xs[0] + more
}

func orNone(xs []string) string {
	if len(xs) == 0 {
		return "nothing"
	}
	return strings.Join(xs, ", ")
}

func kib(b int64) string {
	if b >= 10<<20 {
		return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20))
	}
	return fmt.Sprintf("%d KiB", b>>10)
}

// printChecks prints the invariants as a table and reports whether all held.
func printChecks(w io.Writer, cs []check) bool {
	ok := true
	fmt.Fprintln(w, "| invariant | held | detail |")
	fmt.Fprintln(w, "|---|---|---|")
	for _, c := range cs {
		h := "yes"
		if !c.held {
			h, ok = "**NO**", false
		}
		fmt.Fprintf(w, "| %s | %s | %s |\n", c.name, h, strings.ReplaceAll(c.detail, "|", "\\|"))
	}
	return ok
}

// newNames returns the names of after that are not in before.
func newNames(before, after []string) []string {
	var out []string
	for _, n := range after {
		if !slices.Contains(before, n) {
			out = append(out, n)
		}
	}
	return out
}
