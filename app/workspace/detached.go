package workspace

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"threadbox/app/messages"
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
// owner stops it (StopTurn). Followers pull from the log at their own
// pace: a slow one never slows the turn, and holds no buffer of its own.

// Why a detached turn's context ends.
var (
	errStopRequested  = errors.New("the turn was stopped by its owner")
	errServerStopping = errors.New("the server is stopping")
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
	// DefaultTurnLogRetention is how long the log of an ended turn is
	// kept unless Deps say otherwise.
	DefaultTurnLogRetention = 24 * time.Hour
)

// endEvent is the type of the last event of every turn's log: how it ended.
// Followers turn it into the stream's ending (nothing after message_stop,
// a stopped event, or an error event); it is never sent as it is.
const endEvent = "turn_end"

// StoppedEvent is the event that ends the stream of a stopped turn.
const StoppedEvent = "stopped"

// turnEnd is the data of endEvent.
type turnEnd struct {
	State  turn.State          `json:"state"`
	Kind   fault.Kind          `json:"kind,omitempty"`   // a failure's kind
	Status int                 `json:"status,omitempty"` // an internal failure's status
	Error  *messages.ErrorBody `json:"error,omitempty"`  // a failure as its client was told
}

// err rebuilds a failure from its record.
func (e turnEnd) err() error {
	if e.State != turn.Failed || e.Error == nil {
		return nil
	}
	if e.Kind != "" && e.Kind != fault.Internal {
		return fault.New(e.Kind, e.Error.Message)
	}
	return &messages.StatusError{Status: e.Status, Body: *e.Error}
}

// endOf records how a turn ended with err in the context ctx.
func endOf(ctx context.Context, err error) turnEnd {
	switch {
	case errors.Is(context.Cause(ctx), errStopRequested), errors.Is(context.Cause(ctx), errThreadDeleted):
		// A stop accepted while the turn ran ends it stopped, even when
		// its last step got through first.
		return turnEnd{State: turn.Stopped}
	case err == nil:
		return turnEnd{State: turn.Done}
	}
	status, body := messages.ErrorStatus(err)
	e := turnEnd{State: turn.Failed, Kind: fault.KindOf(err), Status: status, Error: &body}
	if e.Kind != fault.Internal {
		e.Error = &messages.ErrorBody{Type: body.Type, Message: fault.MessageOf(err)}
	}
	if errors.Is(context.Cause(ctx), errServerStopping) {
		e.Kind, e.Status, e.Error = fault.Unavailable, 503, &messages.ErrorBody{Type: "api_error", Message: "The server stopped while the turn ran; send the message again."}
	}
	return e
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
// log's cap in bytes (Deps.TurnLogMaxBytes): after it the log keeps only
// the events that end the stream (message_delta, message_stop, stopped and
// how the turn ended). The turn itself goes on, and its stored message
// holds everything once it ends.
const LogTruncated = "threadbox_log_truncated"

// DefaultTurnLogMaxBytes is the cap of a turn's log unless Deps say
// otherwise: far above what a turn's messages hold (each step's output is
// capped, and so is each tool result), but a turn streaming a command's
// output for hours stops growing its log there.
const DefaultTurnLogMaxBytes = 16 << 20

// keptPastCap reports whether an event of type typ is logged even past
// the log's cap: the small events that end a stream.
func keptPastCap(typ string) bool {
	switch typ {
	case endEvent, StoppedEvent, messages.EventMessageDelta, messages.EventMessageStop:
		return true
	}
	return false
}

// Send appends a stream event to the log. It never waits for a follower.
func (l *liveTurn) Send(ev messages.Event) error {
	if ev.Type == messages.EventPing {
		return nil
	}
	data, err := json.Marshal(ev)
	if err != nil {
		return fmt.Errorf("workspace: turn event: %w", err)
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
		data, _ = json.Marshal(messages.Event{Type: LogTruncated})
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
// from the database.
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
	if err := s.store.AppendTurnEvents(ctx, l.rec.ID(), pending); err != nil {
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
}

func (d *detachedTurns) get(id string) *liveTurn {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.live[id]
}

func (d *detachedTurns) put(l *liveTurn) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.live == nil {
		d.live = map[string]*liveTurn{}
	}
	d.live[l.rec.ID()] = l
}

func (d *detachedTurns) drop(id string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.live, id)
}

// Detach runs the turn in the server, apart from the request that started
// it, and returns its id at once. Its events go to the turn's log as they
// happen (FollowTurn reads them); it goes on when its client goes away,
// until it ends or its owner stops it (StopTurn).
func (t *Turn) Detach(ctx context.Context) (string, error) {
	s := t.s
	rec, err := turn.New(id.New("trn"), t.thread.ID(), t.p.OrgID, t.p.UserID, s.now())
	if err != nil {
		t.Abort()
		return "", err
	}
	if err := s.store.CreateTurn(ctx, rec); err != nil {
		t.Abort()
		return "", fmt.Errorf("workspace: store turn: %w", err)
	}
	runCtx, cancel := context.WithCancelCause(context.Background())
	l := &liveTurn{rec: rec, cancel: cancel, maxBytes: s.d.TurnLogMaxBytes, changed: make(chan struct{})}
	s.detached.put(l)
	s.detached.wg.Add(1)
	go func() {
		defer s.detached.wg.Done()
		defer cancel(nil)
		// The thread's turn lease is held until the end is stored: a
		// follower on another server takes a running record without a
		// lease for a turn whose server died.
		defer t.Abort()
		stopWatch := s.watch(runCtx, l)
		_, runErr := t.run(runCtx, l)
		stopWatch()
		s.finish(runCtx, t, l, runErr)
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
				rec, err := s.store.Turn(ctx, l.rec.ThreadID(), l.rec.ID())
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
// thread's turn lease given back, and only then the end event, so that a
// client told the turn ended may start the next one at once (on any
// server); then the turn leaves this process's set and its followers read
// the database.
func (s *Service) finish(ctx context.Context, t *Turn, l *liveTurn, runErr error) {
	end := endOf(ctx, runErr)
	if end.State == turn.Stopped {
		stopped, _ := json.Marshal(messages.Event{Type: StoppedEvent})
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
	if err := s.store.EndTurn(dbctx, l.rec.End(end.State, s.now())); err != nil {
		s.log.Error("turn end not stored", "turn", l.rec.ID(), "cause", err.Error())
	}
	t.Abort()
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

// endThreadTurns ends the turn running in a thread about to be deleted,
// so that it does not go on without its thread (asking the model for the
// next step, booting the thread's sandbox again, storing what its thread
// no longer holds): a turn of this process is stopped and awaited, one on
// another server is asked to stop through the database (it also stops
// when it finds its record gone).
func (s *Service) endThreadTurns(ctx context.Context, threadID string) error {
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
			return fmt.Errorf("workspace: the turn of thread %s did not end: %w", threadID, err)
		}
	}
	rec, err := s.store.RunningTurn(ctx, threadID)
	switch {
	case fault.Is(err, fault.NotFound):
		return nil
	case err != nil:
		return err
	case s.detached.get(rec.ID()) == nil:
		return s.store.RequestStop(ctx, rec.ID())
	}
	return nil
}

// TurnEnding is how a followed turn ended.
type TurnEnding struct {
	State turn.State
	// Err is a failed turn's error: the turn's own in the process that
	// ran it, else rebuilt from its log as its client was told it.
	Err error
}

// FollowTurn replays the log of a turn of one of the caller's threads
// after the event numbered after (0: from the start), then follows it
// live until it ends; send gets each stream event. The end itself is not
// sent: it is returned. A turn of another user or thread is not found; an
// after beyond the log replays nothing.
func (s *Service) FollowTurn(ctx context.Context, p user.Principal, threadID, turnID string, after int64, send func(turn.Event) error) (TurnEnding, error) {
	th, err := s.store.Thread(ctx, p.OrgID, p.UserID, threadID)
	if err != nil {
		return TurnEnding{}, err
	}
	if _, err := s.store.Turn(ctx, th.ID(), turnID); err != nil {
		return TurnEnding{}, err
	}
	for {
		if err := ctx.Err(); err != nil {
			return TurnEnding{}, err
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
			if evs, err = s.store.TurnEvents(ctx, turnID, after, 500); err != nil {
				return TurnEnding{}, err
			}
		}
		for _, ev := range evs {
			after = ev.Seq
			if ev.Type == endEvent {
				var end turnEnd
				if err := json.Unmarshal(ev.Data, &end); err != nil {
					return TurnEnding{}, fmt.Errorf("workspace: turn end: %w", err)
				}
				out := TurnEnding{State: end.State, Err: end.err()}
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
				return TurnEnding{}, err
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
				out := TurnEnding{State: live.end.State, Err: live.err}
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
		rec, err := s.store.Turn(ctx, th.ID(), turnID)
		if err != nil {
			return TurnEnding{}, err
		}
		if rec.State() != turn.Running {
			// Its end was stored after the read above, or the follower
			// is past the end event (an after beyond the log): one more
			// read tells.
			if more, err := s.store.TurnEvents(ctx, turnID, after, 1); err == nil && len(more) > 0 {
				continue
			}
			return TurnEnding{State: rec.State()}, nil
		}
		if held, err := s.turnHeld(ctx, th.ID()); err == nil && !held && s.detached.get(turnID) == nil {
			return s.abandoned(ctx, rec, after+1), nil
		}
		select {
		case <-time.After(pollEvery):
		case <-ctx.Done():
		}
	}
}

// turnHeld reports whether some server holds the thread's turn lease.
func (s *Service) turnHeld(ctx context.Context, threadID string) (bool, error) {
	mine, other, err := s.d.Leases.Holds(ctx, turnLease(threadID))
	return mine || other, err
}

// abandoned ends the record of a turn whose server stopped or died before
// it ended (nobody holds its thread's turn lease any more), with an end
// event numbered next.
func (s *Service) abandoned(ctx context.Context, rec turn.Turn, next int64) TurnEnding {
	end := turnEnd{State: turn.Failed, Kind: fault.Unavailable, Status: 503,
		Error: &messages.ErrorBody{Type: "api_error", Message: "The server running this turn stopped before it ended; send the message again."}}
	if data, err := json.Marshal(end); err == nil {
		_ = s.store.AppendTurnEvents(context.WithoutCancel(ctx), rec.ID(), []turn.Event{{Seq: next, Type: endEvent, Data: data}})
	}
	_ = s.store.EndTurn(context.WithoutCancel(ctx), rec.End(turn.Failed, s.now()))
	return TurnEnding{State: turn.Failed, Err: end.err()}
}

// Turn returns a turn of one of the caller's threads (not found for a
// turn of another user or thread).
func (s *Service) Turn(ctx context.Context, p user.Principal, threadID, turnID string) (turn.Turn, error) {
	th, err := s.store.Thread(ctx, p.OrgID, p.UserID, threadID)
	if err != nil {
		return turn.Turn{}, err
	}
	return s.store.Turn(ctx, th.ID(), turnID)
}

// StopTurn stops a running turn of one of the caller's threads: its
// running command is killed, what it produced is kept, and its log ends
// with a stopped event. Stopping a turn that ended changes nothing. A turn
// running on another server is asked to stop through the database.
func (s *Service) StopTurn(ctx context.Context, p user.Principal, threadID, turnID string) (turn.Turn, error) {
	th, err := s.store.Thread(ctx, p.OrgID, p.UserID, threadID)
	if err != nil {
		return turn.Turn{}, err
	}
	rec, err := s.store.Turn(ctx, th.ID(), turnID)
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
	if err := s.store.RequestStop(ctx, turnID); err != nil {
		return turn.Turn{}, err
	}
	return rec, nil
}

// RunningTurn returns the turn of one of the caller's threads that runs
// now, on any server (not found when none does).
func (s *Service) RunningTurn(ctx context.Context, p user.Principal, threadID string) (turn.Turn, error) {
	th, err := s.store.Thread(ctx, p.OrgID, p.UserID, threadID)
	if err != nil {
		return turn.Turn{}, err
	}
	rec, err := s.store.RunningTurn(ctx, th.ID())
	if err != nil {
		return turn.Turn{}, err
	}
	if s.detached.get(rec.ID()) == nil {
		if held, err := s.turnHeld(ctx, th.ID()); err == nil && !held {
			// Its server died: a follower (FollowTurn) records its end.
			return turn.Turn{}, fault.New(fault.NotFound, "no turn runs in this thread")
		}
	}
	return rec, nil
}

// PruneTurns deletes the logs of turns that ended more than
// Deps.TurnLogRetention ago; their messages stay.
func (s *Service) PruneTurns(ctx context.Context) (int64, error) {
	return s.store.PruneTurns(ctx, s.now().Add(-s.d.TurnLogRetention))
}

// StopDetached waits, until ctx ends, for the turns running in this
// process to end (the server is stopping), then ends those still running
// (as failed: the server stopped) and waits a little for them to store
// their ends.
func (s *Service) StopDetached(ctx context.Context) {
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
		l.cancel(errServerStopping)
	}
	s.detached.mu.Unlock()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
	}
}
