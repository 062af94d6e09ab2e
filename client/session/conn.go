package session

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/paxlock/paxlock/client/wire"
)

// HeartbeatID is the request id of a session's own Heartbeats. The session
// consumes their replies itself (see Handler.Heartbeat). Owners number
// their requests from 1 upwards on a connection, so they never reach it.
const HeartbeatID = math.MaxUint64

// Errors of the dialing side. A session's cause (Conn.Err, Run's result,
// Handler.Closed) is one of these, an error from the connection, or what
// the owner passed to Close.
var (
	// ErrClosed is what AppendLocked and friends return once the session
	// has ended; Conn.Err says why it ended.
	ErrClosed = errors.New("session: closed")
	// ErrQueueFull refuses a frame that would take the send queue over
	// Config.MaxQueued.
	ErrQueueFull = errors.New("session: send queue full")
	// ErrSelfConnect reports a dial that connected the socket to itself
	// (TCP simultaneous open on a dead local port in the ephemeral range);
	// the socket would otherwise hold the port the peer needs.
	ErrSelfConnect = errors.New("session: connected to itself")
	// ErrHeartbeatTimeout ends a session whose peer sent nothing within
	// Config.HeartbeatTimeout of a Heartbeat.
	ErrHeartbeatTimeout = errors.New("session: heartbeat unanswered")
)

// Config configures the dialing side of a session. Zero values are
// defaults or switch a feature off, as each field says.
type Config struct {
	// Dial opens the connection (default: a net.Dialer over TCP). TLS,
	// when it comes, wraps the connection here.
	Dial func(ctx context.Context, addr string) (net.Conn, error)
	// DialTimeout bounds Dial (0: only the context bounds it).
	DialTimeout time.Duration
	// Handshake opens the session once connected (nil: none; the peer may
	// then refuse requests that need one).
	Handshake Handshake
	// HandshakeTimeout bounds the handshake (0: only the context bounds
	// it).
	HandshakeTimeout time.Duration
	// MaxFrame bounds the frames sent and accepted (default
	// wire.DefaultMaxFrame).
	MaxFrame int
	// HeartbeatInterval is how long the connection may be quiet in either
	// direction (nothing sent, or nothing received) before the session
	// sends a Heartbeat; the writer checks every half interval. 0: the
	// session sends none.
	HeartbeatInterval time.Duration
	// HeartbeatTimeout ends the session when nothing at all arrives within
	// this long of a Heartbeat (ErrHeartbeatTimeout). 0: no such check;
	// an unanswered Heartbeat is then forgotten after HeartbeatInterval.
	HeartbeatTimeout time.Duration
	// WriteTimeout bounds each write (0: none).
	WriteTimeout time.Duration
	// MaxQueued bounds the bytes waiting to be sent (0: no bound): past
	// it, AppendLocked and AppendRaw return ErrQueueFull.
	MaxQueued int
}

// Handler is what a session's owner does with what the peer sends. Its
// methods run on the session's reader goroutine (Closed: on whichever
// goroutine ended the session) and must not block for long: the next frame
// waits.
type Handler interface {
	// Frame handles one frame. f.Body and raw (the whole frame, header
	// included) alias the reader's buffer: decode or copy them before
	// returning. Replies to the session's own Heartbeats do not come here.
	Frame(f wire.Frame, raw []byte)
	// Heartbeat is told the reply to one of the session's Heartbeats (a
	// node puts its view's version there).
	Heartbeat(r *wire.Response)
	// Closed is told, once, why the session ended, after its socket was
	// closed. The Conn's methods may be called from it (they fail).
	Closed(cause error)
}

// Conn is the dialing side of one session: see the package doc. Dial
// opens it, Run serves it, Close ends it.
//
// Frames are sent by appending them to the send queue and waking the
// writer (Flush), which sends all that is queued in one write. The queue's
// lock is exposed (Lock, AppendLocked, Unlock) so that an owner can keep
// its per-request bookkeeping under the same lock: queuing a request and
// recording it then cost one lock, as on the Go client's hot path.
type Conn struct {
	cfg   Config
	nc    net.Conn
	br    *bufio.Reader
	start time.Time     // the session's clock: durations since start
	done  chan struct{} // closed by Close
	wake  chan struct{} // cap 1: frames are queued

	lastRecv atomic.Int64 // clock of the last frame received
	hbAt     atomic.Int64 // clock when the outstanding Heartbeat was queued; 0: none
	lastSend int64        // writer goroutine only: clock of the last write

	mu  sync.Mutex
	enc wire.Codec
	out []byte
	err error   // why the session ended; nil while it works
	h   Handler // set by Run
}

// Dial connects to addr, sets TCP_NODELAY, and runs cfg.Handshake; ctx
// bounds all of it. On success it returns the session, not yet served
// (frames may be queued; Run sends them), and the handshake's final reply
// (the zero Response without a handshake). A refused handshake is a
// *RefusedError, with the reply.
func Dial(ctx context.Context, addr string, cfg Config) (*Conn, wire.Response, error) {
	if cfg.MaxFrame <= 0 {
		cfg.MaxFrame = wire.DefaultMaxFrame
	}
	dctx := ctx
	if cfg.DialTimeout > 0 {
		var cancel context.CancelFunc
		dctx, cancel = context.WithTimeout(ctx, cfg.DialTimeout)
		defer cancel()
	}
	dial := cfg.Dial
	if dial == nil {
		var d net.Dialer
		dial = func(ctx context.Context, addr string) (net.Conn, error) { return d.DialContext(ctx, "tcp", addr) }
	}
	nc, err := dial(dctx, addr)
	if err != nil {
		return nil, wire.Response{}, fmt.Errorf("dial %s: %w", addr, err)
	}
	if nc.LocalAddr().String() == nc.RemoteAddr().String() {
		nc.Close()
		return nil, wire.Response{}, fmt.Errorf("dial %s: %w", addr, ErrSelfConnect)
	}
	if tc, ok := nc.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
	}
	c := newConn(nc, cfg)
	if cfg.Handshake == nil {
		return c, wire.Response{}, nil
	}
	r, err := c.handshake(ctx)
	if err != nil {
		nc.Close()
		return nil, r, fmt.Errorf("hello to %s: %w", addr, err)
	}
	return c, r, nil
}

// newConn wraps an open connection; Dial and tests use it.
func newConn(nc net.Conn, cfg Config) *Conn {
	if cfg.MaxFrame <= 0 {
		cfg.MaxFrame = wire.DefaultMaxFrame
	}
	c := &Conn{
		cfg:   cfg,
		nc:    nc,
		br:    bufio.NewReaderSize(nc, 32<<10),
		start: time.Now(),
		done:  make(chan struct{}),
		wake:  make(chan struct{}, 1),
	}
	c.enc.MaxFrame = cfg.MaxFrame
	c.lastRecv.Store(c.now())
	return c
}

// handshake runs cfg.Handshake on the connection alone, before the loops
// start; ctx and HandshakeTimeout bound it.
func (c *Conn) handshake(ctx context.Context) (wire.Response, error) {
	if t := c.cfg.HandshakeTimeout; t > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, t)
		defer cancel()
	}
	// Ending ctx (its deadline included) interrupts a write or read under
	// way, so that the error then wraps ctx's.
	stop := context.AfterFunc(ctx, func() { _ = c.nc.SetDeadline(time.Unix(1, 0)) })
	ex := &Exchange{c: c}
	r, err := c.cfg.Handshake(ex)
	if !stop() || ctx.Err() != nil {
		// The deadline or the end of ctx cut the exchange short.
		if err == nil {
			err = ctx.Err()
		} else if ctx.Err() != nil {
			err = fmt.Errorf("%w: %w", ctx.Err(), err)
		}
	}
	if err == nil {
		err = c.nc.SetDeadline(time.Time{})
	}
	return r, err
}

// now is the session's clock: nanoseconds since it was opened.
func (c *Conn) now() int64 { return int64(time.Since(c.start)) }

// Done is closed when the session has ended.
func (c *Conn) Done() <-chan struct{} { return c.done }

// Err is why the session ended, nil while it works.
func (c *Conn) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Lock locks the send queue. An owner may guard state of its own with it
// (see Conn).
func (c *Conn) Lock() { c.mu.Lock() }

// Unlock unlocks the send queue.
func (c *Conn) Unlock() { c.mu.Unlock() }

// AppendLocked encodes one frame into the send queue; the lock is held.
// It returns ErrClosed once the session has ended, ErrQueueFull when
// MaxQueued bytes are already waiting, or the encoding's error; the queue
// is then unchanged. Call Flush after unlocking.
func (c *Conn) AppendLocked(typ wire.Type, reqID uint64, m wire.Message) error {
	if c.err != nil {
		return ErrClosed
	}
	if c.cfg.MaxQueued > 0 && len(c.out) > c.cfg.MaxQueued {
		return ErrQueueFull
	}
	out, err := c.enc.AppendFrame(c.out, typ, reqID, m)
	if err != nil {
		return fmt.Errorf("session: encode %s: %w", typ, err)
	}
	c.out = out
	return nil
}

// Append queues one frame and wakes the writer; see AppendLocked.
func (c *Conn) Append(typ wire.Type, reqID uint64, m wire.Message) error {
	c.mu.Lock()
	err := c.AppendLocked(typ, reqID, m)
	c.mu.Unlock()
	if err == nil {
		c.Flush()
	}
	return err
}

// AppendRaw queues frames encoded elsewhere (a relay's) and wakes the
// writer. It returns ErrClosed or ErrQueueFull as AppendLocked does (the
// bound counts frame too).
func (c *Conn) AppendRaw(frame []byte) error {
	c.mu.Lock()
	switch {
	case c.err != nil:
		c.mu.Unlock()
		return ErrClosed
	case c.cfg.MaxQueued > 0 && len(c.out)+len(frame) > c.cfg.MaxQueued:
		c.mu.Unlock()
		return ErrQueueFull
	}
	c.out = append(c.out, frame...)
	c.mu.Unlock()
	c.Flush()
	return nil
}

// Flush wakes the writer to send what is queued.
func (c *Conn) Flush() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// Close ends the session once, with cause (ErrClosed if nil): it drops
// what is still queued, closes the socket, and tells the Handler. Later
// calls do nothing.
func (c *Conn) Close(cause error) {
	if cause == nil {
		cause = ErrClosed
	}
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return
	}
	c.err = cause
	c.out = nil
	h := c.h
	c.mu.Unlock()
	close(c.done)
	_ = c.nc.Close()
	if h != nil {
		h.Closed(cause)
	}
}

// Run serves the session, handing what arrives to h, until the session
// ends; it returns the cause once its reader and writer have both stopped.
// It runs the writer itself and the reader in a second goroutine. A
// session closed before Run returns its cause at once without calling h.
func (c *Conn) Run(h Handler) error {
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return err
	}
	c.h = h
	c.mu.Unlock()
	read := make(chan struct{})
	go func() {
		defer close(read)
		c.readLoop(h)
	}()
	c.writeLoop()
	<-read
	return c.Err()
}

// writeLoop sends whatever is queued, all of it in one write, and keeps
// the connection alive (checkHeartbeat) until the session ends.
func (c *Conn) writeLoop() {
	var tick <-chan time.Time
	if iv := c.cfg.HeartbeatInterval; iv > 0 {
		t := time.NewTicker(max(iv/2, time.Millisecond))
		defer t.Stop()
		tick = t.C
	}
	c.lastSend = c.now()
	var buf []byte
	for {
		select {
		case <-c.done:
			return
		case <-c.wake:
		case <-tick:
			if !c.checkHeartbeat() {
				return
			}
		}
		// Let owners that are about to queue frames add them first: one
		// write then carries more of them (measured on the Go client: 0.75
		// -> 0.33 writes per request at 64 workers).
		runtime.Gosched()
		c.mu.Lock()
		buf, c.out = c.out, buf[:0]
		c.mu.Unlock()
		if len(buf) == 0 {
			continue
		}
		t := time.Now()
		if c.cfg.WriteTimeout > 0 {
			_ = c.nc.SetWriteDeadline(t.Add(c.cfg.WriteTimeout))
		}
		if _, err := c.nc.Write(buf); err != nil {
			c.Close(fmt.Errorf("write: %w", err))
			return
		}
		c.lastSend = int64(t.Sub(c.start))
		if cap(buf) > 1<<20 {
			buf = nil // do not keep a burst's buffer forever
		}
	}
}

// checkHeartbeat queues a Heartbeat on a quiet connection, or ends the
// session when the outstanding one went unanswered and nothing else
// arrived. It reports whether the session goes on.
func (c *Conn) checkHeartbeat() bool {
	iv, timeout := c.cfg.HeartbeatInterval, c.cfg.HeartbeatTimeout
	now := c.now()
	last := c.lastRecv.Load()
	if hb := c.hbAt.Load(); hb != 0 {
		limit := timeout
		if limit <= 0 {
			limit = iv
		}
		if time.Duration(now-hb) <= limit {
			return true
		}
		if timeout > 0 && last < hb {
			c.Close(fmt.Errorf("%w: nothing received within %v", ErrHeartbeatTimeout, timeout))
			return false
		}
		// Unanswered, but other frames arrived since (or no timeout is
		// set): forget it, so that the next quiet period sends another.
		c.hbAt.CompareAndSwap(hb, 0)
		return true
	}
	if time.Duration(now-last) < iv && time.Duration(now-c.lastSend) < iv {
		return true
	}
	c.mu.Lock()
	err := c.AppendLocked(wire.TypeHeartbeat, HeartbeatID, &wire.Heartbeat{})
	c.mu.Unlock()
	if err == nil {
		c.hbAt.Store(now)
	}
	return true
}

// readLoop reads frames until the session ends: replies to the session's
// Heartbeats go to h.Heartbeat, everything else to h.Frame.
func (c *Conn) readLoop(h Handler) {
	var dec wire.Codec
	var hb wire.Response
	var buf []byte
	for {
		f, nb, err := wire.ReadFrame(c.br, buf, c.cfg.MaxFrame)
		buf = nb
		if err != nil {
			c.Close(fmt.Errorf("read: %w", err))
			return
		}
		c.lastRecv.Store(c.now())
		if f.ReqID == HeartbeatID && f.Type == wire.TypeResponse {
			c.hbAt.Store(0)
			if dec.DecodeInto(f.Body, &hb) == nil {
				h.Heartbeat(&hb)
			}
			continue
		}
		h.Frame(f, buf)
	}
}
