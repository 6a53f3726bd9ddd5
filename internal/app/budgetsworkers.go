package app

// What `capper budgets` says of the workers: the policy versions they run
// and the ones they refused, as they report them to Redis
// (policyreport.go), beside the version the policy source holds.

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/capper-dev/capper/internal/config"
)

// readWorkers sets r.Workers from Redis, or r.WorkersErr.
func (r *BudgetsReport) readWorkers(ctx context.Context, rdb redis.UniversalClient, cfg *config.Config) {
	ctx, cancel := context.WithTimeout(ctx, 2*cfg.Redis.DialTimeout.D()+time.Second)
	defer cancel()
	w, err := readWorkersPolicy(ctx, rdb, cfg.Capping.KeyPrefix)
	if err != nil {
		r.WorkersErr = fmt.Errorf("read what the workers report from Redis: %w", err)
		return
	}
	r.Workers = &w
}

// refusal is what the workers say of the source's version: refused by
// some of them (ok), with why.
func (r *BudgetsReport) refusal() (Refusal, bool) {
	if r.Workers == nil {
		return Refusal{}, false
	}
	f, ok := r.Workers.Refused[r.Policy]
	return f, ok
}

// workersLine says, for a person, which versions the workers run and
// which they refused; "" when they were not asked (--policy).
func (r *BudgetsReport) workersLine() string {
	switch w := r.Workers; {
	case w == nil && r.WorkersErr == nil:
		return ""
	case w == nil:
		return fmt.Sprintf("workers: not known (%v)", r.WorkersErr)
	case w.Workers == 0:
		return "workers: none reports a policy version (none running?)"
	}
	w := r.Workers
	var run []string
	for _, v := range w.versions() {
		run = append(run, fmt.Sprintf("%d run %s", w.InUse[v], cmpVersion(v)))
	}
	s := "workers: " + strings.Join(run, ", ")
	refused := make([]string, 0, len(w.Refused))
	for v := range w.Refused {
		refused = append(refused, v)
	}
	sort.Strings(refused)
	for _, v := range refused {
		f := w.Refused[v]
		s += fmt.Sprintf("; %d of %d REFUSED %s: %s", f.Workers, w.Workers, v, f.Error)
	}
	return s
}

// policyMark says what the workers do with the source's version.
func (r *BudgetsReport) policyMark() string {
	w := r.Workers
	switch _, refused := r.refusal(); {
	case refused:
		return " (the policy source's: REFUSED by the workers, which run another)"
	case w != nil && w.Workers > 0 && w.InUse[r.Policy] == w.Workers:
		return " (every worker runs it)"
	case w != nil && w.Workers > 0:
		return " (the policy source's: not every worker runs it yet)"
	}
	return ""
}

// cmpVersion names a version in use ("" : none, a worker still starting).
func cmpVersion(v string) string {
	if v == "" {
		return "none yet"
	}
	return v
}

// refusedErr is the error of a source's version the workers refused.
func (r *BudgetsReport) refusedErr() error {
	f, ok := r.refusal()
	if !ok {
		return nil
	}
	return fmt.Errorf("policy %s: %w by %d of %d workers (they keep the version they run): %s", r.Policy, errRefused, f.Workers, r.Workers.Workers, f.Error)
}

var errRefused = errors.New("refused")

// workersJSON is the workers' part of WriteJSON.
type workersJSON struct {
	Reporting int                    `json:"reporting"`
	InUse     map[string]int         `json:"in_use"`
	Refused   map[string]refusalJSON `json:"refused"`
}

type refusalJSON struct {
	Workers int    `json:"workers"`
	Error   string `json:"error"`
}

// workersDoc is r.Workers for WriteJSON (nil: not known).
func (r *BudgetsReport) workersDoc() *workersJSON {
	w := r.Workers
	if w == nil {
		return nil
	}
	j := &workersJSON{Reporting: w.Workers, InUse: w.InUse, Refused: map[string]refusalJSON{}}
	for v, f := range w.Refused {
		j.Refused[v] = refusalJSON(f)
	}
	return j
}
