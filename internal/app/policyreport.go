package app

// Which policy version the workers run: each worker writes, every poll
// interval, the version in use and the one its source holds when it
// refused it, into one Redis hash (every worker reaches Redis, and a
// worker that cannot decides nothing); `capper budgets` reads them back.
// An entry is stamped with Redis' clock, so that its age is measured on
// one clock; one older than three of its worker's intervals is a worker
// gone, and workers delete those an hour old.

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/capper-dev/capper/internal/policy"
)

// workersPolicyKey is the hash, under capping.key_prefix.
func workersPolicyKey(prefix string) string { return prefix + ":policy:workers" }

// policyEntry is a worker's report, as the hash holds it.
type policyEntry struct {
	InUse   string `json:"in_use"`
	Refused string `json:"refused,omitempty"` // the source's version, refused
	Error   string `json:"error,omitempty"`   // why (its first line)
	At      int64  `json:"at"`                // Redis' clock, unix ms
	EveryMs int64  `json:"every_ms"`          // the worker's report interval
}

// staleAfter is how long an entry counts: three reports missed.
func (e policyEntry) staleAfter() time.Duration {
	return 3*time.Duration(e.EveryMs)*time.Millisecond + 5*time.Second
}

// forgetAfter is when a worker deletes an entry it finds (a worker gone).
const forgetAfter = time.Hour

// policyReporter writes this worker's entry.
type policyReporter struct {
	rdb     redis.UniversalClient
	key, id string
	every   time.Duration
	watcher *policy.Watcher
	log     *slog.Logger
}

func newPolicyReporter(rdb redis.UniversalClient, prefix string, every time.Duration, w *policy.Watcher, log *slog.Logger) *policyReporter {
	// The host (a pod's name), the process and a random part: two workers
	// of one process (tests) are two entries.
	host, _ := os.Hostname()
	return &policyReporter{rdb: rdb, key: workersPolicyKey(prefix), id: fmt.Sprintf("%s/%d/%08x", host, os.Getpid(), rand.Uint32()),
		every: every, watcher: w, log: log}
}

// run reports at once and every interval until ctx ends, then deletes the
// entry (a worker stopped runs nothing). A failed report is logged once
// per ten.
func (r *policyReporter) run(ctx context.Context) error {
	t := time.NewTicker(r.every)
	defer t.Stop()
	failures := 0
	for {
		if err := r.report(ctx); err != nil && ctx.Err() == nil {
			if failures++; failures%10 == 1 {
				r.log.Warn("policy version not reported to Redis (capper budgets cannot show it)", "failures", failures, "error", err)
			}
		} else {
			failures = 0
		}
		select {
		case <-ctx.Done():
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
			defer cancel()
			_ = r.rdb.HDel(dctx, r.key, r.id).Err()
			return nil
		case <-t.C:
		}
	}
}

func (r *policyReporter) report(ctx context.Context) error {
	now, err := r.rdb.Time(ctx).Result()
	if err != nil {
		return err
	}
	e := policyEntry{At: now.UnixMilli(), EveryMs: r.every.Milliseconds()}
	if l := r.watcher.Current(); l != nil {
		e.InUse = l.Version
	}
	if f := r.watcher.Refused(); f != nil && f.Version != "" {
		e.Refused, e.Error = f.Version, oneLine(f.Err.Error(), 400)
	}
	v, err := json.Marshal(e)
	if err != nil {
		return err
	}
	if err := r.rdb.HSet(ctx, r.key, r.id, v).Err(); err != nil {
		return err
	}
	all, err := r.rdb.HGetAll(ctx, r.key).Result()
	if err != nil {
		return err
	}
	var gone []string
	for id, v := range all {
		var o policyEntry
		if json.Unmarshal([]byte(v), &o) != nil || now.Sub(time.UnixMilli(o.At)) > forgetAfter {
			gone = append(gone, id)
		}
	}
	if len(gone) > 0 {
		return r.rdb.HDel(ctx, r.key, gone...).Err()
	}
	return nil
}

// oneLine is s on one line ("; " between its lines), at most n bytes.
func oneLine(s string, n int) string {
	s = strings.ReplaceAll(s, "\n", "; ")
	if len(s) > n {
		s = strings.ToValidUTF8(s[:n], "") + "..."
	}
	return s
}

// WorkersPolicy is what the workers report running.
type WorkersPolicy struct {
	Workers int            // reporting now
	InUse   map[string]int // workers by the version they run
	// Refused are the versions workers refused, each with how many and
	// why (one worker's error).
	Refused map[string]Refusal
}

// Refusal is a version workers refused.
type Refusal struct {
	Workers int
	Error   string
}

// readWorkersPolicy reads the workers' entries that are current on Redis'
// clock.
func readWorkersPolicy(ctx context.Context, rdb redis.UniversalClient, prefix string) (WorkersPolicy, error) {
	w := WorkersPolicy{InUse: map[string]int{}, Refused: map[string]Refusal{}}
	now, err := rdb.Time(ctx).Result()
	if err != nil {
		return w, err
	}
	all, err := rdb.HGetAll(ctx, workersPolicyKey(prefix)).Result()
	if err != nil {
		return w, err
	}
	for _, v := range all {
		var e policyEntry
		if json.Unmarshal([]byte(v), &e) != nil || now.Sub(time.UnixMilli(e.At)) > e.staleAfter() {
			continue
		}
		w.Workers++
		w.InUse[e.InUse]++
		if e.Refused != "" {
			r := w.Refused[e.Refused]
			r.Workers++
			r.Error = e.Error
			w.Refused[e.Refused] = r
		}
	}
	return w, nil
}

// versions are the versions in use, most workers first.
func (w WorkersPolicy) versions() []string {
	vs := make([]string, 0, len(w.InUse))
	for v := range w.InUse {
		vs = append(vs, v)
	}
	slices.SortFunc(vs, func(a, b string) int {
		if w.InUse[a] != w.InUse[b] {
			return w.InUse[b] - w.InUse[a]
		}
		return strings.Compare(a, b)
	})
	return vs
}
