package app

import (
	"fmt"
	"io"
	"log/slog"

	"github.com/capper-dev/capper/internal/config"
)

// NewLogger returns the process logger: JSON (or text) at the configured
// level. User ids and payloads are only ever logged at debug.
func NewLogger(w io.Writer, c config.Log) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(c.Level)); err != nil {
		return nil, fmt.Errorf("log.level: %w", err)
	}
	opts := &slog.HandlerOptions{Level: level}
	if c.Format == "text" {
		return slog.New(slog.NewTextHandler(w, opts)), nil
	}
	return slog.New(slog.NewJSONHandler(w, opts)), nil
}
