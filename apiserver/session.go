package apiserver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"

	"github.com/paxlock/paxlock/client/session"
	"github.com/paxlock/paxlock/client/wire"
)

// Session timing and bounds.
const (
	// dialTimeout bounds opening a namespace's session, handshake
	// included.
	dialTimeout = 10 * time.Second
	// heartbeatEvery keeps an idle session open (the node closes a client
	// connection idle for idle_timeout, 2 minutes by default).
	heartbeatEvery = 20 * time.Second
	// maxQueued bounds the bytes waiting to go into the node; past it a
	// call is answered RESOURCE_EXHAUSTED.
	maxQueued = 8 << 20
	// watchBuffer is how many events a watch keeps for a stream that is
	// slow to take them; past it the stream ends RESOURCE_EXHAUSTED.
	watchBuffer = 64
)

// nsSession is one namespace's session into the node: an in-process
// client connection (Node.ServeLocal) authenticated with SCRAM as the
// namespace's API client (clientKeyOf). Calls, waits and watches are
// multiplexed on it by request, wait and watch id; their maps are guarded
// by the session's send-queue lock, so that recording a call and queuing
// its frame cost one lock.
type nsSession struct {
	ns     string
	lane   laneKey  // the calls it carries (lanes.go)
	holds  *nsHolds // the namespace's Holds streams, which its Lost pushes go to
	client uint64   // the namespace's API client id (wire.ClientIDOf(clientKeyOf(ns)))
	ready  chan struct{}
	err    error         // why the session could not be opened; set before ready closes
	sc     *session.Conn // set before ready closes, when err is nil

	// under sc.Lock
	nextReq   uint64
	nextWatch uint64
	calls     map[uint64]chan wire.Response
	waits     map[uint64]chan wire.Granted
	watches   map[uint64]*watchSink
	// epochs are the groups' master epochs of the latest view the node
	// pushed (SubscribeView), nil before the first; viewed is closed
	// when the first arrives.
	epochs []uint64
	viewed chan struct{}
	// masters are the groups' masters' node ids in that view (0: none),
	// for the routing hints; read without the lock.
	masters atomic.Pointer[[]uint32]
	// inflight, nwaits, nwatches and nprefix count the calls waiting for
	// their answer, the blocked acquires, the watches and the WatchPrefix
	// streams on the session (as Service.open picks it for them: use),
	// which the node bounds per connection (lanes.go, Pools).
	inflight, nwaits, nwatches, nprefix atomic.Int64
}

// watchSink is where a watch's events go. A watch lives in its master's
// memory: when the view says the master of its group changed since it
// was registered (epoch), or the master pushes EventMoved (it dropped the
// watch), rewatch is signalled and the watch registers again. overflowed is set (under the session's lock) when the stream
// fell watchBuffer events behind.
type watchSink struct {
	ch         chan wire.WatchEvent
	rewatch    chan struct{} // cap 1
	group      int
	epoch      uint64
	overflowed bool
}

// newSession returns a session of lane, not yet open, whose Lost pushes
// go to holds.
func newSession(lane laneKey, holds *nsHolds) *nsSession {
	return &nsSession{
		ns:      lane.ns,
		lane:    lane,
		holds:   holds,
		client:  wire.ClientIDOf(clientKeyOf(lane.ns)),
		ready:   make(chan struct{}),
		calls:   make(map[uint64]chan wire.Response),
		waits:   make(map[uint64]chan wire.Granted),
		watches: make(map[uint64]*watchSink),
		viewed:  make(chan struct{}),
	}
}

// pipeAddr names the ends of an in-process connection.
type pipeAddr string

func (a pipeAddr) Network() string { return "pipe" }
func (a pipeAddr) String() string  { return string(a) }

// pipeEnd is the API's end of its connection into the node, with
// addresses of its own (session.Dial refuses a connection whose two
// addresses are equal, as net.Pipe's are).
type pipeEnd struct{ net.Conn }

func (pipeEnd) LocalAddr() net.Addr  { return pipeAddr("api") }
func (pipeEnd) RemoteAddr() net.Addr { return pipeAddr("node") }

// open dials the session: a connection the node serves (certNS are the
// namespaces to vouch for under bind_namespace), SCRAM with secret, and
// the session's loops; it closes ready, with err set on failure.
func (ss *nsSession) open(ctx context.Context, node Node, secret string, certNS []string) {
	defer close(ss.ready)
	dial := func(context.Context, string) (net.Conn, error) {
		a, b := net.Pipe()
		if err := node.ServeLocal(b, certNS); err != nil {
			_ = a.Close()
			return nil, err
		}
		return pipeEnd{a}, nil
	}
	first := wire.ScramClientFirst{Namespace: ss.ns, ClientID: ss.client, ClientKey: clientKeyOf(ss.ns), Agent: "paxlock-api"}
	sc, _, err := session.Dial(ctx, "local", session.Config{
		Dial:              dial,
		DialTimeout:       dialTimeout,
		Handshake:         session.SCRAM(first, secret),
		HandshakeTimeout:  dialTimeout,
		HeartbeatInterval: heartbeatEvery,
		MaxQueued:         maxQueued,
	})
	if err != nil {
		ss.err = err
		return
	}
	ss.sc = sc
	// The views tell the watches when their master changes (see
	// watchSink); the answer is a View frame, then ViewChanged pushes.
	ss.nextReq++
	_ = sc.Append(wire.TypeSubscribeView, ss.nextReq, &wire.SubscribeView{})
	go func() { _ = sc.Run(ss) }()
	// No watch registers before the first view, which it is checked
	// against.
	t := time.NewTimer(dialTimeout)
	defer t.Stop()
	select {
	case <-ss.viewed:
	case <-sc.Done():
		ss.err = fmt.Errorf("session ended before the first view: %w", sc.Err())
	case <-t.C:
		ss.err = errors.New("the node sent no view")
		sc.Close(ss.err)
	case <-ctx.Done():
		ss.err = ctx.Err()
		sc.Close(ss.err)
	}
}

// failed reports whether the session could not be opened or has ended;
// only after ready is closed.
func (ss *nsSession) failed() bool {
	if ss.err != nil {
		return true
	}
	select {
	case <-ss.sc.Done():
		return true
	default:
		return false
	}
}

// openErr is the Connect error of a session that could not be opened.
func (ss *nsSession) openErr() error {
	var ref *session.RefusedError
	if errors.As(ss.err, &ref) {
		return statusError("open session", ss.ns, &ref.Reply)
	}
	return connect.NewError(connect.CodeUnavailable, fmt.Errorf("session into the node: %w", ss.err))
}

// Frame implements session.Handler: replies end their calls, Granted
// pushes their waits, WatchEvents go to their watches, Lost pushes to
// the Holds streams of their owner (an API client still counts its
// validity itself, docs/api.md).
func (ss *nsSession) Frame(f wire.Frame, _ []byte) {
	switch f.Type {
	case wire.TypeResponse, wire.TypeGranted, wire.TypeWatchEvent, wire.TypeView, wire.TypeViewChanged, wire.TypeLost:
	default:
		return
	}
	m, err := wire.Decode(f.Type, f.Body)
	if err != nil {
		return
	}
	ss.sc.Lock()
	defer ss.sc.Unlock()
	switch m := m.(type) {
	case *wire.Response:
		if ch := ss.calls[f.ReqID]; ch != nil {
			delete(ss.calls, f.ReqID)
			ch <- *m
		}
	case *wire.Granted:
		if ch := ss.waits[m.WaitID]; ch != nil && m.Owner.Client == ss.client {
			select {
			case ch <- *m:
			default: // a grant already waits there; the first one counts
			}
		}
	case *wire.View:
		ss.viewLocked(m)
	case *wire.Lost:
		if m.Owner.Client == ss.client {
			ss.holds.lost(m)
		}
	case *wire.WatchEvent:
		if w := ss.watches[m.WatchID]; w != nil && m.Event == wire.EventMoved {
			// Its master dropped the watch without a change of the key
			// (it stepped down): register it again, as after a view
			// naming a new master; the stream never sees the event.
			select {
			case w.rewatch <- struct{}{}:
			default:
			}
		} else if w != nil && !w.overflowed {
			select {
			case w.ch <- *m:
			default:
				w.overflowed = true
				close(w.ch)
			}
		}
	}
}

// viewLocked takes a view the node pushed: the watches whose group's
// master changed since they registered are told to register again. The
// session's lock is held.
func (ss *nsSession) viewLocked(v *wire.View) {
	epochs := make([]uint64, len(v.Groups))
	masters := make([]uint32, len(v.Groups))
	for i, g := range v.Groups {
		epochs[i] = g.Epoch
		masters[i] = g.Master
	}
	ss.masters.Store(&masters)
	if ss.epochs == nil {
		close(ss.viewed)
	}
	ss.epochs = epochs
	for _, w := range ss.watches {
		if w.group >= 0 && w.group < len(epochs) && epochs[w.group] != w.epoch {
			select {
			case w.rewatch <- struct{}{}:
			default:
			}
		}
	}
}

// registering records that watch w (its request m) is being registered
// now, against the master of its group in the latest view (a prefix
// watch's is m.Group): a later view naming another master registers it
// again.
func (ss *nsSession) registering(w *watchSink, m *wire.Watch) {
	ss.sc.Lock()
	defer ss.sc.Unlock()
	if len(ss.epochs) == 0 {
		return
	}
	w.group = wire.GroupOf(wire.KeyHash(ss.ns, m.Key), len(ss.epochs))
	if m.Flags.Has(wire.FlagPrefix) {
		w.group = int(m.Group)
	}
	if w.group < len(ss.epochs) {
		w.epoch = ss.epochs[w.group]
	}
}

// groups is the number of lock groups in the session's latest view
// (wire.DefaultGroups before the first).
func (ss *nsSession) groups() int {
	ss.sc.Lock()
	defer ss.sc.Unlock()
	if len(ss.epochs) == 0 {
		return wire.DefaultGroups
	}
	return len(ss.epochs)
}

// groupsSeen is groups without the session's lock, from the masters of
// the latest view (wire.DefaultGroups before the first, or before the
// session is open).
func (ss *nsSession) groupsSeen() int {
	if p := ss.masters.Load(); p != nil && len(*p) > 0 {
		return len(*p)
	}
	return wire.DefaultGroups
}

// Heartbeat implements session.Handler.
func (ss *nsSession) Heartbeat(*wire.Response) {}

// Closed implements session.Handler: the calls, waits and watches see
// the session's Done channel; the namespace's Holds streams end, since a
// loss pushed to this session may be missed.
func (ss *nsSession) Closed(error) { ss.holds.sessionEnded() }

// call sends request m of type typ and returns its answer; ctx bounds
// the wait (the request may still be served).
func (ss *nsSession) call(ctx context.Context, typ wire.Type, m wire.Message) (*wire.Response, error) {
	ch := make(chan wire.Response, 1)
	ss.inflight.Add(1)
	defer ss.inflight.Add(-1)
	ss.sc.Lock()
	ss.nextReq++
	id := ss.nextReq
	err := ss.sc.AppendLocked(typ, id, m)
	if err == nil {
		ss.calls[id] = ch
	}
	ss.sc.Unlock()
	if err != nil {
		return nil, queueErr(err)
	}
	ss.sc.Flush()
	select {
	case r := <-ch:
		return &r, nil
	case <-ss.sc.Done():
		return nil, connect.NewError(connect.CodeUnavailable, errSessionLost)
	case <-ctx.Done():
		ss.sc.Lock()
		delete(ss.calls, id)
		ss.sc.Unlock()
		return nil, ctxErr(ctx)
	}
}

// addWait records wait id's channel, which gets its Granted push.
func (ss *nsSession) addWait(id uint64) chan wire.Granted {
	ch := make(chan wire.Granted, 1)
	ss.sc.Lock()
	ss.waits[id] = ch
	ss.sc.Unlock()
	return ch
}

// dropWait forgets wait id.
func (ss *nsSession) dropWait(id uint64) {
	ss.sc.Lock()
	delete(ss.waits, id)
	ss.sc.Unlock()
}

// addWatch allocates a watch id and records its sink.
func (ss *nsSession) addWatch() (uint64, *watchSink) {
	w := &watchSink{ch: make(chan wire.WatchEvent, watchBuffer), rewatch: make(chan struct{}, 1), group: -1}
	ss.sc.Lock()
	ss.nextWatch++
	id := ss.nextWatch
	ss.watches[id] = w
	ss.sc.Unlock()
	return id, w
}

// dropWatch forgets watch id.
func (ss *nsSession) dropWatch(id uint64) {
	ss.sc.Lock()
	delete(ss.watches, id)
	ss.sc.Unlock()
}

// queueErr is the Connect error of a request the session could not
// queue.
func queueErr(err error) error {
	if errors.Is(err, session.ErrQueueFull) {
		return apiError(connect.CodeResourceExhausted, wire.StatusOverloaded.String(), errors.New("the session into the node is backed up"))
	}
	return connect.NewError(connect.CodeUnavailable, errSessionLost)
}

// ctxErr is the Connect error of a call that ctx ended.
func ctxErr(ctx context.Context) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return connect.NewError(connect.CodeDeadlineExceeded, ctx.Err())
	}
	return connect.NewError(connect.CodeCanceled, ctx.Err())
}
