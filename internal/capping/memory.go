package capping

// Memory: the engine's decisions without Redis, for replaying past traffic
// through a policy. It keeps every user's record in the script's packed
// layout (record.go) and runs the script's steps on it in Go, with the same
// compiled policy set (scopes, their ids and retention, the campaign and id
// digests, maxIdem): what a replay decides is what Redis would have, hash
// collisions included, and the record costs what it costs in Redis.

import (
	"encoding/binary"
	"fmt"
	"strings"
	"time"
)

// MemoryOptions configure NewMemory.
type MemoryOptions struct {
	Rules Rules
	// PolicyVersion names Rules in every Decision (Decision.Policy).
	PolicyVersion string
	// IdempotencyWindow: duplicates are recognised this long (the
	// worker's capping.idempotency_window).
	IdempotencyWindow time.Duration
}

// Memory decides requests one after another as Engine.Decide would for the
// same sequence, with the records in process memory. It is not safe for
// concurrent use. Keys never expire (Redis expires them by its own clock,
// which a replay does not have); a bucket's sweep of users who stopped
// receiving happens as the script does it, by decision time.
type Memory struct {
	set *policySet
	// users: a user's record, exactly the bytes the script would store.
	users map[uint64]string
	// buckets: the fields of each bucket ever written (uid/bucketSize)
	// beside its records.
	buckets map[uint64]bucket
	known   periods
	asm     assembly // reused by every Decide
	reqs    [1]Request
	out     []byte // the record being written
}

// NewMemory validates and compiles the rules.
func NewMemory(o MemoryOptions) (*Memory, error) {
	if o.IdempotencyWindow < time.Second {
		return nil, fmt.Errorf("capping: idempotency window %s must be at least 1s", o.IdempotencyWindow)
	}
	set, err := compileRules(o.Rules, o.IdempotencyWindow)
	if err != nil {
		return nil, fmt.Errorf("capping: rules: %w", err)
	}
	set.name = o.PolicyVersion
	return &Memory{set: set, users: map[uint64]string{}, buckets: map[uint64]bucket{}}, nil
}

// Users is the number of users with a record.
func (m *Memory) Users() int { return len(m.users) }

// Decide decides one request and, when it is allowed, records it, with the
// engine's steps (assemble.go) around run, the script's Go port. Invalid
// requests are answered with an Err wrapping ErrInvalidRequest, an attempt
// a give-back voided with one wrapping ErrVoided.
func (m *Memory) Decide(r *Request) Decision {
	// The memo holds a batch's periods in the engine; a replay's time
	// moves on, so it starts over when full.
	if len(m.known.list) >= 64 {
		m.known.list = m.known.list[:0]
	}
	m.reqs[0] = *r
	a := &m.asm
	m.set.assemble(a, m.reqs[:], nil, &m.known)
	for k := range a.calls {
		c := &a.calls[k]
		var err error
		rep := m.run(r, c.plan, c.bypass)
		switch {
		case rep.code == codeVoided: // as Engine.Decide answers it
			err = fmt.Errorf("decide: %w", ErrVoided)
		case rep.code > codeHeld: // the reply is built here; this would be a bug in run
			err = fmt.Errorf("decide: run answered code %d", rep.code)
		}
		a.answer(k, rep, err)
	}
	a.finish()
	return a.out[0]
}

// run is packed.lua.tmpl for one request: its reply. The steps and their
// order are the script's; keep them in step.
func (m *Memory) run(r *Request, c callPlan, bypass bool) reply {
	set := m.set
	now := r.At.Unix()
	rec, ok := m.users[r.UserID]
	if !ok {
		rec = "\x00" // no entries, no sections
	}
	dg := digest(r.IntentID)
	d5 := string(dg[:digestSize])
	cur := cursor{rec: rec}
	ib, sb := cur.entries()
	var camp string
	if set.args.pos[argCampaign] > 0 {
		h := campaignHash(r.Campaign)
		camp = string(h[:])
	}

	// A duplicate: the first entry with this digest that is young enough.
	for p := ib; p < sb; p += idemEntrySize {
		if rec[p:p+digestSize] == d5 {
			if t := u32(rec, p+digestSize); t >= now-set.idem {
				return reply{code: codeDuplicate, t: t}
			}
		}
	}

	if !bypass {
		if rep, capped := m.check(r, c, rec, sb, camp); capped {
			return rep
		}
	}
	// A voided attempt (given back before it ran) records nothing.
	if e := voidDigest(d5) + packTime(now); strings.Contains(rec[ib:sb], e) {
		for p := ib; p < sb; p += idemEntrySize {
			if rec[p:p+idemEntrySize] == e {
				return reply{code: codeVoided}
			}
		}
	}
	m.record(r, c, rec, ib, sb, camp)
	return reply{code: codeAllowed}
}

// check is the script's limit checks: the first full limit that applies,
// in policy order.
func (m *Memory) check(r *Request, c callPlan, rec string, sb int, camp string) (reply, bool) {
	set, now := m.set, r.At.Unix()
	// Where the logs the limits read are (the last section that matches,
	// as the script's loop leaves it).
	var logs [MaxScopes]sectionPos
	cur := cursor{rec: rec, p: sb}
	var s sectionPos
	for cur.next(&s) {
		for i, sc := range set.scopes {
			if s.id == sc.id && (sc.per != PerCampaign || s.campaign(rec) == camp) {
				logs[i] = s
			}
		}
	}
	for li, l := range set.pols[c.pol].limits {
		if c.applies&(1<<li) == 0 {
			continue
		}
		rep := reply{code: codeCapped, limit: int64(li + 1)}
		if l.Max == 0 {
			return rep, true
		}
		mx := l.Max
		if l.Reserve.Slots > 0 && r.Priority < l.Reserve.Below {
			mx = l.Max - l.Reserve.Slots
		}
		start := now - l.window
		if l.Calendar != None {
			start = c.cal[l.Calendar-1].start
		}
		log := &logs[l.scope]
		if t, full := log.full(rec, mx, start); full {
			if l.Calendar == None {
				rep.t = t
			}
			return rep, true
		}
		// Campaign plans of a higher priority book slots: held when they
		// make the difference.
		if b := int(c.booked[li]); b > 0 {
			rep.code = codeHeld
			if mx <= b {
				return rep, true
			}
			if t, full := log.full(rec, mx-b, start); full {
				if l.Calendar == None {
					rep.t = t
				}
				return rep, true
			}
		}
	}
	return reply{}, false
}

// full reports whether a log holds m sends at or after start, and the m-th
// newest's time: a trimmed log holding fewer counts its dropped sends as at
// its oldest.
func (log *sectionPos) full(rec string, m int, start int64) (int64, bool) {
	i := log.n() - m
	if i < 0 && log.trimmed && log.n() > 0 {
		i = 0
	}
	if i < 0 {
		return 0, false
	}
	t := u32(rec, log.times+timeSize*i)
	return t, t >= start
}

// record is the script's write of an allowed intent: its idempotency
// entry, its send in the sections of its scopes, each section trimmed to
// what a limit can still count, and the bucket's sweep.
func (m *Memory) record(r *Request, c callPlan, rec string, ib, sb int, camp string) {
	now := r.At.Unix()
	var nowb [timeSize]byte
	binary.BigEndian.PutUint32(nowb[:], uint32(now))
	out := m.appendIdem(m.out[:0], r.IntentID, rec, ib, sb, now, nowb)
	var done uint32 // bit i: the send is in a section of scope i
	cur := cursor{rec: rec, p: sb}
	var s sectionPos
	for cur.next(&s) {
		out = m.appendSection(out, &c, rec, &s, camp, now, nowb, &done)
	}
	out = m.appendNewSections(out, &c, done, camp, nowb)
	m.out = out
	m.sweep(r.UserID, now)
	m.users[r.UserID] = string(out)
}

// appendIdem appends the idempotency entries as the write leaves them:
// those past the window leave (from the oldest, up to the first young
// one), at most maxIdem stay, the intent's the last.
func (m *Memory) appendIdem(out []byte, id, rec string, ib, sb int, now int64, nowb [timeSize]byte) []byte {
	dg := digest(id)
	k := ib
	for k < sb && u32(rec, k+digestSize) < now-m.set.idem {
		k += idemEntrySize
	}
	if sb-k >= maxIdem*idemEntrySize {
		k = sb - (maxIdem-1)*idemEntrySize
	}
	out = appendVarint(out, (sb-k)/idemEntrySize+1)
	out = append(out, rec[k:sb]...)
	out = append(out, dg[:digestSize]...)
	return append(out, nowb[:]...)
}

// sectionScope is what the script's loop over the scopes finds for a
// section s: hz, the horizon its times leave before; keep, its scope's
// largest max; from, the earliest time a limit on the scope counts from;
// add, whether the send goes into it (the first section of each scope the
// intent falls in, marked in done). A section of a scope the policy does
// not know keeps unknownRetention.
func (m *Memory) sectionScope(c *callPlan, rec string, s *sectionPos, camp string, now int64, done *uint32) (hz int64, keep int, from int64, add bool) {
	hz, keep = now-unknownRetention, maxCount
	from = hz
	for i, sc := range m.set.scopes {
		if s.id != sc.id {
			continue
		}
		hz, keep, from = now-sc.retention, sc.keep, sc.from(now, &c.cal)
		bit := uint32(1) << i
		if c.records&bit != 0 && (sc.per != PerCampaign || s.campaign(rec) == camp) && *done&bit == 0 {
			add, *done = true, *done|bit
		}
		break
	}
	return hz, keep, from, add
}

// appendSection appends section s as the write leaves it: its times
// inside its scope's retention, the send among them (sectionScope's add),
// at most keep of them, with its trimmed mark; nothing when none is left.
func (m *Memory) appendSection(out []byte, c *callPlan, rec string, s *sectionPos, camp string, now int64, nowb [timeSize]byte, done *uint32) []byte {
	hz, keep, from, add := m.sectionScope(c, rec, s, camp, now, done)
	// A trimmed section's mark (record.go) goes when its oldest kept
	// send is before every window of its scope: the dropped are older.
	j, e, trimmed := s.times, s.end, s.trimmed
	for j < e && u32(rec, j) < hz {
		j += timeSize
	}
	if trimmed && (j > s.times || j == e || u32(rec, j) < from) {
		trimmed = false
	}
	// The section's times after trimming, with now in time order (a
	// worker whose clock was ahead may have written later ones).
	q := e
	if add {
		for q > j && u32(rec, q-timeSize) > now {
			q -= timeSize
		}
	}
	n := (e - j) / timeSize
	if add {
		n++
	}
	skip := max(n-keep, 0) // the oldest beyond the scope's largest max
	if skip > 0 && nth(rec, j, q, now, add, skip-1) >= from {
		trimmed = true // a limit still counts the newest dropped
	}
	if n -= skip; n > 0 {
		out = append(out, rec[s.start:s.count]...)
		if trimmed {
			out = appendVarint(out, n+1)
			out = append(out, trimMark...)
		} else {
			out = appendVarint(out, n)
		}
		out = appendTimes(out, rec, j, q, e, nowb[:], add, skip)
	}
	return out
}

// appendNewSections appends a section holding only the send for each
// scope the intent falls in that had none in the record (done).
func (m *Memory) appendNewSections(out []byte, c *callPlan, done uint32, camp string, nowb [timeSize]byte) []byte {
	for i, sc := range m.set.scopes {
		bit := uint32(1) << i
		if sc.keep > 0 && c.records&bit != 0 && done&bit == 0 {
			out = append(out, byte(sc.id>>16), byte(sc.id>>8), byte(sc.id))
			if sc.per == PerCampaign {
				out = append(out, camp...)
			}
			out = appendVarint(out, 1)
			out = append(out, nowb[:]...)
		}
	}
	return out
}

// bucket is a bucket's fields beside its records (layout.go): x, until
// when its expiry covers every record in it; y, a time no record in it was
// last written before.
type bucket struct{ x, y int64 }

// sweep is the script's bucket upkeep for a write of uid at now: a bucket
// whose y says a record may be older than the key life drops those and
// moves y to the oldest left; the bucket's life is extended once per slack.
func (m *Memory) sweep(uid uint64, now int64) {
	set := m.set
	bk := uid / bucketSize
	b, existed := m.buckets[bk]
	old := now - set.keyLife
	switch {
	case !existed:
		b.y = now
	case b.y < old:
		b.y = now
		for f := range uint64(bucketSize) { // (bk+1)*bucketSize may wrap
			u := bk*bucketSize + f
			other, ok := m.users[u]
			if !ok || u == uid {
				continue
			}
			c := cursor{rec: other}
			if start, end := c.entries(); end > start {
				if t := u32(other, end-timeSize); t < old {
					delete(m.users, u)
				} else {
					b.y = min(b.y, t)
				}
			}
		}
	}
	if now+set.keyLife > b.x {
		b.x = now + set.keyLife + set.slack
	}
	m.buckets[bk] = b
}

// nth is the i-th (from 0) of a section's times from j, with now inserted
// before q when add (as appendTimes writes them).
func nth(rec string, j, q int, now int64, add bool, i int) int64 {
	switch before := (q - j) / 4; {
	case !add || i < before:
		return u32(rec, j+4*i)
	case i == before:
		return now
	default:
		return u32(rec, j+4*(i-1))
	}
}

// appendTimes appends a section's times from j to e, now inserted before q
// when add, without the first skip of them.
func appendTimes(out []byte, rec string, j, q, e int, nowb []byte, add bool, skip int) []byte {
	if !add {
		return append(out, rec[j+4*skip:e]...)
	}
	before := (q - j) / 4
	if skip <= before {
		out = append(out, rec[j+4*skip:q]...)
		out = append(out, nowb...)
		return append(out, rec[q:e]...)
	}
	// now itself is among the oldest dropped.
	return append(out, rec[q+4*(skip-before-1):e]...)
}
