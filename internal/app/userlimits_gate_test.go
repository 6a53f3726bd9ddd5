package app_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/capper-dev/capper/internal/app"
	"github.com/capper-dev/capper/internal/config"
	capkafka "github.com/capper-dev/capper/internal/kafka"
)

// holdUserLimits makes the broker keep every fetch of the user-limits topic
// waiting until release is called (the applier reads nothing: records
// written meanwhile are not applied), as while the applier group
// rebalances or lags.
func (e *e2e) holdUserLimits() (release func()) {
	e.t.Helper()
	ch := make(chan struct{})
	var held atomic.Bool
	held.Store(true)
	c := e.kafka.Cluster
	c.ControlKey(int16(kmsg.Fetch), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if !held.Load() {
			return nil, nil, false
		}
		for _, t := range kreq.(*kmsg.FetchRequest).Topics {
			if t.Topic == tUserLimits {
				c.SleepControl(func() { <-ch })
				break
			}
		}
		return nil, nil, false
	})
	var once sync.Once
	release = func() {
		once.Do(func() {
			held.Store(false)
			close(ch)
		})
	}
	e.t.Cleanup(release)
	return release
}

// writeUser is `capper user set|snooze` without waiting for the workers.
func (e *e2e) writeUser(cfg *config.Config, uid uint64, c app.UserChange) {
	e.t.Helper()
	if _, err := app.SetUser(context.Background(), cfg, uid, c, app.SetUserOptions{}, slog.New(slog.DiscardHandler)); err != nil {
		e.t.Fatal(err)
	}
}

// waitReadyz waits until w's /readyz answers code with a body holding
// what.
func waitReadyz(t *testing.T, w *worker, code int, what string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, body := w.get("/readyz")
		if c == code && strings.Contains(body, what) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("worker %s: /readyz answers %d %q, want %d with %q", w.name, c, body, code, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitGroupStable waits until group has n members, each with partitions,
// and no rebalance under way.
func (e *e2e) waitGroupStable(group string, n int) {
	e.t.Helper()
	c := &kafka.Client{Addr: kafka.TCP(e.kafka.Addrs...)}
	waitFor(e.t, 30*time.Second, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		r, err := c.DescribeGroups(ctx, &kafka.DescribeGroupsRequest{GroupIDs: []string{group}})
		if err != nil || len(r.Groups) != 1 || r.Groups[0].GroupState != "Stable" || len(r.Groups[0].Members) != n {
			return false
		}
		for _, m := range r.Groups[0].Members {
			if len(m.MemberAssignments.Topics) == 0 {
				return false
			}
		}
		return true
	})
}

const usersNotApplied = "users' limits: records written before this worker got its partitions are not applied yet"

// TestReadyzWaitsForUserLimits: a worker that starts while a user's record
// is not applied yet answers /readyz 503, saying so, and decides nothing,
// until the record is applied; then it is ready and decides by it.
func TestReadyzWaitsForUserLimits(t *testing.T) {
	e := newE2E(t, "single")
	e.clock = newFastClock(1)
	e.publish(100, 7)
	cfg := e.userConfig(userPolicy)
	release := e.holdUserLimits()
	e.writeUser(cfg, 42, app.UserChange{Channels: map[string]int{"sms": 0}})
	e.produce(userIntents("r", 42, "sms"))
	a := e.start("a", cfg)
	waitReadyz(t, a, 503, usersNotApplied)
	if o := e.read(); len(o.sources()) != 0 {
		t.Fatalf("%d intents decided before the user's record was applied", len(o.sources()))
	}
	release()
	waitReadyz(t, a, 200, "ready")
	o := e.waitDrained(30*time.Second, a)
	if topic, m := o.outcomeOf("r-42-0"); topic != tSup || header(m, "capper-limit") != "user-channel/sms" {
		t.Errorf("user 42's sms: %s %s %q, want capped by the channel they turned off", topic, header(m, "capper-decision"), header(m, "capper-limit"))
	}
}

// TestRebalanceWaitsForUserLimits: with two workers running, users snooze
// while the applier reads nothing (their records wait); a third worker
// joins, and the group rebalances (cooperatively: only the partitions
// that move change hands). No worker decides an intent of a partition it
// got, before those records are applied: the newcomer answers /readyz 503
// saying so, and every user's intent written after the rebalance on a
// partition that moved is cancelled by the snooze, none delivered. The
// partitions that stayed are decided throughout, by what Redis holds (a
// record waits there no longer than the applier's lag).
func TestRebalanceWaitsForUserLimits(t *testing.T) {
	e := newE2E(t, "single")
	e.clock = newFastClock(1)
	e.publish(100, 7)
	cfg := e.userConfig(userPolicy)
	a, b := e.start("a", cfg), e.start("b", cfg)
	// Both have their partitions: a first intent of each user is
	// delivered.
	var msgs []kafka.Message
	for u := 60; u < 76; u++ {
		msgs = append(msgs, userIntents("before", u, "email")...)
	}
	e.produce(msgs)
	e.waitDrained(30*time.Second, a, b)
	e.waitGroupStable(cfg.Kafka.GroupID, 2)
	before := e.owners(cfg.Kafka.GroupID)

	release := e.holdUserLimits()
	for u := uint64(60); u < 76; u++ {
		e.writeUser(cfg, u, app.UserChange{SnoozeUntil: e.clock.Now().Add(30 * 24 * time.Hour)})
	}
	c := e.start("c", cfg)
	e.waitGroupStable(cfg.Kafka.GroupID, 3)
	after := e.owners(cfg.Kafka.GroupID)
	if code, body := c.get("/readyz"); code != 503 || !strings.Contains(body, usersNotApplied) {
		t.Errorf("the worker that joined: /readyz answers %d %q, want 503 with %q", code, body, usersNotApplied)
	}
	moved := map[int]bool{}
	for p, who := range after {
		moved[p] = before[p] != who
	}
	msgs = nil
	var movedUsers []int
	for u := 60; u < 76; u++ {
		msgs = append(msgs, userIntents("after", u, "email")...)
		if moved[userPartition(u, 4)] {
			movedUsers = append(movedUsers, u)
		}
	}
	if len(movedUsers) == 0 {
		t.Fatalf("no user's partition moved to the worker that joined: owners %v then %v", before, after)
	}
	e.produce(msgs)
	// Time for a worker that decides too early to do it.
	time.Sleep(2 * time.Second)
	o := e.read()
	for _, u := range movedUsers {
		if topic, _ := o.outcomeOf(fmt.Sprintf("after-%d-0", u)); topic != "" {
			t.Errorf("user %d's intent on a partition that moved was decided (%s) before the users' records were applied", u, topic)
		}
	}
	release()
	o = e.waitDrained(60*time.Second, a, b, c)
	for _, u := range movedUsers {
		id := fmt.Sprintf("after-%d-0", u)
		if topic, m := o.outcomeOf(id); topic != tSup || header(m, "capper-reason") != "snooze-too-long" {
			t.Errorf("user %d's intent after the rebalance: %s %s %q, want cancelled by the snooze written before it", u, topic,
				header(m, "capper-decision"), header(m, "capper-reason"))
		}
	}
	for _, w := range []*worker{a, b, c} {
		waitReadyz(t, w, 200, "ready")
	}
}

// owners is who owns each input partition of group (member ids).
func (e *e2e) owners(group string) map[int]string {
	e.t.Helper()
	tr := &kafka.Transport{}
	defer tr.CloseIdleConnections()
	o, err := capkafka.Owners(context.Background(), tr, e.kafka.Addrs, group)
	if err != nil {
		e.t.Fatal(err)
	}
	out := map[int]string{}
	for tp, who := range o {
		if tp.Topic == tIn {
			out[tp.Partition] = who
		}
	}
	return out
}

// userPartition is the input partition a user's intents go to (Murmur2 of
// the key, as the producers write them).
func userPartition(uid, partitions int) int {
	ps := make([]int, partitions)
	for i := range ps {
		ps[i] = i
	}
	return (&kafka.Murmur2Balancer{}).Balance(kafka.Message{Key: fmt.Appendf(nil, "%d", uid)}, ps...)
}
