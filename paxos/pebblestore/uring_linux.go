package pebblestore

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/paxlock/paxlock/internal/rawio"
	"golang.org/x/sys/unix"
)

// asyncSyncer runs fdatasync through io_uring. The goroutine that syncs
// (Pebble's WAL writer) parks on a channel instead of blocking an OS
// thread in the syscall; the kernel runs the fsync on its own worker and
// signals the completion on an eventfd that a goroutine reads through
// the netpoller.
//
// Why: a blocking fdatasync holds a P in a syscall for its whole wait
// (0.1–0.4 ms here). The runtime's sysmon then polls every 20 µs and hands
// the P to another thread, so every fsync costs thread wake-ups and
// context switches besides the kernel's own work (a node profile of
// 2026-11-23 on a 2-core AMD EPYC VM, bench/results/history/2026-11-23.md: 18% of a
// node's CPU in fdatasync and 11% in sysmon). Measured in a same-run
// A/B against Redis on that VM: contended 0.22× → 0.34× Redis, 16% less
// CPU per op; uncontended unchanged.
//
// The ring is set up with IORING_SETUP_COOP_TASKRUN where the kernel has
// it (5.19; older kernels refuse the flag and get a plain ring): the
// kernel then frees a finished request at the submitting thread's next
// entry into the kernel instead of interrupting that thread for it. The
// completion itself is posted, and the eventfd signalled, by the kernel's
// worker either way, so no fsync waits longer for it. In the kernel
// profile of BenchmarkClusterPropose that interruption (task_work_add
// from the worker) was 13% of the workers' time; with the flag, 3
// alternating runs of 15 groups at 64 outstanding went from 63.6k to 66.3k
// commands/s and 20.1 to 18.7 µs of CPU per command, at 1 outstanding
// from 375 to 350 µs per command.
//
// It is written by hand on the raw system calls (io_uring_setup, _enter,
// _register, two mmaps): the Go io_uring libraries are large, aimed at
// general I/O, and one operation needs about a hundred lines.
type asyncSyncer struct {
	fd      int
	entries uint32
	ring    []byte // the SQ and CQ rings (one mapping)
	sqeMap  []byte // the submission queue entries

	mu      sync.Mutex // submission, waiters and the CQ head
	sqHead  *uint32
	sqTail  *uint32
	sqMask  uint32
	sqArray unsafe.Pointer
	sqes    unsafe.Pointer
	cqHead  *uint32
	cqTail  *uint32
	cqMask  uint32
	cqes    unsafe.Pointer
	next    uint64
	waiters map[uint64]chan int32
	broken  bool // a submission failed: plain fdatasync from now on
	noWrite bool // the kernel refused IORING_OP_WRITE: writeSync declines

	efd       *os.File
	done      chan struct{} // closed when the reaper returned
	closeOnce sync.Once

	// stall bounds the wait for a completion (uringStall; tests lower
	// it); log, if set, hears of the first stall. skipEnter (tests only)
	// queues entries without submitting them, as if the kernel lost them.
	stall     time.Duration
	log       *slog.Logger
	skipEnter bool
}

// uringStall is how long an fdatasync waits for its io_uring completion
// before it syncs again with the blocking call and gives up the ring for
// good. A completion that never came was seen once (2026-11-24, session
// 9): the three nodes of one server test each waited six minutes on their
// first fsyncs, every reaper parked on its eventfd, on a kernel where the
// same code had passed every suite before; the cause is not known. The
// blocking fdatasync covers everything the lost one would have (it syncs
// all the file's data written before it), so falling back is safe, and a
// disk that is really stuck blocks it just the same. Far above any fsync
// seen here (p99 under 10 ms under load).
const uringStall = 5 * time.Second

// uringParams is struct io_uring_params (linux/io_uring.h): seven u32s,
// three reserved, then the SQ and CQ offset structs (ten u32s each, the
// last two making one u64).
type uringParams struct {
	sqEntries, cqEntries, flags, sqThreadCPU, sqThreadIdle, features, wqFD uint32
	resv                                                                   [3]uint32
	sqOff                                                                  [10]uint32
	cqOff                                                                  [10]uint32
}

const (
	sysIOUringSetup    = 425
	sysIOUringEnter    = 426
	sysIOUringRegister = 427

	uringOffSQEs          = 0x10000000
	uringOpFsync          = 3
	uringOpWrite          = 23 // IORING_OP_WRITE (5.6)
	uringSQELink          = 1 << 2
	uringFsyncDatasync    = 1
	uringSQEAsync         = 1 << 4 // IOSQE_ASYNC: never try the fsync inline in io_uring_enter
	uringRegisterEventfd  = 4
	uringFeatSingleMmap   = 1
	uringSetupCoopTaskrun = 1 << 8

	sqeSize = 64
	cqeSize = 16
)

// newAsyncSyncer sets up a ring of entries submissions. It fails where the
// kernel has no io_uring or forbids it (seccomp in containers,
// kernel.io_uring_disabled); the store then syncs with the plain syscall.
func newAsyncSyncer(entries uint32) (*asyncSyncer, error) {
	var p uringParams
	p.flags = uringSetupCoopTaskrun
	fd, _, e := syscall.Syscall(sysIOUringSetup, uintptr(entries), uintptr(unsafe.Pointer(&p)), 0)
	if e == syscall.EINVAL {
		p = uringParams{}
		fd, _, e = syscall.Syscall(sysIOUringSetup, uintptr(entries), uintptr(unsafe.Pointer(&p)), 0)
	}
	if e != 0 {
		return nil, fmt.Errorf("io_uring_setup: %w", e)
	}
	a := &asyncSyncer{fd: int(fd), entries: p.sqEntries, waiters: map[uint64]chan int32{}, done: make(chan struct{}), stall: uringStall}
	fail := func(err error) (*asyncSyncer, error) {
		a.release()
		return nil, err
	}
	if p.features&uringFeatSingleMmap == 0 {
		return fail(errors.New("io_uring: kernel without IORING_FEAT_SINGLE_MMAP"))
	}
	size := max(p.sqOff[6]+p.sqEntries*4, p.cqOff[5]+p.cqEntries*cqeSize)
	ring, err := unix.Mmap(a.fd, 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return fail(fmt.Errorf("io_uring: mmap rings: %w", err))
	}
	a.ring = ring
	sqes, err := unix.Mmap(a.fd, uringOffSQEs, int(p.sqEntries*sqeSize), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return fail(fmt.Errorf("io_uring: mmap entries: %w", err))
	}
	a.sqeMap = sqes
	base := unsafe.Pointer(&ring[0])
	a.sqHead = (*uint32)(unsafe.Add(base, p.sqOff[0]))
	a.sqTail = (*uint32)(unsafe.Add(base, p.sqOff[1]))
	a.sqMask = *(*uint32)(unsafe.Add(base, p.sqOff[2]))
	a.sqArray = unsafe.Add(base, p.sqOff[6])
	a.cqHead = (*uint32)(unsafe.Add(base, p.cqOff[0]))
	a.cqTail = (*uint32)(unsafe.Add(base, p.cqOff[1]))
	a.cqMask = *(*uint32)(unsafe.Add(base, p.cqOff[2]))
	a.cqes = unsafe.Add(base, p.cqOff[5])
	a.sqes = unsafe.Pointer(&sqes[0])
	efd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		return fail(fmt.Errorf("io_uring: eventfd: %w", err))
	}
	efd32 := int32(efd)
	if _, _, e := syscall.Syscall6(sysIOUringRegister, uintptr(a.fd), uringRegisterEventfd, uintptr(unsafe.Pointer(&efd32)), 1, 0, 0); e != 0 {
		_ = unix.Close(efd)
		return fail(fmt.Errorf("io_uring_register eventfd: %w", e))
	}
	a.efd = os.NewFile(uintptr(efd), "io_uring-eventfd") // non-blocking: read through the netpoller
	go a.reap()
	return a, nil
}

// fdatasync syncs fd's data. It falls back to the plain system call when
// the ring is full or broken.
func (a *asyncSyncer) fdatasync(fd uintptr) error {
	ch := make(chan int32, 1)
	a.mu.Lock()
	tail := atomic.LoadUint32(a.sqTail)
	if a.broken || tail-atomic.LoadUint32(a.sqHead) >= a.entries || len(a.waiters) >= int(a.entries) {
		a.mu.Unlock()
		return unix.Fdatasync(int(fd))
	}
	a.next++
	id := a.next
	idx := tail & a.sqMask
	sqe := (*[sqeSize]byte)(unsafe.Add(a.sqes, uintptr(idx)*sqeSize))
	clear(sqe[:])
	sqe[0] = uringOpFsync
	sqe[1] = uringSQEAsync
	*(*int32)(unsafe.Pointer(&sqe[4])) = int32(fd)
	*(*uint32)(unsafe.Pointer(&sqe[28])) = uringFsyncDatasync
	*(*uint64)(unsafe.Pointer(&sqe[32])) = id
	*(*uint32)(unsafe.Add(a.sqArray, uintptr(idx)*4)) = idx
	atomic.StoreUint32(a.sqTail, tail+1)
	a.waiters[id] = ch
	if e := a.enter(1); e != 0 {
		// Whether the kernel took the entry is unknown: forget it (a late
		// completion is ignored) and sync the plain way from now on.
		delete(a.waiters, id)
		a.broken = true
		a.mu.Unlock()
		return unix.Fdatasync(int(fd))
	}
	a.mu.Unlock()
	stall := time.NewTimer(a.stall)
	select {
	case res := <-ch:
		stall.Stop()
		return errnoOf(res)
	case <-stall.C:
	}
	a.mu.Lock()
	_, waiting := a.waiters[id]
	delete(a.waiters, id) // a late completion is ignored
	first := !a.broken
	a.broken = true
	a.mu.Unlock()
	if !waiting {
		return errnoOf(<-ch) // it completed as the timer fired
	}
	if first && a.log != nil {
		a.log.Warn("an fdatasync through io_uring did not complete; syncing with the blocking system call from now on", "waited", a.stall)
	}
	return unix.Fdatasync(int(fd))
}

// writeSync writes p at off in fd and then syncs fd's data, as one
// linked pair of io_uring requests that the kernel's worker runs in
// order (the fdatasync is cancelled if the write fails or is short). It
// reports done when the kernel ran both, with the first one's error; when
// it declines (ring full or broken, the kernel without IORING_OP_WRITE, a
// stall) it reports false and the caller writes and syncs itself, in a
// buffer other than p: the kernel may still write p at off later.
func (a *asyncSyncer) writeSync(fd uintptr, p []byte, off int64) (bool, error) {
	wch, sch := make(chan int32, 1), make(chan int32, 1)
	a.mu.Lock()
	tail := atomic.LoadUint32(a.sqTail)
	if a.broken || a.noWrite || tail-atomic.LoadUint32(a.sqHead)+2 > a.entries || len(a.waiters)+2 > int(a.entries) {
		a.mu.Unlock()
		return false, nil
	}
	wid, sid := a.next+1, a.next+2
	a.next += 2
	put := func(i uint32, id uint64, fill func(sqe *[sqeSize]byte)) {
		idx := (tail + i) & a.sqMask
		sqe := (*[sqeSize]byte)(unsafe.Add(a.sqes, uintptr(idx)*sqeSize))
		clear(sqe[:])
		*(*int32)(unsafe.Pointer(&sqe[4])) = int32(fd)
		*(*uint64)(unsafe.Pointer(&sqe[32])) = id
		fill(sqe)
		*(*uint32)(unsafe.Add(a.sqArray, uintptr(idx)*4)) = idx
	}
	put(0, wid, func(sqe *[sqeSize]byte) {
		sqe[0] = uringOpWrite
		sqe[1] = uringSQEAsync | uringSQELink
		*(*uint64)(unsafe.Pointer(&sqe[8])) = uint64(off)
		*(*uint64)(unsafe.Pointer(&sqe[16])) = uint64(uintptr(unsafe.Pointer(&p[0])))
		*(*uint32)(unsafe.Pointer(&sqe[24])) = uint32(len(p))
	})
	put(1, sid, func(sqe *[sqeSize]byte) {
		sqe[0] = uringOpFsync
		sqe[1] = uringSQEAsync
		*(*uint32)(unsafe.Pointer(&sqe[28])) = uringFsyncDatasync
	})
	atomic.StoreUint32(a.sqTail, tail+2)
	a.waiters[wid], a.waiters[sid] = wch, sch
	if e := a.enter(2); e != 0 {
		delete(a.waiters, wid)
		delete(a.waiters, sid)
		a.broken = true
		a.mu.Unlock()
		return false, nil
	}
	a.mu.Unlock()
	stall := time.NewTimer(a.stall)
	defer stall.Stop()
	var wres, sres int32
	for got := 0; got < 2; got++ {
		select {
		case wres = <-wch:
		case sres = <-sch:
		case <-stall.C:
			a.mu.Lock()
			delete(a.waiters, wid) // late completions are ignored
			delete(a.waiters, sid)
			first := !a.broken
			a.broken = true
			a.mu.Unlock()
			if first && a.log != nil {
				a.log.Warn("a WAL write and fdatasync through io_uring did not complete; writing and syncing with blocking system calls from now on", "waited", a.stall)
			}
			return false, nil
		}
	}
	runtime.KeepAlive(p)
	switch {
	case wres == -int32(syscall.EINVAL):
		a.mu.Lock()
		a.noWrite = true
		a.mu.Unlock()
		return false, nil
	case wres < 0:
		return true, syscall.Errno(-wres)
	case int(wres) != len(p):
		return true, fmt.Errorf("io_uring write: %d of %d bytes: %w", wres, len(p), io.ErrShortWrite)
	}
	return true, errnoOf(sres)
}

// enter submits the n entries queued last, retrying a busy ring. It is a
// submission only (min_complete 0): with IOSQE_ASYNC the kernel queues
// the requests to its workers and returns at once, so the raw call does
// not hold the thread. a.mu is held.
func (a *asyncSyncer) enter(n uint32) syscall.Errno {
	var e syscall.Errno
	for range 100 {
		if a.skipEnter {
			return 0
		}
		_, _, e = syscall.RawSyscall6(sysIOUringEnter, uintptr(a.fd), uintptr(n), 0, 0, 0, 0)
		if e != syscall.EINTR && e != syscall.EAGAIN && e != syscall.EBUSY {
			return e
		}
	}
	return e
}

// errnoOf turns a completion's result into the system call's error.
func errnoOf(res int32) error {
	if res < 0 {
		return syscall.Errno(-res)
	}
	return nil
}

// reap hands completions to their waiters; it returns when the eventfd is
// closed.
func (a *asyncSyncer) reap() {
	defer close(a.done)
	var buf [8]byte
	read := a.efd.Read
	if f, err := rawio.NewFile(a.efd); err == nil {
		read = f.Read // no wake of the runtime's monitor per completion (package rawio)
	}
	for {
		if _, err := read(buf[:]); err != nil {
			return
		}
		a.mu.Lock()
		for {
			head := atomic.LoadUint32(a.cqHead)
			if head == atomic.LoadUint32(a.cqTail) {
				break
			}
			cqe := unsafe.Add(a.cqes, uintptr(head&a.cqMask)*cqeSize)
			id := *(*uint64)(cqe)
			res := *(*int32)(unsafe.Add(cqe, 8))
			atomic.StoreUint32(a.cqHead, head+1)
			if ch := a.waiters[id]; ch != nil {
				delete(a.waiters, id)
				ch <- res
			}
		}
		a.mu.Unlock()
	}
}

// close stops the reaper and releases the ring. No fdatasync may be in
// flight (the store closed Pebble first).
func (a *asyncSyncer) close() {
	a.closeOnce.Do(func() {
		_ = a.efd.Close()
		<-a.done
		a.release()
	})
}

func (a *asyncSyncer) release() {
	if a.sqeMap != nil {
		_ = unix.Munmap(a.sqeMap)
	}
	if a.ring != nil {
		_ = unix.Munmap(a.ring)
	}
	_ = unix.Close(a.fd)
}
