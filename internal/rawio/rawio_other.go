//go:build !linux

package rawio

import (
	"net"
	"os"
)

// Wrap returns c: outside Linux the connection keeps package net's calls.
func Wrap(c net.Conn) net.Conn { return c }

// File reads a file with os.File's Read outside Linux.
type File struct{ f *os.File }

// NewFile returns a File reading f.
func NewFile(f *os.File) (*File, error) { return &File{f: f}, nil }

// Read reads into p.
func (f *File) Read(p []byte) (int, error) { return f.f.Read(p) }
