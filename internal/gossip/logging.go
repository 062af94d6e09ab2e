package gossip

import (
	"bytes"
	"context"
	"log"
	"log/slog"
)

// memberlistLogger returns a *log.Logger for memberlist.Config.Logger that
// forwards each line to l at the level memberlist wrote in brackets:
// [DEBUG] and [TRACE] to Debug, [INFO] to Info, [WARN] to Warn, [ERR] and
// [ERROR] to Error (unknown prefixes to Info). An error about a closed
// network connection goes to Debug: memberlist's Shutdown closes its
// sockets under gossip that is still being sent, and says so at [ERR]
// on every clean stop, which is not news to an operator.
func memberlistLogger(l *slog.Logger) *log.Logger {
	return log.New(slogWriter{l: l}, "", 0)
}

type slogWriter struct{ l *slog.Logger }

// Write implements io.Writer; log.Logger calls it once per line.
func (w slogWriter) Write(p []byte) (int, error) {
	n := len(p)
	msg := bytes.TrimRight(p, "\r\n")
	level := slog.LevelInfo
	if len(msg) > 0 && msg[0] == '[' {
		if end := bytes.IndexByte(msg, ']'); end > 0 {
			switch string(msg[1:end]) {
			case "DEBUG", "TRACE":
				level = slog.LevelDebug
			case "WARN", "WARNING":
				level = slog.LevelWarn
			case "ERR", "ERROR":
				level = slog.LevelError
			}
			msg = bytes.TrimLeft(msg[end+1:], " ")
		}
	}
	msg = bytes.TrimPrefix(msg, []byte("memberlist: "))
	if level == slog.LevelError && bytes.Contains(msg, []byte("use of closed network connection")) {
		level = slog.LevelDebug
	}
	if w.l.Enabled(context.Background(), level) {
		w.l.Log(context.Background(), level, string(msg), "component", "memberlist")
	}
	return n, nil
}
