package boxes

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"threadbox/domain/sandbox"
	"threadbox/infra/sandbox/hostdirs"
	"threadbox/infra/sandbox/slot"
)

// Pool keeps the warm sandboxes of a backend that can bind folders into a
// running sandbox: each is booted before any container needs it, over the
// empty subfolders of a slot (infra/sandbox/slot) under a pool folder, and
// a container claims it by having its folders bound onto the slot's,
// whence they propagate into the sandbox. It is safe for concurrent use.
type Pool[B Box] struct {
	set    *Set[B]
	dir    string
	layout Layout

	// warmUpWait is how long warmUp waits for the warm-up's end:
	// the command's timeout and defaultWarmUpGrace.
	warmUpWait time.Duration

	mu    sync.Mutex
	slots map[string]Slot // by the id its sandbox serves: the slot's name until claimed, then the container's
}

// Slot is the slot of one warm sandbox.
type Slot struct {
	Name string        // the id the sandbox was warmed as
	Dir  string        // the slot folder
	warm *sandbox.Spec // the Warm spec, until the sandbox is claimed
}

// Layout shapes the slots of a pool: Make creates the slot folder dir of
// a sandbox that binds mounts, Place names the folder under it where
// mount i of the sandbox's is bound, and Remove unmounts and deletes it.
type Layout interface {
	Make(dir string, mounts []sandbox.Mount) error
	Place(dir string, i int, m sandbox.Mount) string
	Remove(dir string) error
}

// subfolders is the layout of a runtime that binds each slot subfolder
// with rslave propagation: one empty subfolder per mount (slot.Make).
type subfolders struct{}

// Make creates the slot with a subfolder per mount.
func (subfolders) Make(dir string, mounts []sandbox.Mount) error { return slot.Make(dir, len(mounts)) }

// Place returns the subfolder of mount i.
func (subfolders) Place(dir string, i int, _ sandbox.Mount) string { return slot.Path(dir, i) }

// Remove unmounts and deletes the slot.
func (subfolders) Remove(dir string) error { return slot.Remove(dir) }

// NewPool returns an empty pool of set's sandboxes whose slots are made
// under dir, one empty subfolder per mount; it logs to set's logger.
func NewPool[B Box](set *Set[B], dir string) *Pool[B] {
	return NewPoolWith(set, dir, subfolders{})
}

// NewPoolWith returns an empty pool of set's sandboxes whose slots are
// made under dir by layout.
func NewPoolWith[B Box](set *Set[B], dir string, layout Layout) *Pool[B] {
	return &Pool[B]{set: set, dir: dir, layout: layout, warmUpWait: sandbox.WarmUpCommand.Timeout + defaultWarmUpGrace, slots: map[string]Slot{}}
}

// Slot returns the slot of the warm sandbox named name, held or not.
func (p *Pool[B]) Slot(name string) Slot {
	return Slot{Name: name, Dir: filepath.Join(p.dir, hostdirs.SafeID(name))}
}

// Hold records that sl serves id: a claimed warm sandbox found again.
func (p *Pool[B]) Hold(id string, sl Slot) {
	p.mu.Lock()
	p.slots[id] = sl
	p.mu.Unlock()
}

// IDs returns the ids the held slots serve.
func (p *Pool[B]) IDs() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Collect(maps.Keys(p.slots))
}

// Unclaimed returns the names of the held slots whose warm sandbox no
// container claimed yet.
func (p *Pool[B]) Unclaimed() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var names []string
	for _, sl := range p.slots {
		if sl.warm != nil {
			names = append(names, sl.Name)
		}
	}
	return names
}

// Dirs returns the folders of the held slots.
func (p *Pool[B]) Dirs() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	dirs := make([]string, 0, len(p.slots))
	for _, sl := range p.slots {
		dirs = append(dirs, sl.Dir)
	}
	return dirs
}

// Drop removes the slot that serves id, if any, and returns it: a warm
// sandbox is never used again once it stops. The slot of an unclaimed
// warm sandbox another process booted (id is its name) goes too.
func (p *Pool[B]) Drop(id string) (Slot, bool) {
	p.mu.Lock()
	sl, ok := p.slots[id]
	delete(p.slots, id)
	p.mu.Unlock()
	if !ok {
		sl = p.Slot(id)
		if _, err := os.Stat(sl.Dir); err != nil || !strings.HasPrefix(id, sandbox.WarmPrefix) {
			return Slot{}, false
		}
	}
	p.Remove(sl)
	return sl, true
}

// Stop ends id's sandbox under id's lock (Set.Stop) and drops its slot
// (Drop), even when the sandbox ended by itself; its files stay. It is
// the Stop of a backend with a warm pool whose sandboxes stop by their
// box's Kill.
func (p *Pool[B]) Stop(ctx context.Context, id string) error {
	defer p.set.Lock(id)()
	defer p.Drop(id)
	return p.set.Stop(ctx, id)
}

// Remove unmounts and deletes sl's folder, held or not.
func (p *Pool[B]) Remove(sl Slot) {
	if err := p.layout.Remove(sl.Dir); err != nil {
		p.set.log.Warn("warm slot not removed", "slot", sl.Name, "cause", err.Error())
	}
}

// Warm boots a warm sandbox named spec.ID with the first of boots, over
// the empty folders of a new slot (its layout's places) in place of the
// sources of spec's mounts, and runs sandbox.WarmUpCommand in it. A container
// whose limits, environment and folder targets are spec's can claim it. A
// sandbox whose agent does not report the warm-up's end in time is
// stopped with stop, the backend's Stop, and the next of boots tried (a
// backend's plainer way to boot, as a fresh boot is to a microVM restored
// from its template); when none is left Warm fails with ErrWarmUpLost. On
// an error nothing is left.
func (p *Pool[B]) Warm(ctx context.Context, spec sandbox.Spec, stop func(context.Context, string) error, boots ...func(context.Context, sandbox.Spec) (B, error)) error {
	if len(boots) == 0 {
		return fmt.Errorf("%s: warm %s: no way to boot it", p.set.name, spec.ID)
	}
	for i, boot := range boots {
		err := p.warm(ctx, spec, boot, stop)
		if !errors.Is(err, ErrWarmUpLost) || i == len(boots)-1 {
			return err
		}
		p.set.log.Warn("warm sandbox lost its warm-up command; it is booted the next way", "slot", spec.ID, "cause", err.Error())
	}
	return nil
}

// warm is one try of Warm, with boot.
func (p *Pool[B]) warm(ctx context.Context, spec sandbox.Spec, boot func(context.Context, sandbox.Spec) (B, error), stop func(context.Context, string) error) error {
	sl := p.Slot(spec.ID)
	sl.warm = &spec
	// Known before it exists, so that no Reconcile takes it for a stray.
	p.Hold(spec.ID, sl)
	if err := p.layout.Make(sl.Dir, spec.Mounts); err != nil {
		p.mu.Lock()
		delete(p.slots, spec.ID)
		p.mu.Unlock()
		return fmt.Errorf("%s: warm %s: %w: %w", p.set.name, spec.ID, sandbox.ErrUnavailable, err)
	}
	warm := spec
	warm.Mounts = slices.Clone(spec.Mounts)
	for i := range warm.Mounts {
		warm.Mounts[i].Source = p.layout.Place(sl.Dir, i, warm.Mounts[i])
	}
	if err := p.set.Ensure(ctx, warm, nil, boot); err != nil {
		p.Drop(spec.ID)
		return fmt.Errorf("%s: warm: %w", p.set.name, err)
	}
	if err := p.warmUp(ctx, spec.ID); err != nil {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		if serr := stop(sctx, spec.ID); serr != nil {
			p.set.log.Warn("warm sandbox whose warm-up hung not stopped", "slot", spec.ID, "cause", serr.Error())
		}
		p.Drop(spec.ID)
		return fmt.Errorf("%s: warm %s: %w: %w", p.set.name, spec.ID, sandbox.ErrUnavailable, err)
	}
	return nil
}

// lostWarmUpProbe lists every task in a sandbox whose agent lost its
// warm-up: its path, name, state, the kernel function it waits in and
// the system call it is in (its number first; "running" for a task on a
// CPU); then the interrupts each CPU took (a VM's timer and devices) and
// the load.
var lostWarmUpProbe = sandbox.Command{Dir: "/", Timeout: 10 * time.Second, Args: []string{"/bin/sh", "-c",
	`for t in /proc/[0-9]*/task/[0-9]*; do echo "$t $(cat $t/comm) $(sed 's/.*) //' $t/stat | cut -d' ' -f1) $(cat $t/wchan) $(cut -d' ' -f1 $t/syscall)"; done 2>/dev/null; cat /proc/interrupts /proc/loadavg 2>/dev/null`}}

// ErrWarmUpLost marks a Warm that failed because the sandbox's agent
// reported no end of the warm-up command in time.
var ErrWarmUpLost = errors.New("the agent reported no end of the warm-up command")

// defaultWarmUpGrace is how long after sandbox.WarmUpCommand's own timeout, which the
// agent enforces, the host still waits for the command's end to be
// reported.
const defaultWarmUpGrace = 20 * time.Second

// warmUp runs sandbox.WarmUpCommand in the warm sandbox name. A command that
// failed is logged only: the sandbox serves as well without it. An agent
// that reports no end within the command's timeout and defaultWarmUpGrace has
// lost it (seen in emulated VMs restored from their template) and
// would lose a user's command as well: that is the error, and no warm
// pool's refill waits on it for ever.
func (p *Pool[B]) warmUp(ctx context.Context, name string) error {
	bx, ok := p.set.Live(name)
	if !ok {
		return nil
	}
	wctx, cancel := context.WithTimeout(ctx, p.warmUpWait)
	defer cancel()
	res, err := bx.Agent().Exec(wctx, sandbox.WarmUpCommand)
	if err != nil && wctx.Err() != nil && ctx.Err() == nil {
		// What each of the sandbox's tasks waits on, for the log: run from
		// "/", so that a share that stopped answering does not hold it too.
		pctx, pcancel := context.WithTimeout(ctx, min(p.warmUpWait, 15*time.Second))
		probe, perr := bx.Agent().Exec(pctx, lostWarmUpProbe)
		pcancel()
		p.set.log.Warn("warm sandbox's agent lost its warm-up command", "slot", name,
			"tasks", string(probe.Stdout), "probe_error", fmt.Sprint(perr))
		return fmt.Errorf("%w within %s", ErrWarmUpLost, p.warmUpWait)
	}
	if err != nil || res.ExitCode != 0 {
		p.set.log.Warn("warm sandbox's warm-up command failed", "slot", name, "exit", res.ExitCode, "cause", fmt.Sprint(err))
	}
	return nil
}

// Claim makes the warm sandbox name serve the container spec.ID: spec's
// folders (or, with dirs and none, the container's prepared ones) are
// bound onto the slot's places for them, whence they reach the sandbox; then
// claimed, the backend's own part, runs before the box serves spec.ID.
// limits fills the zero limits of both specs before they are compared.
func (p *Pool[B]) Claim(ctx context.Context, name string, spec sandbox.Spec, dirs *hostdirs.Layout, limits sandbox.Limits, claimed func(B, Slot) error) error {
	fail := func(format string, a ...any) error {
		return fmt.Errorf("%s: claim %s: %w", p.set.name, name, fmt.Errorf(format, a...))
	}
	if spec.ID == "" || spec.ID == name {
		return fail("bad container id %q", spec.ID)
	}
	defer p.set.Lock(name)()
	defer p.set.Lock(spec.ID)()
	if _, ok := p.set.Live(spec.ID); ok {
		return fail("the sandbox of %s runs", spec.ID)
	}
	bx, live := p.set.Live(name)
	p.mu.Lock()
	sl, held := p.slots[name]
	p.mu.Unlock()
	if !live || !held || sl.warm == nil {
		return fail("%w: no unclaimed warm sandbox of that name", sandbox.ErrNotFound)
	}
	if dirs != nil {
		d, err := dirs.Prepare(ctx, spec.ID)
		if err != nil {
			return fail("%w", err)
		}
		if len(spec.Mounts) == 0 {
			spec.Mounts = d.Mounts()
		}
	}
	if spec.Limits.Or(limits) != sl.warm.Limits.Or(limits) || !slices.Equal(spec.Env, sl.warm.Env) {
		return fail("limits or environment differ from the warm sandbox's")
	}
	if !sandbox.SameTargets(spec.Mounts, sl.warm.Mounts) {
		return fail("folders differ from the warm sandbox's")
	}
	for i, m := range spec.Mounts {
		if err := slot.BindAt(p.layout.Place(sl.Dir, i, m), m.Source, m.ReadOnly); err != nil {
			return fail("%w", err)
		}
	}
	if err := claimed(bx, sl); err != nil {
		return fail("%w", err)
	}
	p.set.Take(name)
	p.set.Forget(name)
	sl.warm = nil
	p.mu.Lock()
	delete(p.slots, name)
	p.slots[spec.ID] = sl
	p.mu.Unlock()
	p.set.Put(spec.ID, bx)
	p.set.log.Info("warm sandbox claimed", "id", spec.ID, "slot", name)
	return nil
}

// NoWarmPool answers for a backend that cannot keep warm sandboxes: a
// backend embeds it for its warm pool methods.
type NoWarmPool struct {
	name, reason string
}

// WarmsNone returns the warm pool answers of the backend name, which keeps
// no warm sandboxes for reason.
func WarmsNone(name, reason string) NoWarmPool {
	return NoWarmPool{name: name, reason: reason}
}

// Warm is unsupported: the backend keeps no warm sandboxes.
func (n NoWarmPool) Warm(context.Context, sandbox.Spec) error {
	return fmt.Errorf("%s: warm pool: %w: %s", n.name, sandbox.ErrUnsupported, n.reason)
}

// Claim is unsupported: there are no warm sandboxes to claim.
func (n NoWarmPool) Claim(_ context.Context, name string, _ sandbox.Spec) error {
	return fmt.Errorf("%s: claim %s: %w: no warm pool", n.name, name, sandbox.ErrUnsupported)
}

// WarmSandboxes is unsupported: there are no warm sandboxes.
func (n NoWarmPool) WarmSandboxes(context.Context) ([]string, error) {
	return nil, fmt.Errorf("%s: warm sandboxes: %w: no warm pool", n.name, sandbox.ErrUnsupported)
}
