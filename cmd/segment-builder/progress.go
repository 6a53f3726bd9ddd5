package main

// Progress output of a build: a bar on a terminal, lines elsewhere.

import (
	"io"
	"os"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"

	"github.com/capper-dev/capper/internal/segbuild"
)

// progress shows reading progress on a terminal: a byte bar when every
// input's size is known, a row spinner otherwise (stdin). A nil bar shows
// nothing.
type progress struct {
	bar   *progressbar.ProgressBar
	bytes bool
}

func newProgress(mode string, stderr io.Writer, inputs []segbuild.Input) *progress {
	show := mode == "always"
	if mode == "auto" {
		f, ok := stderr.(*os.File)
		show = ok && term.IsTerminal(int(f.Fd()))
	}
	if !show {
		return &progress{}
	}
	total := int64(0)
	for _, in := range inputs {
		if in.Size < 0 {
			total = -1
			break
		}
		total += in.Size
	}
	common := []progressbar.Option{
		progressbar.OptionSetWriter(stderr),
		progressbar.OptionThrottle(100 * time.Millisecond),
		progressbar.OptionShowCount(),
		progressbar.OptionSetElapsedTime(true),
		progressbar.OptionClearOnFinish(),
		progressbar.OptionSpinnerType(14),
	}
	if total >= 0 {
		opts := append(common, progressbar.OptionSetDescription("reading"), progressbar.OptionShowBytes(true), progressbar.OptionSetWidth(30))
		return &progress{bar: progressbar.NewOptions64(total, opts...), bytes: true}
	}
	opts := append(common, progressbar.OptionSetDescription("rows read"), progressbar.OptionShowIts(), progressbar.OptionSetItsString("rows"))
	return &progress{bar: progressbar.NewOptions64(-1, opts...)}
}

func (p *progress) update(pr segbuild.Progress) {
	if p.bar == nil {
		return
	}
	if p.bytes {
		_ = p.bar.Set64(pr.Bytes)
	} else {
		_ = p.bar.Set64(pr.Rows)
	}
}

func (p *progress) done() {
	if p.bar != nil {
		_ = p.bar.Finish()
	}
}
