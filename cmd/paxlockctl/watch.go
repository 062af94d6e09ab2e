// This file is the client-protocol commands that read: watch and locks.

package main

import (
	"context"
	"time"

	"github.com/paxlock/paxlock/client"
)

// watchCmd prints key's changes until ctx ends (SIGINT, SIGTERM), which
// is a clean end.
func watchCmd(ctx context.Context, p printer, c *client.Client, key string, after uint64) error {
	w, err := c.Watch(ctx, key, after, client.Continuous())
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	defer func() { _ = w.Close() }() // ending the watch early; nothing to report
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-w.Events():
			if !ok {
				if err := w.Err(); err != nil && ctx.Err() == nil {
					return err
				}
				return nil
			}
			if err := p.emit(watchRecord(ev)); err != nil {
				return err
			}
		}
	}
}

// watchPrefixCmd prints the changes of every key starting with prefix
// until ctx ends (SIGINT, SIGTERM), which is a clean end; timeout bounds
// the connection. An EventMoved line (the prefix as its key) says that a
// group's master changed and changes in between may be missing: locks
// PREFIX shows the present state.
func watchPrefixCmd(ctx context.Context, p printer, cfg client.Config, prefix string, timeout time.Duration) error {
	connectCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	c, err := client.New(connectCtx, cfg)
	if err != nil {
		return err
	}
	defer func() { _ = c.Close() }() // the command's own result is what it reports
	events, err := c.WatchPrefix(ctx, prefix)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	for ev := range events {
		if err := p.emit(watchRecord(ev)); err != nil {
			return err
		}
	}
	return nil
}

// locksCmd lists the namespace's held locks with keys starting with prefix,
// page by page, up to limit of them.
func locksCmd(ctx context.Context, p printer, cfg client.Config, prefix string, limit int, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	c, err := client.New(ctx, cfg)
	if err != nil {
		return err
	}
	defer func() { _ = c.Close() }() // the command's own result is what it reports
	out := locksOutput{Prefix: prefix, Locks: []stateOutput{}}
	after := ""
	for len(out.Locks) < limit {
		page, err := c.List(ctx, prefix, after, min(limit-len(out.Locks), 1000))
		if err != nil {
			return err
		}
		for _, st := range page.Locks {
			out.Locks = append(out.Locks, stateRecord(st))
		}
		after = page.Next
		if after == "" {
			break
		}
	}
	out.More = after != ""
	return p.emit(out)
}
