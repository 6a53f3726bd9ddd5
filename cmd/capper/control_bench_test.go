package main

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/capper-dev/capper/internal/app"
	"github.com/capper-dev/capper/internal/config"
	"github.com/capper-dev/capper/internal/control"
	"github.com/capper-dev/capper/internal/testenv"
)

// targetPropagation is campaign control's goal: a stop reaches every
// running worker within this (p99), from its acknowledgement.
const targetPropagation = 2 * time.Second

// BenchmarkControlPropagation: four `capper run` processes with the
// default settings follow the control topic; `capper campaign`'s write
// (app.SetCampaign: acks=all) of a stop, a pause or a resume is timed from
// its acknowledgement until each worker reports it applied
// (capper_control_applied_offset reaching it, at
// capper_control_applied_timestamp_seconds: the same machine's clock).
// Prints the p50, p99 and max over every (record, worker) and the p99's
// ratio to the 2 s target.
func BenchmarkControlPropagation(b *testing.B) {
	const workers = 4
	s := newStack(b)
	s.createTopic(b, "capper-control")
	s.createTopic(b, "send-intents-delay-1m")
	def := config.Default()
	// The defaults this figure is for (the stack's are shortened for tests).
	s.cfg.Kafka.FetchMaxWait, s.cfg.Kafka.SessionTimeout, s.cfg.Kafka.HeartbeatInterval = def.Kafka.FetchMaxWait, def.Kafka.SessionTimeout, def.Kafka.HeartbeatInterval
	s.cfg.Kafka.Topics.Control = "capper-control"
	s.cfg.Kafka.DelayTiers = []config.DelayTier{{Delay: config.Duration(time.Minute), Topic: "send-intents-delay-1m"}}
	var urls []string
	for range workers {
		s.cfg.HTTP.Address = fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(b))
		s.path = filepath.Join(b.TempDir(), "capper.yaml")
		s.writeConfig(b)
		s.start(b)
		urls = append(urls, "http://"+s.cfg.HTTP.Address+"/metrics")
	}
	states := []control.State{control.Stopped, control.Active, control.Paused, control.Active}
	var lags []time.Duration
	for i := 0; b.Loop(); i++ {
		ch := app.CampaignChange{Campaign: fmt.Sprintf("campaign-%d", i%50), State: states[i%len(states)], Reason: "benchmark", By: "bench"}
		w, err := app.SetCampaign(context.Background(), s.cfg, ch, slog.New(slog.DiscardHandler))
		if err != nil {
			b.Fatal(err)
		}
		acked := time.Now()
		for _, u := range urls {
			// A worker may apply it before the writer sees its
			// acknowledgement: no lag then.
			lags = append(lags, max(appliedAt(b, u, w.Position).Sub(acked), 0))
		}
	}
	slices.Sort(lags)
	q := func(p float64) time.Duration { return lags[min(len(lags)-1, int(math.Ceil(p*float64(len(lags))))-1)] }
	b.ReportMetric(float64(q(0.5).Milliseconds()), "p50-ms")
	b.ReportMetric(float64(q(0.99).Milliseconds()), "p99-ms")
	b.ReportMetric(float64(lags[len(lags)-1].Milliseconds()), "max-ms")
	b.ReportMetric(q(0.99).Seconds()/targetPropagation.Seconds(), "p99-x-of-2s-target")
	b.Logf("control propagation to %d workers over %d records: p50 %s, p99 %s, max %s (target p99 %s)",
		workers, len(lags)/workers, q(0.5), q(0.99), lags[len(lags)-1], targetPropagation)
}

var (
	appliedOffsetRE = regexp.MustCompile(`(?m)^capper_control_applied_offset\{partition="(\d+)"\} (\S+)$`)
	appliedAtRE     = regexp.MustCompile(`(?m)^capper_control_applied_timestamp_seconds (\S+)$`)
)

// appliedAt polls a worker's /metrics until it applied the record at pos,
// and returns when it did (its clock).
func appliedAt(b *testing.B, url string, pos control.Position) time.Time {
	b.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		_, body := httpBody(b, url)
		for _, m := range appliedOffsetRE.FindAllStringSubmatch(body, -1) {
			off, _ := strconv.ParseFloat(m[2], 64)
			if m[1] == strconv.Itoa(pos.Partition) && int64(off) >= pos.Offset {
				// The time from the next scrape: one scrape reads the two
				// gauges at different moments (it may read the time from
				// before the publish whose offset it reads).
				_, body = httpBody(b, url)
				t := appliedAtRE.FindStringSubmatch(body)
				sec, _ := strconv.ParseFloat(t[1], 64)
				return time.UnixMilli(int64(math.Round(sec * 1000)))
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	b.Fatalf("%s did not apply %s in 30s", url, pos)
	return time.Time{}
}
