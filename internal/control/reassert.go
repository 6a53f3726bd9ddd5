package control

// Re-assertion: compaction keeps only the latest record of a key, so a
// foreign record written after a stop (malformed, a tombstone, another
// campaign's record under its key) would make the stop disappear at the
// next compaction, and a worker started afterwards would deliver the
// campaign. The follower skips such a record (the key keeps its state) and,
// once it has stood ReassertAfter (plus jitter, so that one of several
// workers usually writes), writes the key's last valid record again, byte
// for byte, to the same partition: the latest record of the key is then
// the valid state, whatever compaction removes. The topic's
// min.compaction.lag.ms bounds how long that may take with no worker
// running (docs/operations/stopping-a-campaign.md).

import (
	"context"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"
)

// keyAt is a key in one partition: compaction works per partition.
type keyAt struct {
	partition int
	key       string
}

// keyState is what the follower knows of a key's records.
type keyState struct {
	valid   []byte // the value of its last valid record (nil: none)
	foreign bool   // its latest record is not a valid one
}

// reasserter schedules and writes re-assertions; schedule and the due
// channel belong to the builder's goroutine, the writes run on their own.
type reasserter struct {
	f         *Follower
	scheduled map[keyAt]bool
	dueC      chan keyAt
	wg        sync.WaitGroup
	stop      chan struct{}
	once      sync.Once
}

func newReasserter(f *Follower) *reasserter {
	return &reasserter{f: f, scheduled: map[keyAt]bool{}, dueC: make(chan keyAt, 16), stop: make(chan struct{})}
}

// due delivers keys whose re-assertion time has come.
func (r *reasserter) due() <-chan keyAt { return r.dueC }

// schedule asks for k to be looked at again after ReassertAfter and up to
// as much again; nothing without a Writer.
func (r *reasserter) schedule(k keyAt) {
	if r.f.o.Writer == nil || r.scheduled[k] {
		return
	}
	r.scheduled[k] = true
	d := r.f.o.ReassertAfter + rand.N(r.f.o.ReassertAfter)
	r.later(k, d)
}

func (r *reasserter) later(k keyAt, d time.Duration) {
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-r.stop:
			return
		}
		select {
		case r.dueC <- k:
		case <-r.stop:
		}
	}()
}

// wait ends every timer and write (on shutdown).
func (r *reasserter) wait() {
	r.once.Do(func() { close(r.stop) })
	r.wg.Wait()
}

// reassertDue writes k's last valid record again if its latest record is
// still a foreign one; a failed write is logged and tried again later.
func (b *builder) reassertDue(ctx context.Context, k keyAt) {
	r := b.reassert
	delete(r.scheduled, k)
	ks := b.keys[k]
	if ks == nil || !ks.foreign || ks.valid == nil {
		return // a valid record came since (ours or another worker's)
	}
	r.scheduled[k] = true // until the write's answer
	value := ks.valid
	f := b.f
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		off, err := f.o.Writer.WriteRecord(ctx, k.partition, []byte(k.key), value)
		if err != nil {
			if ctx.Err() == nil {
				f.o.Logger.Warn("cannot re-assert a control record after a foreign one; trying again", "topic", f.o.Topic,
					"partition", k.partition, "key", k.key, "error", err)
			}
			r.again(k)
			return
		}
		f.m.reasserted.Inc()
		f.o.Logger.Warn("control record re-asserted after a foreign record under its key, so that compaction keeps it",
			"key", k.key, "position", f.o.Topic+"/"+strconv.Itoa(k.partition)+"/"+strconv.FormatInt(off, 10))
		r.again(k)
	}()
}

// again sends k back to the builder after ReassertAfter: it clears the
// schedule and looks again (nothing to do once the written record is read).
func (r *reasserter) again(k keyAt) {
	select {
	case <-r.stop:
	default:
		r.later(k, r.f.o.ReassertAfter)
	}
}
