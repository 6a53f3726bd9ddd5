package soak

// The control faults: a foreign record under a stopped campaign's key,
// then a compaction of the control topic (only the latest record of each
// key is left) and a worker started on what it left; a stop written while
// Redis stalls in the middle of a blast of that campaign. Both end in a
// held window: no delivery of the campaign may be decided in it.

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/capper-dev/capper/internal/kafka"

	"github.com/capper-dev/capper/internal/audit"
	"github.com/capper-dev/capper/internal/testenv"
)

// foreign are the records a fault writes under a stopped campaign's key,
// by kind: none of them a valid record of that campaign.
func foreign(kind, campaign string, now time.Time) []byte {
	switch kind {
	case "tombstone":
		return nil
	case "other-campaign": // a valid record, of another campaign
		other := "c9"
		if campaign == other {
			other = "c8"
		}
		at := now.UTC().Format(time.RFC3339Nano)
		b, _ := json.Marshal(map[string]string{"campaign": other, "state": "active", "by": "soak", "at": at, "since": at})
		return b
	default: // malformed
		return []byte(`{"campaign": "` + campaign + `", "state": `)
	}
}

var foreignKinds = []string{"malformed", "tombstone", "other-campaign"}

// compaction stops a campaign through the binary, writes two foreign
// records under its key (each its own batch: compaction keeps a
// partition's last batch whole, so the first one is what it keeps of the
// key unless something valid follows), lets the workers see them (4 s), compacts
// the control topic, and restarts a worker, which reads only what the
// compaction left. The campaign stays stopped until its resume.
func (c *chaos) compaction(ctx context.Context, f fault) {
	t := c.t
	campaign := fmt.Sprintf("c%d", 1+f.target%5)
	pos := c.campaign("stop", campaign, "--reason", "soak: "+f.kind)
	from := c.appliedAt(ctx, pos)
	partition, err := strconv.Atoi(strings.Split(pos, "/")[len(strings.Split(pos, "/"))-2])
	if err != nil {
		t.Fatalf("control record position %q: %v", pos, err)
	}
	first := foreignKinds[f.target%len(foreignKinds)]
	second := foreignKinds[(f.target+1)%len(foreignKinds)]
	for _, kind := range []string{first, second} {
		m := kafka.Message{Key: []byte("campaign/" + campaign), Value: foreign(kind, campaign, time.Now())}
		if err := c.broker.writeTo(ctx, tControl, partition, m); err != nil {
			t.Fatalf("write a %s record under campaign/%s: %v", kind, campaign, err)
		}
	}
	// The workers read them, and answer them if they do (a worker
	// re-asserts a key's state within 2 s). kfake compacts when asked,
	// ignoring min.compaction.lag.ms, which a deployment sets to days (the
	// worker warns otherwise): compacting sooner than the workers could
	// answer would model no deployment.
	sleep(ctx, 4*time.Second)
	c.broker.compact()
	left := c.underKey(ctx, "campaign/"+campaign)
	w := c.workers[f.target%len(c.workers)]
	down := time.Now()
	w.signal(syscall.SIGTERM, 20*time.Second)
	w.start(t, c.bin, c.dir)
	c.workerDown = append(c.workerDown, downWindow{down, time.Now()})
	ready := c.waitReady(ctx, w, time.Minute)
	// Long enough for the restarted worker to get partitions and decide.
	sleep(ctx, f.length+4*time.Second)
	to := time.Now()
	c.campaign("resume", campaign)
	c.held = append(c.held, heldWindow{campaign: campaign, state: "stopped", from: from, to: to})
	c.note("control-compaction: %s stopped (record %s), then a %s and a %s record under campaign/%s, the control topic compacted (left under the key: %s), %s restarted (ready: %v); resumed %.1fs later",
		campaign, pos, first, second, campaign, left, w.name, ready, time.Since(from).Seconds())
}

// stopInStall writes a blast of one campaign (300 users, one intent each),
// stalls Redis (SIGSTOP: the single node, or every master) as the workers
// start deciding it, stops the campaign through the binary during the
// stall, then lets Redis go on. Every intent of the blast decided after
// the stop is cancelled; whatever the stalled attempts recorded must not
// stay counted (the final Redis check).
func (c *chaos) stopInStall(ctx context.Context, f fault) {
	campaign := fmt.Sprintf("c%d", 1+f.target%5)
	now := time.Now()
	var blast []kafka.Message
	for k := range 300 {
		u := 1 + (f.target+7*k)%(users-1)
		v, _ := json.Marshal(map[string]any{"id": fmt.Sprintf("blast-%d-%d", f.target, k), "user_id": u, "campaign_id": campaign,
			"channel": "email", "created_at": now.UTC().Format(time.RFC3339)})
		blast = append(blast, kafka.Message{Key: []byte(strconv.Itoa(u)), Value: v})
	}
	if err := c.prod.write(ctx, tIn, blast); err != nil {
		c.t.Fatalf("write the blast: %v", err)
	}
	// Stalled at once: the workers get the blast as the broker appends it
	// (they wait on a fetch) and send it to Redis after the batch wait
	// (20 ms), so their first attempt meets a stalled Redis, which runs it
	// when it goes on, after the stop (a batch answered before the stall
	// would leave nothing to check).
	var stalled []*testenv.Redis
	if c.tp.single != nil {
		stalled = []*testenv.Redis{c.tp.single}
	} else {
		// Every master: no replica can be elected meanwhile (the votes
		// are the masters').
		stalled = c.tp.byRole(ctx, "master")
	}
	c.outage.begin(f.kind, "")
	stallAt := time.Now()
	for _, n := range stalled {
		n.Pause()
	}
	pos := c.campaign("stop", campaign, "--reason", "soak: "+f.kind)
	from := c.appliedAt(ctx, pos)
	sleep(ctx, time.Until(stallAt.Add(f.length)))
	c.outage.end()
	for _, n := range stalled {
		n.Resume()
	}
	stall := time.Since(stallAt)
	sleep(ctx, 3*time.Second) // the stalled batches retry, and cancel what they had not decided
	to := time.Now()
	c.campaign("resume", campaign)
	c.held = append(c.held, heldWindow{campaign: campaign, state: "stopped", from: from, to: to})
	c.note("stop-in-stall: a blast of %d intents of %s, Redis stalled (%d nodes) for %.1fs, %s stopped during it (record %s), resumed 3s after the stall",
		len(blast), campaign, len(stalled), stall.Seconds(), campaign, pos)
}

// underKey describes the records the control topic holds under key, in
// order, for the report: what a worker started now reads of it.
func (c *chaos) underKey(ctx context.Context, key string) string {
	msgs, err := audit.ReadTopic(ctx, []string{c.broker.addr}, tControl)
	if err != nil {
		return fmt.Sprintf("(read the control topic: %v)", err)
	}
	var out []string
	for _, m := range msgs {
		if string(m.Key) != key {
			continue
		}
		var v struct{ Campaign, State string }
		switch {
		case len(m.Value) == 0:
			out = append(out, fmt.Sprintf("%d tombstone", m.Offset))
		case json.Unmarshal(m.Value, &v) != nil:
			out = append(out, fmt.Sprintf("%d malformed", m.Offset))
		default:
			out = append(out, fmt.Sprintf("%d %s %s", m.Offset, v.Campaign, v.State))
		}
	}
	return "[" + strings.Join(out, ", ") + "]"
}

// waitReady waits until w answers /readyz 200 (at most d).
func (c *chaos) waitReady(ctx context.Context, w *worker, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for ctx.Err() == nil && time.Now().Before(deadline) {
		if code, _, _ := w.get("/readyz"); code == 200 {
			return true
		}
		time.Sleep(100 * time.Millisecond)
	}
	return false
}
