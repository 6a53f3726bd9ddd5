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
	// buckets: the "x" field of each bucket ever written (uid/bucketSize):
	// until when its expiry covers every record in it.
	buckets map[uint64]int64
	known   periods
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
	return &Memory{set: set, users: map[uint64]string{}, buckets: map[uint64]int64{}}, nil
}

// Users is the number of users with a record.
func (m *Memory) Users() int { return len(m.users) }

// Decide decides one request and, when it is allowed, records it. Invalid
// requests are answered with an Err wrapping ErrInvalidRequest.
func (m *Memory) Decide(r *Request) Decision {
	set := m.set
	d, bypass, err := set.check(r)
	if err != nil {
		return Decision{Err: err, Policy: set.name}
	}
	if d != nil {
		d.Policy = set.name
		return *d
	}
	// The memo holds a batch's periods in the engine; a replay's time
	// moves on, so it starts over when full.
	if len(m.known.list) >= 64 {
		m.known.list = m.known.list[:0]
	}
	c := set.plan(r, &m.known)
	res := m.run(r, c, bypass)
	out, err := set.decision(res, r, c)
	if err != nil { // the reply is built here; this would be a bug in run
		return Decision{Err: fmt.Errorf("decide: %w", err), Policy: set.name}
	}
	out.OverrideRefused = r.Override != NoOverride && !bypass
	if bypass && (out.Outcome == Allowed || out.Outcome == Duplicate) {
		out.Override = Bypass
	}
	out.Policy = set.name
	set.deferral(r, &out)
	return out
}

// u32 is the big-endian 4 bytes at i.
func u32(s string, i int) int64 {
	return int64(uint32(s[i])<<24 | uint32(s[i+1])<<16 | uint32(s[i+2])<<8 | uint32(s[i+3]))
}

// varint reads a record count at p (record.go): the count and the next byte.
func varint(s string, p int) (n, next int) {
	if s[p] < 128 {
		return int(s[p]), p + 1
	}
	return int(s[p]-128)<<8 | int(s[p+1]), p + 2
}

// sectionAt reads the header of the section at p: its scope id, where its
// count ends (h: the count's first byte), its count and its first time.
func sectionAt(rec string, p int) (id uint32, h, cnt, b int) {
	id = uint32(rec[p])<<16 | uint32(rec[p+1])<<8 | uint32(rec[p+2])
	h = p + 3
	if id&perCampaignFlag != 0 {
		h = p + 6
	}
	cnt, b = varint(rec, h)
	return id, h, cnt, b
}

// trimmedAt reports whether the section whose cnt times start at b is
// trimmed: its first time is the mark, 0 (record.go).
func trimmedAt(rec string, b, cnt int) bool {
	return cnt > 0 && rec[b:b+4] == "\x00\x00\x00\x00"
}

// run is packed.lua.tmpl for one request: its reply, code * 2^40 + limit *
// 2^32 + t. The steps and their order are the script's; keep them in step.
func (m *Memory) run(r *Request, c callPlan, bypass bool) int64 {
	set := m.set
	now := r.At.Unix()
	rec, ok := m.users[r.UserID]
	if !ok {
		rec = "\x00" // no entries, no sections
	}
	dg := digest(r.IntentID)
	d5 := string(dg[:5])
	ni, ib := varint(rec, 0)
	sb := ib + 9*ni
	var camp string
	if set.args.Camp > 0 {
		h := campaignHash(r.Campaign)
		camp = string(h[:])
	}

	// A duplicate: the first entry with this digest that is young enough.
	for p := ib; p < sb; p += 9 {
		if rec[p:p+5] == d5 {
			if t := u32(rec, p+5); t >= now-set.idem {
				return codeDuplicate<<40 + t
			}
		}
	}

	if !bypass {
		// Where the logs the limits read are (the last section that
		// matches, as the script's loop leaves it).
		var sp, sc [MaxScopes]int
		var st [MaxScopes]bool
		for p := sb; p < len(rec); {
			id, _, cnt, b := sectionAt(rec, p)
			tr := trimmedAt(rec, b, cnt)
			if tr { // the mark is no send
				b, cnt = b+4, cnt-1
			}
			for i, s := range set.scopes {
				if id == s.id && (s.per != PerCampaign || rec[p+3:p+6] == camp) {
					sp[i], sc[i], st[i] = b, cnt, tr
				}
			}
			p = b + 4*cnt
		}
		for li, l := range set.pols[c.pol].limits {
			if c.applies&(1<<li) == 0 {
				continue
			}
			reply := int64(codeCapped)<<40 + int64(li+1)<<32
			if l.Max == 0 {
				return reply
			}
			mx := l.Max
			if l.Reserve.Slots > 0 && r.Priority < l.Reserve.Below {
				mx = l.Max - l.Reserve.Slots
			}
			// The mx-th newest send; a trimmed log holding fewer counts
			// its dropped sends as at its oldest.
			i := sc[l.scope] - mx
			if i < 0 && st[l.scope] && sc[l.scope] > 0 {
				i = 0
			}
			if i < 0 {
				continue
			}
			t := u32(rec, sp[l.scope]+4*i)
			start := now - l.window
			if l.Calendar != None {
				start = c.cal[l.Calendar-1].start
			}
			if t >= start {
				if l.Calendar == None {
					reply += t
				}
				return reply
			}
		}
	}

	// Allowed: record it. Idempotency entries past the window leave (from
	// the oldest, up to the first young one), at most maxIdem stay.
	var nowb [4]byte
	binary.BigEndian.PutUint32(nowb[:], uint32(now))
	k := ib
	for k < sb && u32(rec, k+5) < now-set.idem {
		k += 9
	}
	if sb-k >= maxIdem*9 {
		k = sb - (maxIdem-1)*9
	}
	out := appendVarint(m.out[:0], (sb-k)/9+1)
	out = append(out, rec[k:sb]...)
	out = append(out, d5...)
	out = append(out, nowb[:]...)
	var done uint32
	for p := sb; p < len(rec); {
		id, h, cnt, b := sectionAt(rec, p)
		e := b + 4*cnt
		hz, keep, add := now-unknownRetention, 32767, false
		from := hz // the earliest time a limit on the scope counts from
		for i, s := range set.scopes {
			if id != s.id {
				continue
			}
			hz, keep, from = now-s.retention, s.keep, s.from(now, &c.cal)
			bit := uint32(1) << i
			if c.records&bit != 0 && (s.per != PerCampaign || rec[p+3:p+6] == camp) && done&bit == 0 {
				add, done = true, done|bit
			}
			break
		}
		// A trimmed section's mark (record.go) goes when its oldest kept
		// send is before every window of its scope: the dropped are older.
		j, trimmed := b, trimmedAt(rec, b, cnt)
		if trimmed {
			j += 4
		}
		for j < e && u32(rec, j) < hz {
			j += 4
		}
		if trimmed && (j > b+4 || j == e || u32(rec, j) < from) {
			trimmed = false
		}
		// The section's times after trimming, with now in time order (a
		// worker whose clock was ahead may have written later ones).
		q := e
		if add {
			for q > j && u32(rec, q-4) > now {
				q -= 4
			}
		}
		n := (e - j) / 4
		if add {
			n++
		}
		skip := max(n-keep, 0) // the oldest beyond the scope's largest max
		if skip > 0 && nth(rec, j, q, now, add, skip-1) >= from {
			trimmed = true // a limit still counts the newest dropped
		}
		if n -= skip; n > 0 {
			out = append(out, rec[p:h]...)
			if trimmed {
				out = appendVarint(out, n+1)
				out = append(out, 0, 0, 0, 0)
			} else {
				out = appendVarint(out, n)
			}
			out = appendTimes(out, rec, j, q, e, nowb[:], add, skip)
		}
		p = e
	}
	for i, s := range set.scopes {
		bit := uint32(1) << i
		if s.keep > 0 && c.records&bit != 0 && done&bit == 0 {
			out = append(out, byte(s.id>>16), byte(s.id>>8), byte(s.id))
			if s.per == PerCampaign {
				out = append(out, camp...)
			}
			out = append(out, 1)
			out = append(out, nowb[:]...)
		}
	}
	m.out = out

	// The bucket: extending its life (once per slack) drops the records of
	// its other users whose latest write is older than the key life.
	bk := r.UserID / bucketSize
	x, existed := m.buckets[bk]
	if now+set.keyLife > x {
		if existed {
			old := now - set.keyLife
			for f := range uint64(bucketSize) { // (bk+1)*bucketSize may wrap
				u := bk*bucketSize + f
				other, ok := m.users[u]
				if !ok || u == r.UserID {
					continue
				}
				if c, q := varint(other, 0); c > 0 && u32(other, q+9*c-4) < old {
					delete(m.users, u)
				}
			}
		}
		m.buckets[bk] = now + set.keyLife + set.slack
	}
	m.users[r.UserID] = string(out)
	return codeAllowed
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
