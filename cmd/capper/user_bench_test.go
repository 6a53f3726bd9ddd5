package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/capper-dev/capper/internal/capping"
	capkafka "github.com/capper-dev/capper/internal/kafka"
	"github.com/capper-dev/capper/internal/testenv"
	"github.com/capper-dev/capper/internal/userlimits"
)

// BenchmarkUserLimitsApply: the apply lag of users' limits with two
// `capper run` workers. Records are written one at a time (acks=all), as a
// preference centre writes them; each one's lag is from its write's
// acknowledgement until Redis holds the user's new limits, which is when
// every worker's next decision reads them (no worker caches them). Prints
// p50 and p99, and p99's ratio to the 2 s goal.
// CAPPER_BENCH_USER_RECORDS sets how many records (default 200).
func BenchmarkUserLimitsApply(b *testing.B) {
	n := 200
	if v, err := strconv.Atoi(os.Getenv("CAPPER_BENCH_USER_RECORDS")); err == nil && v > 0 {
		n = v
	}
	s := newStack(b)
	const topic = "capper-user-limits"
	if err := s.kafka.Cluster.CreateTopic(topic, 4, map[string]string{"cleanup.policy": "compact"}); err != nil {
		b.Fatal(err)
	}
	example, err := os.ReadFile("../../configs/policy.yaml")
	if err != nil {
		b.Fatal(err)
	}
	pol := filepath.Join(b.TempDir(), "policy.yaml")
	if err := os.WriteFile(pol, []byte(strings.Replace(string(example), "user_limits: null\n", userPolicy, 1)), 0o644); err != nil {
		b.Fatal(err)
	}
	s.cfg.Policy.Source = "file://" + pol
	s.cfg.Kafka.Topics.UserLimits = topic
	s.writeConfig(b)
	s.start(b)
	s.cfg.HTTP.Address = fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(b))
	s.path = filepath.Join(b.TempDir(), "second.yaml")
	s.writeConfig(b)
	s.start(b)

	ctx := context.Background()
	rdb := s.redis.Client()
	k := s.cfg.Kafka
	kopts := capkafka.Options{Brokers: s.kafka.Addrs, ClientID: k.ClientID, GroupID: k.GroupID, StartOffset: k.StartOffset,
		FetchMaxWait: k.FetchMaxWait.D(), SessionTimeout: k.SessionTimeout.D(), RebalanceTimeout: k.RebalanceTimeout.D(),
		HeartbeatInterval: k.HeartbeatInterval.D(), WriteTimeout: k.WriteTimeout.D(), BatchSize: 1, Compression: k.Compression}
	var lags []time.Duration
	b.ResetTimer()
	for range b.N {
		lags = lags[:0]
		for i := range n {
			uid := uint64(1000 + i)
			l := capping.UserLimits{Tier: "fewer"}
			if i%2 == 1 {
				l = capping.UserLimits{Channels: map[string]int{"sms": 0}, SnoozeUntil: time.Now().Add(time.Hour).Truncate(time.Second)}
			}
			want := l.Encode()
			key := fmt.Sprintf("%s:{b%d}", s.cfg.Capping.KeyPrefix, uid/32)
			field := fmt.Sprintf("u%d", uid%32)
			if _, err := userlimits.Write(ctx, kopts, topic, userlimits.Record{UserID: uid, Limits: l}, time.Now()); err != nil {
				b.Fatal(err)
			}
			acked := time.Now()
			for {
				v, _ := rdb.HGet(ctx, key, field).Result()
				if v == want {
					break
				}
				if time.Since(acked) > 30*time.Second {
					b.Fatalf("user %d's limits not in Redis 30 s after the write (%q)", uid, v)
				}
				time.Sleep(time.Millisecond)
			}
			lags = append(lags, time.Since(acked))
		}
	}
	b.StopTimer()
	slices.Sort(lags)
	p50, p99 := lags[len(lags)/2], lags[len(lags)*99/100]
	b.ReportMetric(float64(p50.Microseconds())/1000, "ms-p50")
	b.ReportMetric(float64(p99.Microseconds())/1000, "ms-p99")
	b.ReportMetric(p99.Seconds()/2, "p99-ratio-to-2s")
	b.ReportMetric(float64(n), "records")
}
