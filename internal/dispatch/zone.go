package dispatch

// The time zones intents name, loaded once and shared by every decoder.

import (
	"maps"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// zoneCache holds the time zones intents named: time.LoadLocation parses
// the zone's tzdata on every call. Only names that loaded are kept, so junk
// cannot grow it beyond the zones that exist. Readers take no lock: the map
// is replaced, never changed, when a zone is added.
type zoneCache struct {
	mu     sync.Mutex // serialises additions
	byName atomic.Pointer[map[string]*time.Location]
}

// load returns the zone of an IANA name; false: name is none.
func (c *zoneCache) load(name string) (*time.Location, bool) {
	if m := c.byName.Load(); m != nil {
		if loc, ok := (*m)[name]; ok {
			return loc, true
		}
	}
	if !zoneShaped(name) {
		return nil, false
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	next := map[string]*time.Location{}
	if old := c.byName.Load(); old != nil {
		if l, ok := (*old)[name]; ok {
			return l, true // added meanwhile
		}
		next = maps.Clone(*old)
	}
	// name may be a view of a record's bytes: the cache keeps a copy.
	next[strings.Clone(name)] = loc
	c.byName.Store(&next)
	return loc, true
}

// zoneShaped reports whether name has the shape of an IANA zone name
// (Area/Location, or a legacy name such as UTC or EST5EDT): ASCII letters,
// digits, '_', '-', '+', components separated by '/' that start with a
// capital letter. It keeps junk from reaching the file system through
// time.LoadLocation, and rules out what it would load that is no zone of
// the database: "" and "Local" (UTC and the host's zone), and the host's
// files "localtime", "posixrules", "posix/...".
func zoneShaped(name string) bool {
	if len(name) == 0 || len(name) > maxZoneBytes || name == "Local" {
		return false
	}
	start := true
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case start && (c < 'A' || c > 'Z'):
			return false
		case c == '/':
			start = true
			continue
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '_', c == '-', c == '+':
		default:
			return false
		}
		start = false
	}
	return !start
}
