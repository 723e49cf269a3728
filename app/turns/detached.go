package turns

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"threadbox/app/messages"
	"threadbox/app/messages/wire"
	"threadbox/domain/fault"
	"threadbox/domain/id"
	"threadbox/domain/turn"
	"threadbox/domain/user"
)

// Detached turns. A chat turn runs in the server, apart from the
// request that started it: every event it produces is appended to the
// turn's log at once (in memory, for followers in this process) and stored
// in the database in small batches (for followers on any server, and after
// the turn ended). A client that goes away does not end the turn; its
// owner stops it (Stop). Followers pull from the log at their own pace: a
// slow one never slows the turn, and holds no buffer of its own. A failed
// turn's log ends with the failure's kind (domain/fault) and the message
// its client was told; the web layer maps the kind to a status.

// Why a detached turn's context ends.
var (
	errStopRequested = errors.New("the turn was stopped by its owner")
	// ErrServerStopping is the cause of a detached turn's context when the
	// server stops before the turn ended (StopDetached).
	ErrServerStopping = errors.New("the server is stopping")
	errThreadDeleted  = errors.New("the turn's thread was deleted")
)

// Timings of detached turns.
const (
	// flushEvery is how often a running turn's new events are stored.
	flushEvery = 50 * time.Millisecond
	// pollEvery is how often a follower of a turn running on another
	// server, and a running turn for a stop asked on another server,
	// look at the database.
	pollEvery = 250 * time.Millisecond
	// DefaultLogRetention is how long the log of an ended turn is kept
	// unless Deps say otherwise.
	DefaultLogRetention = 24 * time.Hour
)

// endEvent is the type of the last event of every turn's log: how it ended.
// Followers turn it into the stream's ending (nothing after message_stop,
// a stopped event, or an error event); it is never sent as it is.
const endEvent = "turn_end"

// StoppedEvent is the event that ends the stream of a stopped turn.
const StoppedEvent = "stopped"

// turnEnd is the data of endEvent. A failure is kept as its kind and the
// message its client was told, never as an HTTP status: the web layer's
// one error mapper answers both the same.
type turnEnd struct {
	State   turn.State `json:"state"`
	Kind    fault.Kind `json:"kind,omitempty"`    // a failure's kind
	Message string     `json:"message,omitempty"` // a failure's message
}

// err rebuilds a failure from its record.
func (e turnEnd) err() error {
	if e.State != turn.Failed {
		return nil
	}
	if e.Kind == "" {
		e.Kind = fault.Internal
	}
	return fault.New(e.Kind, e.Message)
}

// failure records a failed turn's error by its kind (messages.Fault).
func failure(err error) turnEnd {
	f := messages.Fault(err)
	return turnEnd{State: turn.Failed, Kind: fault.KindOf(f), Message: fault.MessageOf(f)}
}

// endOf records how a turn ended with err in the context ctx.
func endOf(ctx context.Context, err error) turnEnd {
	switch {
	case errors.Is(context.Cause(ctx), errStopRequested), errors.Is(context.Cause(ctx), errThreadDeleted):
		// A stop accepted while the turn ran ends it stopped, even when
		// its last step got through first.
		return turnEnd{State: turn.Stopped}
	case errors.Is(context.Cause(ctx), ErrServerStopping) && err != nil:
		return failure(fault.New(fault.Unavailable, "The server stopped while the turn ran; send the message again."))
	case err == nil:
		return turnEnd{State: turn.Done}
	}
	return failure(err)
}

// liveTurn is the log of a turn running in this process.
type liveTurn struct {
	rec    turn.Turn
	cancel context.CancelCauseFunc
	// maxBytes caps the bytes of the events the log keeps (LogTruncated).
	maxBytes int64

	mu sync.Mutex
	// events are the log's events not yet stored, and those stored since
	// the last flush dropped them: the first has number dropped+1. Older
	// ones are read from the database.
	events    []turn.Event
	dropped   int64         // the number of the last event no longer in memory
	last      int64         // the number of the last event appended
	stored    int64         // the number of the last event in the database
	bytes     int64         // the data bytes of the log so far
	truncated bool          // the log passed maxBytes and holds the marker
	changed   chan struct{} // closed (and replaced) when events grow or the turn ends
	done      bool
	end       turnEnd
	err       error // the turn's own error, for followers in this process
}

// LogTruncated is the event a turn's log holds once its events passed the
// log's cap in bytes (Deps.LogMaxBytes): after it the log keeps only
// the events that end the stream (message_delta, message_stop, stopped and
// how the turn ended). The turn itself goes on, and its stored message
// holds everything once it ends.
const LogTruncated = "threadbox_log_truncated"

// DefaultLogMaxBytes is the cap of a turn's log unless Deps say otherwise:
// far above what a turn's messages hold (each step's output is capped, and
// so is each tool result), but a turn streaming a command's output for
// hours stops growing its log there.
const DefaultLogMaxBytes = 16 << 20

// keptPastCap reports whether an event of type typ is logged even past
// the log's cap: the small events that end a stream.
func keptPastCap(typ string) bool {
	switch typ {
	case endEvent, StoppedEvent, wire.EventMessageDelta, wire.EventMessageStop:
		return true
	}
	return false
}

// Send appends a stream event to the log. It never waits for a follower.
func (l *liveTurn) Send(ev wire.Event) error {
	if ev.Type == wire.EventPing {
		return nil
	}
	data, err := json.Marshal(ev)
	if err != nil {
		return fmt.Errorf("turns: turn event: %w", err)
	}
	l.append(ev.Type, data)
	return nil
}

// append adds an event to the log, or past the cap the truncation marker
// once and then only the events that end the stream.
func (l *liveTurn) append(typ string, data []byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !keptPastCap(typ) && (l.truncated || l.maxBytes > 0 && l.bytes+int64(len(data)) > l.maxBytes) {
		if l.truncated {
			return
		}
		l.truncated = true
		typ = LogTruncated
		data, _ = json.Marshal(wire.Event{Type: LogTruncated})
	}
	l.last++
	l.bytes += int64(len(data))
	l.events = append(l.events, turn.Event{Seq: l.last, Type: typ, Data: data})
	close(l.changed)
	l.changed = make(chan struct{})
}

// since returns the events after seq after that are in memory, a channel
// closed at the next change, whether the log is complete, and stored,
// true when events after after were dropped from memory: they are read
// from the database. The end event is held back until it is stored (or
// its storing is over): a follower told the turn ended and following it
// again, on this server or another, finds the same end in the database.
func (l *liveTurn) since(after int64) (evs []turn.Event, changed <-chan struct{}, done, stored bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	after = max(after, 0)
	if after < l.dropped {
		return nil, l.changed, l.done, true
	}
	if i := after - l.dropped; i < int64(len(l.events)) {
		evs = append(evs, l.events[i:]...)
	}
	if n := len(evs); n > 0 && evs[n-1].Type == endEvent && evs[n-1].Seq > l.stored && !l.done {
		evs = evs[:n-1]
	}
	return evs, l.changed, l.done, false
}

// flush stores the events not stored yet, then drops every stored event
// from memory: a running turn holds only what the database does not have
// yet (at most the log's cap, while the database is unavailable).
func (s *Service) flush(ctx context.Context, l *liveTurn) error {
	l.mu.Lock()
	pending := l.events[l.stored-l.dropped:]
	l.mu.Unlock()
	if len(pending) == 0 {
		return nil
	}
	if err := s.d.Records.AppendTurnEvents(ctx, l.rec.ID(), pending); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.stored = pending[len(pending)-1].Seq
	l.events = slices.Clone(l.events[l.stored-l.dropped:])
	l.dropped = l.stored
	return nil
}

// detachedTurns are the turns running in this process.
type detachedTurns struct {
	mu   sync.Mutex
	live map[string]*liveTurn
	wg   sync.WaitGroup
	// stopping is set once the server stops (StopDetached): no turn
	// starts any more.
	stopping bool
}

func (d *detachedTurns) get(id string) *liveTurn {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.live[id]
}

// start adds a turn about to run to the set; false once the server is
// stopping, when the turn must not start: nothing would end it before
// the process exits.
func (d *detachedTurns) start(l *liveTurn) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.stopping {
		return false
	}
	if d.live == nil {
		d.live = map[string]*liveTurn{}
	}
	d.live[l.rec.ID()] = l
	d.wg.Add(1)
	return true
}

func (d *detachedTurns) drop(id string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.live, id)
}

// Detached is a turn to run in the server apart from the request that
// started it (Detach).
type Detached struct {
	// ThreadID is the thread the turn is of, P whose turn it is.
	ThreadID string
	P        user.Principal
	// Run runs the turn, sending its events to sink. Its context ends when
	// the turn's owner stops it, its thread is deleted or the server stops
	// (its cause is then ErrServerStopping).
	Run func(ctx context.Context, sink messages.Sink) error
	// Release is called once: when the turn's end is stored, before its
	// followers learn that it ended (a client told so may start the next
	// turn of the thread at once), or when Detach fails.
	Release func()
}

// Detach runs d in the server, apart from the request that started it,
// and returns the turn's id at once. Its events go to the turn's log as
// they happen (Follow reads them); it goes on when its client goes away,
// until it ends or its owner stops it (Stop). Once the server is stopping
// (StopDetached) no turn starts: Detach answers unavailable.
func (s *Service) Detach(ctx context.Context, d Detached) (string, error) {
	if s.d.Records == nil {
		d.Release()
		return "", fault.New(fault.Unavailable, "detached turns are not configured on this server")
	}
	rec, err := turn.New(id.New("trn"), d.ThreadID, d.P.OrgID, d.P.UserID, s.now())
	if err != nil {
		d.Release()
		return "", err
	}
	if err := s.d.Records.CreateTurn(ctx, rec); err != nil {
		d.Release()
		return "", fmt.Errorf("turns: store turn: %w", err)
	}
	runCtx, cancel := context.WithCancelCause(context.Background())
	l := &liveTurn{rec: rec, cancel: cancel, maxBytes: s.d.LogMaxBytes, changed: make(chan struct{})}
	if !s.detached.start(l) {
		cancel(ErrServerStopping)
		if err := s.d.Records.EndTurn(context.WithoutCancel(ctx), rec.End(turn.Failed, s.now())); err != nil {
			s.log.Error("turn end not stored", "turn", rec.ID(), "cause", err.Error())
		}
		d.Release()
		return "", fault.New(fault.Unavailable, "The server is stopping; send the message again.")
	}
	go func() {
		defer s.detached.wg.Done()
		defer cancel(nil)
		stopWatch := s.watch(runCtx, l)
		runErr := d.Run(runCtx, l)
		stopWatch()
		s.finish(runCtx, d.Release, l, runErr)
	}()
	return rec.ID(), nil
}

// watch stores the running turn's events every flushEvery and stops it
// when its owner asked so on another server; the returned function ends
// the watch and waits for it.
func (s *Service) watch(ctx context.Context, l *liveTurn) (stop func()) {
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		flush, poll := time.NewTicker(flushEvery), time.NewTicker(pollEvery)
		defer flush.Stop()
		defer poll.Stop()
		for {
			select {
			case <-quit:
				return
			case <-ctx.Done():
				return
			case <-flush.C:
				if err := s.flush(context.WithoutCancel(ctx), l); err != nil {
					s.log.Warn("turn events not stored yet", "turn", l.rec.ID(), "cause", err.Error())
				}
			case <-poll.C:
				rec, err := s.d.Records.Turn(ctx, l.rec.ThreadID(), l.rec.ID())
				switch {
				case err == nil && rec.StopRequested():
					l.cancel(errStopRequested)
				case fault.Is(err, fault.NotFound):
					// Its thread was deleted on another server.
					l.cancel(errThreadDeleted)
				}
			}
		}
	}()
	return func() {
		close(quit)
		<-done
	}
}

// finish ends a detached turn: every event stored, the record's end, the
// turn released (the chat gives its thread's turn lease back), and only
// then the end event, so that a client told the turn ended may start the
// next one at once (on any server); its followers learn of it once it is
// stored (since), so that one told the turn ended finds the same end on
// any server. Then the turn leaves this process's set and its followers
// read the database.
func (s *Service) finish(ctx context.Context, release func(), l *liveTurn, runErr error) {
	end := endOf(ctx, runErr)
	if end.State == turn.Stopped {
		stopped, _ := json.Marshal(wire.Event{Type: StoppedEvent})
		l.append(StoppedEvent, stopped)
	}
	dbctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	store := func() {
		for attempt := 0; ; attempt++ {
			err := s.flush(dbctx, l)
			if err == nil {
				return
			}
			if attempt == 5 || dbctx.Err() != nil {
				s.log.Error("turn events lost", "turn", l.rec.ID(), "cause", err.Error())
				return
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	store()
	if err := s.d.Records.EndTurn(dbctx, l.rec.End(end.State, s.now())); err != nil {
		s.log.Error("turn end not stored", "turn", l.rec.ID(), "cause", err.Error())
	}
	release()
	l.mu.Lock()
	l.end, l.err = end, runErr
	if end.State == turn.Stopped {
		l.err = nil
	}
	l.mu.Unlock()
	data, _ := json.Marshal(end)
	l.append(endEvent, data)
	store()
	l.mu.Lock()
	l.done = true
	close(l.changed)
	l.changed = make(chan struct{})
	l.mu.Unlock()
	s.detached.drop(l.rec.ID())
}

// wait waits until the turn's end is stored, or ctx ends.
func (l *liveTurn) wait(ctx context.Context) error {
	for {
		l.mu.Lock()
		done, changed := l.done, l.changed
		l.mu.Unlock()
		if done {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// EndThread ends the turn running in a thread about to be deleted, so
// that it does not go on without its thread (asking the model for the
// next step, booting the thread's sandbox again, storing what its thread
// no longer holds): a turn of this process is stopped and awaited, one on
// another server is asked to stop through the database (it also stops
// when it finds its record gone).
func (s *Service) EndThread(ctx context.Context, threadID string) error {
	if s.d.Records == nil {
		return nil
	}
	var mine []*liveTurn
	s.detached.mu.Lock()
	for _, l := range s.detached.live {
		if l.rec.ThreadID() == threadID {
			mine = append(mine, l)
		}
	}
	s.detached.mu.Unlock()
	for _, l := range mine {
		l.cancel(errThreadDeleted)
		if err := l.wait(ctx); err != nil {
			return fmt.Errorf("turns: the turn of thread %s did not end: %w", threadID, err)
		}
	}
	rec, err := s.d.Records.RunningTurn(ctx, threadID)
	switch {
	case fault.Is(err, fault.NotFound):
		return nil
	case err != nil:
		return err
	case s.detached.get(rec.ID()) == nil:
		return s.d.Records.RequestStop(ctx, rec.ID())
	}
	return nil
}

// Ending is how a followed turn ended.
type Ending struct {
	State turn.State
	// Err is a failed turn's error: the turn's own in the process that
	// ran it, else rebuilt from its log (its kind and message).
	Err error
}

// Held reports whether some server runs a turn of the thread a call is
// about: the chat's thread's turn lease is held (app/workspace).
type Held func(ctx context.Context) (bool, error)

// Follow replays the log of turn turnID of thread threadID after the
// event numbered after (0: from the start), then follows it live until it
// ends; send gets each stream event. The end itself is not sent: it is
// returned. A turn of another thread is not found; an after beyond the log
// replays nothing. A turn recorded as running while held says no server
// runs one (its server stopped or died) is ended here, as failed.
func (s *Service) Follow(ctx context.Context, threadID, turnID string, after int64, held Held, send func(turn.Event) error) (Ending, error) {
	if _, err := s.Turn(ctx, threadID, turnID); err != nil {
		return Ending{}, err
	}
	for {
		if err := ctx.Err(); err != nil {
			return Ending{}, err
		}
		var (
			evs     []turn.Event
			changed <-chan struct{}
			done    bool
			live    = s.detached.get(turnID)
		)
		inDB := live == nil
		if live != nil {
			evs, changed, done, inDB = live.since(after)
		}
		if inDB {
			var err error
			if evs, err = s.d.Records.TurnEvents(ctx, turnID, after, 500); err != nil {
				return Ending{}, err
			}
		}
		for _, ev := range evs {
			after = ev.Seq
			if ev.Type == endEvent {
				var end turnEnd
				if err := json.Unmarshal(ev.Data, &end); err != nil {
					return Ending{}, fmt.Errorf("turns: turn end: %w", err)
				}
				out := Ending{State: end.State, Err: end.err()}
				if live != nil {
					live.mu.Lock()
					if live.err != nil {
						out.Err = live.err
					}
					live.mu.Unlock()
				}
				return out, nil
			}
			if err := send(ev); err != nil {
				return Ending{}, err
			}
		}
		if len(evs) > 0 {
			continue
		}
		if live != nil {
			if done {
				// A follower past the end event (an after beyond the
				// log) replays nothing.
				live.mu.Lock()
				out := Ending{State: live.end.State, Err: live.err}
				live.mu.Unlock()
				return out, nil
			}
			select {
			case <-changed:
			case <-ctx.Done():
			}
			continue
		}
		// Nothing new in the database: the turn runs on another server,
		// or ran on one that stopped or died before its end was stored.
		rec, err := s.d.Records.Turn(ctx, threadID, turnID)
		if err != nil {
			return Ending{}, err
		}
		if rec.State() != turn.Running {
			// Its end was stored after the read above, or the follower
			// is past the end event (an after beyond the log): one more
			// read tells.
			if more, err := s.d.Records.TurnEvents(ctx, turnID, after, 1); err == nil && len(more) > 0 {
				continue
			}
			return Ending{State: rec.State()}, nil
		}
		if running, err := held(ctx); err == nil && !running && s.detached.get(turnID) == nil {
			return s.abandoned(ctx, rec, after+1), nil
		}
		select {
		case <-time.After(pollEvery):
		case <-ctx.Done():
		}
	}
}

// abandoned ends the record of a turn whose server stopped or died before
// it ended (no server runs a turn of its thread any more), with an end
// event numbered next.
func (s *Service) abandoned(ctx context.Context, rec turn.Turn, next int64) Ending {
	end := failure(fault.New(fault.Unavailable, "The server running this turn stopped before it ended; send the message again."))
	if data, err := json.Marshal(end); err == nil {
		_ = s.d.Records.AppendTurnEvents(context.WithoutCancel(ctx), rec.ID(), []turn.Event{{Seq: next, Type: endEvent, Data: data}})
	}
	_ = s.d.Records.EndTurn(context.WithoutCancel(ctx), rec.End(turn.Failed, s.now()))
	return Ending{State: turn.Failed, Err: end.err()}
}

// Turn returns the turn turnID of thread threadID (not found for a turn
// of another thread).
func (s *Service) Turn(ctx context.Context, threadID, turnID string) (turn.Turn, error) {
	if s.d.Records == nil {
		return turn.Turn{}, fault.New(fault.NotFound, "turn not found")
	}
	return s.d.Records.Turn(ctx, threadID, turnID)
}

// Stop stops a running turn of thread threadID: its running command is
// killed, what it produced is kept, and its log ends with a stopped event.
// Stopping a turn that ended changes nothing. A turn running on another
// server is asked to stop through the database.
func (s *Service) Stop(ctx context.Context, threadID, turnID string) (turn.Turn, error) {
	rec, err := s.Turn(ctx, threadID, turnID)
	if err != nil {
		return turn.Turn{}, err
	}
	if rec.State() != turn.Running {
		return rec, nil
	}
	if l := s.detached.get(turnID); l != nil {
		l.cancel(errStopRequested)
		return rec, nil
	}
	if err := s.d.Records.RequestStop(ctx, turnID); err != nil {
		return turn.Turn{}, err
	}
	return rec, nil
}

// Running returns the turn of thread threadID that runs now, on any server
// (not found when none does: a turn recorded as running while held says
// no server runs one is not, and its follower records its end).
func (s *Service) Running(ctx context.Context, threadID string, held Held) (turn.Turn, error) {
	if s.d.Records == nil {
		return turn.Turn{}, fault.New(fault.NotFound, "no turn runs in this thread")
	}
	rec, err := s.d.Records.RunningTurn(ctx, threadID)
	if err != nil {
		return turn.Turn{}, err
	}
	if s.detached.get(rec.ID()) == nil {
		if running, err := held(ctx); err == nil && !running {
			return turn.Turn{}, fault.New(fault.NotFound, "no turn runs in this thread")
		}
	}
	return rec, nil
}

// PruneTurns deletes the logs of turns that ended more than
// Deps.LogRetention ago, and reports how many; the chat's messages stay.
func (s *Service) PruneTurns(ctx context.Context) (int, error) {
	if s.d.Records == nil {
		return 0, nil
	}
	n, err := s.d.Records.PruneTurns(ctx, s.now().Add(-s.d.LogRetention))
	return int(n), err
}

// StopDetached waits, until ctx ends, for the turns running in this
// process to end (the server is stopping), then ends those still running
// (as failed: the server stopped) and waits a little for them to store
// their ends. From its call on no turn starts (Detach).
func (s *Service) StopDetached(ctx context.Context) {
	s.detached.mu.Lock()
	s.detached.stopping = true
	s.detached.mu.Unlock()
	done := make(chan struct{})
	go func() {
		s.detached.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return
	case <-ctx.Done():
	}
	s.detached.mu.Lock()
	for _, l := range s.detached.live {
		l.cancel(ErrServerStopping)
	}
	s.detached.mu.Unlock()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
	}
}
