package main

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
)

func TestNewLoggerFormats(t *testing.T) {
	var buf bytes.Buffer
	log, err := newLogger(&buf, "json", slog.LevelInfo)
	if err != nil {
		t.Fatal(err)
	}
	log.Debug("hidden")
	log.Info("hello", "group", 3)
	var rec map[string]any
	if err := json.Unmarshal(buf.Bytes(), &rec); err != nil {
		t.Fatalf("json format wrote %q: %v", buf.String(), err)
	}
	if rec["msg"] != "hello" || rec["group"] != float64(3) {
		t.Errorf("json record %v", rec)
	}
	buf.Reset()
	log, err = newLogger(&buf, "text", slog.LevelInfo)
	if err != nil {
		t.Fatal(err)
	}
	log.Info("hello", "group", 3)
	if !strings.Contains(buf.String(), "msg=hello group=3") {
		t.Errorf("text format wrote %q", buf.String())
	}
	if _, err := newLogger(&buf, "xml", slog.LevelInfo); err == nil || !strings.Contains(err.Error(), "xml") {
		t.Errorf("format xml: err %v, want one naming it", err)
	}
}
