package main

// How a failed or lossy build is logged: no user id above debug. Conflicts
// and malformed lines are named by where they are (file:line), which is
// enough to find them; their user ids and contents are logged at debug.

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/capper-dev/capper/internal/segbuild"
)

// logFailure logs the error that failed the command.
func logFailure(log *slog.Logger, err error) {
	msg, detail := err.Error(), []string(nil)
	var conflicts *segbuild.ConflictsError
	var bad *segbuild.BadInputError
	switch {
	case errors.As(err, &conflicts):
		msg = strings.Replace(msg, conflicts.Error(), conflicts.Redacted(), 1)
		for _, c := range conflicts.Samples {
			detail = append(detail, c.String())
		}
	case errors.As(err, &bad):
		msg = strings.Replace(msg, bad.Error(), bad.Redacted(), 1)
		for _, l := range bad.Lines {
			detail = append(detail, l.String())
		}
	}
	log.Error("segment-builder failed", "error", msg)
	if len(detail) > 0 {
		log.Debug("segment-builder failed: the rows in full", "rows", detail)
	}
}

// logSkipped logs the malformed lines a build tolerated (--max-errors).
func logSkipped(log *slog.Logger, lines []segbuild.BadLine, maxErrors int) {
	safe := make([]string, len(lines))
	full := make([]string, len(lines))
	for i, l := range lines {
		safe[i], full[i] = l.Redacted(), l.String()
	}
	log.Warn(fmt.Sprintf("skipped %d malformed lines (--max-errors=%d)", len(lines), maxErrors), "lines", safe)
	log.Debug("skipped malformed lines in full", "lines", full)
}
