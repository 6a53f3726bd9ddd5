package testenv

// A test binary that runs away in memory (in CI once: a leaked kafka-go
// transport decoding an HTTP server's answer as Kafka, a multi-GB slice
// from a garbage length) swaps a CI machine for many minutes before
// anything fails, and its goroutines are then too slow to dump.
// GuardMemory ends it early, saying what ran.

import (
	"fmt"
	"io"
	"os"
	"runtime/metrics"
	"runtime/pprof"
	"strings"
	"time"
)

// MemoryLimitEnv overrides GuardMemory's limit (bytes; 0 turns it off).
const MemoryLimitEnv = "CAPPER_TEST_MEMORY_LIMIT"

// GuardMemory watches the test binary's resident memory every second: once it
// passes limit (or $CAPPER_TEST_MEMORY_LIMIT), it writes every goroutine's
// stack (the running tests among them) and the heap's allocation sites
// to stderr, and exits with status 2. Call it from TestMain.
func GuardMemory(limit uint64) {
	if v := os.Getenv(MemoryLimitEnv); v != "" {
		if _, err := fmt.Sscan(v, &limit); err != nil {
			fmt.Fprintf(os.Stderr, "%s=%q: not a number of bytes\n", MemoryLimitEnv, v)
			os.Exit(2)
		}
	}
	if limit == 0 {
		return
	}
	go func() {
		for range time.Tick(time.Second) {
			if used := residentMemory(); used > limit {
				overLimit(os.Stderr, used, limit)
				os.Exit(2)
			}
		}
	}()
}

// residentMemory is the memory the test binary holds: its resident set (Linux:
// /proc/self/status, VmRSS), or elsewhere what the Go runtime holds from
// the OS less what it released. The resident set, not the heap: a huge
// slice a decoder makes from a garbage length is mapped, not touched,
// until memory it reuses must be zeroed.
func residentMemory() uint64 {
	if b, err := os.ReadFile("/proc/self/status"); err == nil {
		for l := range strings.Lines(string(b)) {
			if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
				var kb uint64
				if _, err := fmt.Sscan(strings.TrimSuffix(strings.TrimSpace(v), " kB"), &kb); err == nil {
					return kb << 10
				}
			}
		}
	}
	s := []metrics.Sample{{Name: "/memory/classes/total:bytes"}, {Name: "/memory/classes/heap/released:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64() - s[1].Value.Uint64()
}

func overLimit(w io.Writer, used, limit uint64) {
	fmt.Fprintf(w, "testenv: the test binary holds %d MiB, over its limit of %d MiB (%s): its goroutines and heap follow\n",
		used>>20, limit>>20, MemoryLimitEnv)
	_ = pprof.Lookup("goroutine").WriteTo(w, 2)
	_ = pprof.Lookup("heap").WriteTo(w, 1)
}
