package cli

// The process logger every command that logs shares.

import (
	"fmt"
	"io"
	"log/slog"
)

// Log formats and levels, as the config's log.format and log.level and the
// --log-format and --log-level flags spell them.
const (
	LogJSON = "json"
	LogText = "text"
)

// NewLogger returns a logger writing to w in format (json or text) at level
// (debug, info, warn, error). Durations print as Go durations ("100ms",
// "1m30s") in both formats; slog's JSON handler would print nanoseconds.
func NewLogger(w io.Writer, level, format string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("log level %q: %w", level, err)
	}
	opts := &slog.HandlerOptions{Level: lv, ReplaceAttr: durationsAsText}
	switch format {
	case LogJSON, "":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	case LogText:
		return slog.New(slog.NewTextHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("log format %q: want json or text", format)
}

// DefaultLogger is the logger of a process whose configuration could not be
// read: JSON at info, the defaults of log.format and log.level.
func DefaultLogger(w io.Writer) *slog.Logger {
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{ReplaceAttr: durationsAsText}))
}

func durationsAsText(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		a.Value = slog.StringValue(a.Value.Duration().String())
	}
	return a
}
