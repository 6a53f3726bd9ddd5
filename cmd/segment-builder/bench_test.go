package main

import (
	"bufio"
	"bytes"
	"context"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/capper-dev/capper/internal/objstore"
	"github.com/capper-dev/capper/internal/segments"
)

const (
	benchRows          = 50_000_000
	targetRowsPerSec   = 2_000_000
	targetPeakRSSBytes = 1 << 30
)

// BenchmarkBuild50M runs the built binary as a user would: 50M generated
// "user_id,segment" rows (dense ids, 4 segments) on its stdin, published to
// a directory. The child's peak RSS comes from the kernel (rusage), so it is
// the whole process, not a Go heap estimate.
func BenchmarkBuild50M(b *testing.B) {
	bin := buildBinary(b)
	segs := [...]string{"active", "new", "dormant", "lapsed"}
	for b.Loop() {
		out := b.TempDir()
		cmd := exec.Command(bin, "--input", "-", "--out", out, "--progress", "never")
		stdin, err := cmd.StdinPipe()
		if err != nil {
			b.Fatal(err)
		}
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		start := time.Now()
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		genErr := make(chan error, 1)
		go func() {
			w := bufio.NewWriterSize(stdin, 1<<20)
			line := make([]byte, 0, 32)
			for id := uint64(0); id < benchRows; id++ {
				h := id * 0x9e3779b97f4a7c15 // spread ids over the segments
				line = strconv.AppendUint(line[:0], id, 10)
				line = append(line, ',')
				line = append(line, segs[(h>>32)%4]...)
				line = append(line, '\n')
				if _, err := w.Write(line); err != nil {
					genErr <- err
					return
				}
			}
			if err := w.Flush(); err != nil {
				genErr <- err
				return
			}
			genErr <- stdin.Close()
		}()
		if err := cmd.Wait(); err != nil {
			b.Fatalf("segment-builder: %v\n%s", err, stderr.String())
		}
		elapsed := time.Since(start)
		if err := <-genErr; err != nil {
			b.Fatal(err)
		}
		ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage)
		if !ok {
			b.Fatal("no rusage for the child")
		}
		peakRSS := float64(ru.Maxrss) * 1024 // Linux reports KiB

		st, err := objstore.Open(context.Background(), out, objstore.Options{})
		if err != nil {
			b.Fatal(err)
		}
		s, err := segments.Load(context.Background(), st, segments.LoadOptions{})
		if err != nil {
			b.Fatal(err)
		}
		if s.Users() != benchRows {
			b.Fatalf("snapshot holds %d users, want %d", s.Users(), benchRows)
		}
		var objBytes int64
		for _, in := range s.Segments() {
			objBytes += in.Bytes
		}
		rowsPerSec := benchRows / elapsed.Seconds()
		b.ReportMetric(rowsPerSec, "rows/s")
		b.ReportMetric(rowsPerSec/targetRowsPerSec, "x-of-2M-rows/s-target")
		b.ReportMetric(peakRSS/(1<<20), "peak-RSS-MiB")
		b.ReportMetric(peakRSS/targetPeakRSSBytes, "x-of-1GiB-RSS-target")
		b.ReportMetric(float64(objBytes)/benchRows, "bytes/user")
	}
}
