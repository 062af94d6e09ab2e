package rawio

import (
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"unsafe"
)

// maxRW caps one read or write system call, as package net does, so that
// a huge buffer is never passed to the kernel at once.
const maxRW = 1 << 30

// Wrap returns c with its Read and Write on raw system calls (see the
// package comment), or c itself when it is not a *net.TCPConn or its
// descriptor cannot be reached. Everything else (deadlines, Close, the
// addresses, SyscallConn) is the wrapped connection's.
func Wrap(c net.Conn) net.Conn {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return c
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return c
	}
	w := &conn{TCPConn: tc, rc: rc}
	w.r.fn, w.writeFn = w.r.do, w.doWrite
	return w
}

// conn is a TCP connection whose reads and writes are raw system calls.
// As any net.Conn it may be read and written from several goroutines at
// once: rmu and wmu hold a Read or a Write whole, as package net's
// descriptor locks do, so concurrent Writes do not interleave. The
// functions handed to RawConn are bound once, so a call allocates nothing.
type conn struct {
	*net.TCPConn
	rc syscall.RawConn

	rmu sync.Mutex
	r   reader

	wmu     sync.Mutex
	writeFn func(fd uintptr) bool
	wbuf    []byte
	wn      int
	werr    syscall.Errno
}

// reader is one raw read at a time on a descriptor the netpoller
// watches: fn (bound once to do) is what RawConn.Read calls.
type reader struct {
	fn    func(fd uintptr) bool
	buf   []byte
	n     int
	errno syscall.Errno
}

func (r *reader) do(fd uintptr) bool {
	for {
		n, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&r.buf[0])), uintptr(len(r.buf)))
		switch e {
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return false
		case 0:
			r.n = int(n)
		default:
			r.errno = e
		}
		return true
	}
}

// read reads into p (not empty) through rc, waiting on the netpoller
// while there is nothing: the bytes read, the system call's error, or
// rc's (closed, deadline exceeded).
func (r *reader) read(rc syscall.RawConn, p []byte) (int, syscall.Errno, error) {
	r.buf, r.n, r.errno = p, 0, 0
	err := rc.Read(r.fn)
	n, errno := r.n, r.errno
	r.buf = nil
	return n, errno, err
}

// Read reads as (*net.TCPConn).Read does: at most len(p) bytes, io.EOF
// once the peer closed its side, and the connection's errors (closed,
// deadline exceeded) as *net.OpError.
func (c *conn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if len(p) > maxRW {
		p = p[:maxRW]
	}
	c.rmu.Lock()
	n, errno, err := c.r.read(c.rc, p)
	c.rmu.Unlock()
	switch {
	case err != nil:
		return 0, c.opError("read", err)
	case errno != 0:
		return 0, c.opError("read", os.NewSyscallError("read", errno))
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

func (c *conn) doWrite(fd uintptr) bool {
	for len(c.wbuf) > 0 {
		chunk := c.wbuf
		if len(chunk) > maxRW {
			chunk = chunk[:maxRW]
		}
		r, _, e := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&chunk[0])), uintptr(len(chunk)))
		switch e {
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return false
		case 0:
			c.wn += int(r)
			c.wbuf = c.wbuf[r:]
		default:
			c.werr = e
			return true
		}
	}
	return true
}

// Write writes all of p as (*net.TCPConn).Write does, waiting on the
// netpoller while the socket's buffer is full; it reports how much was
// written before an error.
func (c *conn) Write(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	c.wmu.Lock()
	c.wbuf, c.wn, c.werr = p, 0, 0
	err := c.rc.Write(c.writeFn)
	n, errno := c.wn, c.werr
	c.wbuf = nil
	c.wmu.Unlock()
	switch {
	case err != nil:
		return n, c.opError("write", err)
	case errno != 0:
		return n, c.opError("write", os.NewSyscallError("write", errno))
	}
	return n, nil
}

func (c *conn) opError(op string, err error) error {
	return &net.OpError{Op: op, Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: err}
}

// File reads a non-blocking file the netpoller watches (an eventfd) with
// raw system calls, waiting on the netpoller while it has nothing; see the
// package comment. One goroutine reads it at a time.
type File struct {
	name string
	rc   syscall.RawConn
	r    reader
}

// NewFile returns a File reading f.
func NewFile(f *os.File) (*File, error) {
	rc, err := f.SyscallConn()
	if err != nil {
		return nil, err
	}
	r := &File{name: f.Name(), rc: rc}
	r.r.fn = r.r.do
	return r, nil
}

// Read reads into p; it returns 0 and io.EOF at the end of the file, and
// an *os.PathError once the file is closed (or failed).
func (f *File) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	n, errno, err := f.r.read(f.rc, p)
	switch {
	case err != nil:
		return 0, &os.PathError{Op: "read", Path: f.name, Err: err}
	case errno != 0:
		return 0, &os.PathError{Op: "read", Path: f.name, Err: errno}
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}
