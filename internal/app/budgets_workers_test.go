package app_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/capper-dev/capper/internal/app"
	"github.com/capper-dev/capper/internal/config"
	"github.com/capper-dev/capper/internal/pacing"
	"github.com/capper-dev/capper/internal/policy"
)

// apnsPolicy adds a budget whose lane topics pacePolicy's setup does not
// create.
var apnsPolicy = strings.Replace(pacePolicy, "budgets:\n", `budgets:
  - name: push-apns
    rate: 50
    channels: [push]
    routes: [apns]
`, 1)

// TestBudgetsSaysWhatTheWorkersRun: capper budgets reads the version the
// policy source holds, and what the workers report to Redis: the version
// they run, and one they refused (lane topics missing), flagged and
// counted, with Err naming it; once the topics exist the workers load it
// at their next poll, and budgets says every worker runs it. A worker
// that stops is no longer counted.
func TestBudgetsSaysWhatTheWorkersRun(t *testing.T) {
	e := newE2E(t, "single")
	e.publish(1000, 3)
	cfg := e.paceConfig(pacePolicy)
	cfg.Policy.PollInterval = config.Duration(200 * time.Millisecond)
	path := strings.TrimPrefix(cfg.Policy.Source, "file://")
	w1, w2 := e.start("w1", cfg), e.start("w2", cfg)
	running := policy.ContentHash([]byte(pacePolicy))
	log := slog.New(slog.DiscardHandler)
	report := func() *app.BudgetsReport {
		t.Helper()
		r, err := app.Budgets(context.Background(), cfg, app.BudgetsOptions{ConfigPath: "capper.yaml"}, log)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	var r *app.BudgetsReport
	waitFor(t, 10*time.Second, func() bool { r = report(); return r.Workers != nil && r.Workers.InUse[running] == 2 })
	if r.Policy != running || r.Err() != nil || r.Workers.Workers != 2 {
		t.Fatalf("before: policy %s, %+v, %v", r.Policy, r.Workers, r.Err())
	}
	var out bytes.Buffer
	if err := r.WriteList(&out); err != nil || !strings.Contains(out.String(), "1 budget in policy "+running+" (every worker runs it)\nworkers: 2 run "+running+"\n") {
		t.Fatalf("list before: %v\n%s", err, out.String())
	}

	if err := os.WriteFile(path, []byte(apnsPolicy), 0o644); err != nil {
		t.Fatal(err)
	}
	refused := policy.ContentHash([]byte(apnsPolicy))
	waitFor(t, 10*time.Second, func() bool { r = report(); return r.Workers.Refused[refused].Workers == 2 })
	if r.Policy != refused || r.Workers.InUse[running] != 2 || len(r.Budgets) != 2 {
		t.Fatalf("refused: policy %s, %+v", r.Policy, r.Workers)
	}
	err := r.Err()
	if !strings.Contains(fmtErr(err), "policy "+refused+": refused by 2 of 2 workers (they keep the version they run)") ||
		!strings.Contains(fmtErr(err), "capper-lanes.push-apns.marketing") {
		t.Errorf("Err: %v", err)
	}
	out.Reset()
	if err := r.WriteList(&out); err != nil || !strings.Contains(out.String(), "2 budgets in policy "+refused+" (the policy source's: REFUSED by the workers, which run another)\n") ||
		!strings.Contains(out.String(), "workers: 2 run "+running+"; 2 of 2 REFUSED "+refused+": ") {
		t.Errorf("list refused: %v\n%s", err, out.String())
	}

	// The lane topics created, the workers load it at their next poll.
	for _, topic := range []string{pacing.Topic(tLanes, "push-apns", pacing.DefaultLane), pacing.RetryTopic(tLanes, "push-apns", pacing.DefaultLane)} {
		if err := e.kafka.Cluster.CreateTopic(topic, 4, nil); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 10*time.Second, func() bool { r = report(); return r.Workers.InUse[refused] == 2 })
	if r.Err() != nil || len(r.Workers.Refused) != 0 {
		t.Errorf("loaded: %+v, %v", r.Workers, r.Err())
	}

	if err := w2.stop(t); err != nil && !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	if r = report(); r.Workers.Workers != 1 || r.Workers.InUse[refused] != 1 {
		t.Errorf("a worker stopped: %+v", r.Workers)
	}
	_ = w1
}

func fmtErr(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
