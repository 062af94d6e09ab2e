package server

import (
	"errors"
	"fmt"

	"github.com/paxlock/paxlock/client/wire"
)

// unsent is told that the reply or push typ for request reqID could not
// be encoded (err), with c.mu held: a frame over the frame limit
// (wire.ErrFrameTooLarge), which a client would drop with its connection.
// A Response's request is then answered ERROR saying why, so that it does
// not go unanswered; a push is dropped. Both are logged.
func (c *conn) unsent(typ wire.Type, reqID uint64, err error) {
	c.s.log.Error("encode reply", "type", typ, "err", err)
	if typ != wire.TypeResponse || reqID == 0 {
		return
	}
	msg := "the answer could not be encoded"
	if errors.Is(err, wire.ErrFrameTooLarge) {
		msg = fmt.Sprintf("the answer is larger than the frame limit (%d bytes)", wire.DefaultMaxFrame)
	}
	r := wire.Response{Status: wire.StatusError, Msg: msg}
	if out, err := c.enc.AppendFrame(c.out, wire.TypeResponse, reqID, &r); err == nil {
		c.out = out
	}
}
