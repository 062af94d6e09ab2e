package rawio

import (
	"encoding/binary"
	"errors"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestFileReadsEventfd(t *testing.T) {
	fd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		t.Skipf("no eventfd: %v", err)
	}
	f := os.NewFile(uintptr(fd), "eventfd")
	r, err := NewFile(f)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan uint64, 1)
	errc := make(chan error, 1)
	go func() {
		var b [8]byte
		for {
			if _, err := r.Read(b[:]); err != nil {
				errc <- err
				return
			}
			got <- binary.NativeEndian.Uint64(b[:])
		}
	}()
	var b [8]byte
	binary.NativeEndian.PutUint64(b[:], 3)
	if _, err := unix.Write(fd, b[:]); err != nil {
		t.Fatal(err)
	}
	select {
	case v := <-got:
		if v != 3 {
			t.Fatalf("read %d; want 3", v)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the read did not wake for the eventfd's signal")
	}
	_ = f.Close()
	select {
	case err := <-errc:
		var pe *os.PathError
		if !errors.As(err, &pe) || pe.Op != "read" {
			t.Fatalf("read of a closed file: %v; want a read *os.PathError", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Close did not end the blocked read")
	}
}
