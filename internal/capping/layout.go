package capping

// The record's layout, defined once: the sizes and limits below are what
// the Go readers and writers use and what the scripts are generated with
// (the template gets them as data: see layoutData), and cursor is the one
// reader of a record's parts (Memory, the refund port, record.go's decoder
// for inspect and migrate).
//
// A record (big endian, times in unix seconds):
//
//	count n (varint), then n idempotency entries, oldest first:
//	    digest[digestSize] time[timeSize]
//	sections until the end, one per scope (and campaign) the user has
//	sends in:
//	    id[scopeIDSize]        bit 23 (perCampaignFlag) set: a per-campaign
//	    campaign[campaignSize] scope, then the campaign's hash
//	    count c (varint), then c times[timeSize], oldest first
//
// A varint is one byte below smallCount, else two: 0x80|hi, lo (at most
// maxCount). A trimmed section starts with the mark, the time 0 (counted in
// c): record.go says what it means.

import (
	"errors"
	"fmt"
)

const (
	digestSize    = 5                     // of an intent id's xxhash64 (scripts.go, digest)
	timeSize      = 4                     // a unix time
	idemEntrySize = digestSize + timeSize // an idempotency entry
	scopeIDSize   = 3                     // a section's scope id
	campaignSize  = 3                     // a per-campaign section's campaign hash
	smallCount    = 128                   // a count below it is one byte
	maxCount      = 32767                 // the largest count (two bytes)
	campaignBit   = perCampaignFlag >> 16 // perCampaignFlag in a section's first byte
	trimMark      = "\x00\x00\x00\x00"    // a trimmed section's first time
	maxIdem       = 1000                  // idempotency entries kept per user (the newest)
	// perCampaignFlag marks the section of a per-campaign scope: its header
	// carries the campaign's hash. Scope ids are the 23 bits below it.
	perCampaignFlag = 1 << 23
)

// layoutData is the layout as the script template reads it.
type layoutData struct {
	Digest, Time, Entry, ScopeID, Campaign, Small, MaxCount, CampaignBit, MaxIdem int
	Mark                                                                          string // a Lua literal's body
	XField, YField                                                                string
	MarkSize                                                                      int
}

var layout = layoutData{Digest: digestSize, Time: timeSize, Entry: idemEntrySize, ScopeID: scopeIDSize, Campaign: campaignSize,
	Small: smallCount, MaxCount: maxCount, CampaignBit: campaignBit, MaxIdem: maxIdem, Mark: luaBytes([]byte(trimMark)...),
	XField: xField, YField: yField, MarkSize: markSize}

// A bucket's field beside its users' records (engine.go: keys): its mark,
// a 0 byte (a script of an earlier version, sweeping, reads a record with
// no entries there and leaves it), x, until when its expiry covers every
// record (unix s), and y, a time no record in it was last written before.
// An earlier version kept x in decimal there and y in a field of its own
// (a 0 byte, then the time): the decide script reads that as y 0 (a sweep,
// which drops field y and writes a mark of this version), and every other
// writer of x reads both.
const (
	xField   = "x"
	yField   = "y"
	markSize = 1 + 2*timeSize
)

func appendVarint(b []byte, n int) []byte {
	if n < smallCount {
		return append(b, byte(n))
	}
	return append(b, byte(0x80|n>>8), byte(n))
}

// u32 is the big-endian time at i.
func u32(s string, i int) int64 {
	return int64(uint32(s[i])<<24 | uint32(s[i+1])<<16 | uint32(s[i+2])<<8 | uint32(s[i+3]))
}

// errTruncated: a record ends inside one of its parts.
var errTruncated = errors.New("truncated")

// cursor reads a record's parts in order. Every read is bounds-checked: a
// malformed record stops it with err set (the scripts only ever write
// well-formed ones; this guards inspect and migrate against anything else).
type cursor struct {
	rec string
	p   int
	err error
}

// varint reads a count at the cursor.
func (c *cursor) varint() int {
	if c.p >= len(c.rec) {
		c.fail(errTruncated)
		return 0
	}
	if b := c.rec[c.p]; b < smallCount {
		c.p++
		return int(b)
	}
	if c.p+1 >= len(c.rec) {
		c.fail(errTruncated)
		return 0
	}
	n := int(c.rec[c.p]&0x7f)<<8 | int(c.rec[c.p+1])
	c.p += 2
	return n
}

func (c *cursor) fail(err error) {
	if c.err == nil {
		c.err = err
	}
	c.p = len(c.rec)
}

// entries reads the idempotency entries: they are rec[start:end].
func (c *cursor) entries() (start, end int) {
	n := c.varint()
	start, end = c.p, c.p+idemEntrySize*n
	if end > len(c.rec) {
		c.fail(fmt.Errorf("%d idempotency entries do not fit in %d bytes", n, len(c.rec)))
		return start, start
	}
	c.p = end
	return start, end
}

// sectionPos is where one section's parts are in the record.
type sectionPos struct {
	start   int    // its header's first byte
	id      uint32 // with perCampaignFlag for a per-campaign scope
	count   int    // its count's first byte (after the campaign)
	times   int    // its first time (after the mark)
	end     int    // after its last time
	trimmed bool   // it starts with the mark
}

// n is how many sends the section holds (the mark is none).
func (s *sectionPos) n() int { return (s.end - s.times) / timeSize }

// campaign is a per-campaign section's campaign hash.
func (s *sectionPos) campaign(rec string) string {
	return rec[s.start+scopeIDSize : s.start+scopeIDSize+campaignSize]
}

// next reads the next section into s; false at the end of the record (or
// of a malformed one: err says so).
func (c *cursor) next(s *sectionPos) bool {
	if c.p >= len(c.rec) {
		return false
	}
	s.start = c.p
	if c.p+scopeIDSize > len(c.rec) {
		c.fail(errors.New("truncated section header"))
		return false
	}
	s.id = uint32(c.rec[c.p])<<16 | uint32(c.rec[c.p+1])<<8 | uint32(c.rec[c.p+2])
	c.p += scopeIDSize
	if s.id&perCampaignFlag != 0 {
		if c.p+campaignSize > len(c.rec) {
			c.fail(errors.New("truncated campaign"))
			return false
		}
		c.p += campaignSize
	}
	s.count = c.p
	n := c.varint()
	if c.err != nil {
		return false
	}
	s.times, s.end = c.p, c.p+timeSize*n
	if s.end > len(c.rec) {
		c.fail(fmt.Errorf("section %06x: %d times do not fit", s.id, n))
		return false
	}
	s.trimmed = n > 0 && c.rec[s.times:s.times+timeSize] == trimMark
	if s.trimmed {
		s.times += timeSize
	}
	c.p = s.end
	return true
}
