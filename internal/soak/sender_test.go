package soak

// The delivery service's hand-backs: it follows the deliveries as they
// come and hands back, as throttled with the delivery record, a share of
// the paced ones (capper gives each back and holds it again ahead of its
// lane). Through the faults, every status that hands a send back must
// have one outcome, and the caps hold over what the users received.

import (
	"context"
	"math/rand/v2"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/capper-dev/capper/internal/audit"
	"github.com/capper-dev/capper/internal/kafka"
)

// hander hands back one paced first delivery in handEvery, of those it
// reads before until (the budget releases most of the soak's paced
// intents after the traffic: the first minute of the drain too).
type hander struct {
	rng   *rand.Rand // a stream of its own: seeds keep their workload
	prod  *producer
	until time.Time

	mu sync.Mutex
	n  int // statuses written
}

const handEvery = 8

// run follows the deliveries topic from its start until ctx ends.
func (h *hander) run(ctx context.Context, addr string) error {
	tail, err := kafka.NewTail(kafka.ToolOptions([]string{addr}), tDeliveries)
	if err != nil {
		return err
	}
	defer tail.Close()
	ends, err := tail.Ends(ctx)
	if err != nil {
		return err
	}
	var wg sync.WaitGroup
	for part := range ends {
		wg.Go(func() {
			for off := int64(0); ; {
				m, err := tail.Read(ctx, part, off)
				if err != nil {
					return // ctx ended
				}
				off = m.Offset + 1
				h.maybeHandBack(ctx, m)
			}
		})
	}
	wg.Wait()
	return nil
}

// maybeHandBack hands d back when it is a paced first delivery (not a
// duplicate, nor an intent handed back before) the draw picks.
func (h *hander) maybeHandBack(ctx context.Context, d kafka.Message) {
	if header(d, hLane) == "" || header(d, hDuplicate) == "true" || header(d, "capper-handed-back") != "" || time.Now().After(h.until) {
		return
	}
	h.mu.Lock()
	pick := h.rng.IntN(handEvery) == 0
	h.mu.Unlock()
	if !pick {
		return
	}
	v, err := audit.HandBackStatus(d, time.Now())
	if err != nil {
		return // not an intent the soak wrote: the checks say so
	}
	if h.prod.write(ctx, tStatus, []kafka.Message{{Key: d.Key, Value: v}}) == nil {
		h.mu.Lock()
		h.n++
		h.mu.Unlock()
	}
}

// handedBack is how many statuses handed a send back.
func (h *hander) handedBack() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n
}

// hasHandBack reports whether the binary takes throttled sends back (its
// topics commands make the lanes' retry topics).
func hasHandBack(bin string) bool {
	out, _ := exec.Command(bin, "topics", "create", "--help").CombinedOutput()
	return strings.Contains(strings.Join(strings.Fields(string(out)), " "), "retry topic")
}
