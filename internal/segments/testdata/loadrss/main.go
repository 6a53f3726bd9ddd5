// Command loadrss loads the segment snapshot of a directory store as a
// worker does and prints what it cost: load time, the snapshot's sizes and
// the process's resident memory (VmRSS now, VmHWM the peak). The 270M-user
// benchmark runs it as a child, so that the builder's memory is not counted.
package main

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/capper-dev/capper/internal/objstore"
	"github.com/capper-dev/capper/internal/segments"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "loadrss:", err)
		os.Exit(1)
	}
}

func run() error {
	if len(os.Args) != 2 {
		return fmt.Errorf("usage: loadrss DIR")
	}
	ctx := context.Background()
	st, err := objstore.Open(ctx, os.Args[1], objstore.Options{})
	if err != nil {
		return err
	}
	start := time.Now()
	s, err := segments.Load(ctx, st, segments.LoadOptions{})
	if err != nil {
		return err
	}
	took := time.Since(start)
	runtime.GC()
	var bitmaps int64
	for _, in := range s.Segments() {
		bitmaps += in.Bytes
	}
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return err
	}
	field := func(name string) string {
		for _, line := range strings.Split(string(status), "\n") {
			if v, ok := strings.CutPrefix(line, name+":"); ok {
				return strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB"))
			}
		}
		return "0"
	}
	fmt.Printf("load_ms %d\nbitmap_bytes %d\nindex_bytes %d\nrss_kb %s\nhwm_kb %s\nsegments %d\n",
		took.Milliseconds(), bitmaps, s.IndexBytes(), field("VmRSS"), field("VmHWM"), len(s.Segments()))
	runtime.KeepAlive(s)
	return nil
}
