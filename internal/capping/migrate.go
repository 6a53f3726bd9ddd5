package capping

// Migrating capper v1's keys (a sorted set per user, one more per tracked
// channel) into this version's records, offline: the workers are stopped
// while it runs (v1 and v2 workers would count apart). See `capper migrate`.

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// MigrateOptions say what to migrate.
type MigrateOptions struct {
	// FromPrefix is v1's capping.key_prefix.
	FromPrefix string
	// At is the time the records are built for: sends older than what a
	// limit counts are left out, as a write at At would.
	At time.Time
	// DryRun reads and reports, writes nothing.
	DryRun bool
	// Progress, when set, is called after every batch of users.
	Progress func(MigrateReport)
}

// MigrateReport says what a migration found and did.
type MigrateReport struct {
	Users int // v1 users found (a user log)
	// Migrated: users written (or that would be, in a dry run); a user with
	// nothing left inside any window or the idempotency window is not.
	Migrated    int
	IdemEntries int   // idempotency entries carried over
	Sends       int64 // send times carried over, every scope together
	// FromLog and FromChannel: scopes filled from the user log (every
	// intent) or a channel log (where: channels [one]); Empty: scopes v1
	// did not record (tags, categories, campaigns, per campaign, untracked
	// channels), which start empty.
	FromLog, FromChannel, Empty []string
	// WindowKeys: v1 sliding_window keys found; their counters cannot be
	// turned into send times and are left alone (those users start empty).
	WindowKeys int
}

// v1Sources says where each scope's sends come from in v1's keys.
type v1Source struct {
	scope   int
	channel string // "" = the user log
}

// MigrateV1 builds a record for every user that has a v1 user log under
// o.FromPrefix and writes it (overwriting a record of the same user, so that
// running it twice gives the same result). The v1 keys are left to expire.
func (e *Engine) MigrateV1(ctx context.Context, o MigrateOptions) (MigrateReport, error) {
	var rep MigrateReport
	if o.FromPrefix == "" || strings.ContainsAny(o.FromPrefix, "{} ") {
		return rep, fmt.Errorf("migrate: v1 key prefix %q must be non-empty, without braces or spaces", o.FromPrefix)
	}
	if o.At.IsZero() {
		return rep, errors.New("migrate: no time")
	}
	set := e.set.Load()
	var sources []v1Source
	for i, s := range set.scopes {
		w := s.where
		switch {
		case s.per == PerUser && w.set() == 0:
			sources = append(sources, v1Source{scope: i})
			rep.FromLog = append(rep.FromLog, s.describe())
		case s.per == PerUser && w.set() == 1 && len(w[dimChannels]) == 1:
			for ch := range w[dimChannels] {
				sources = append(sources, v1Source{scope: i, channel: ch})
			}
			rep.FromChannel = append(rep.FromChannel, s.describe())
		default:
			rep.Empty = append(rep.Empty, s.describe())
		}
	}
	var mu sync.Mutex
	err := e.forEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
		var cursor uint64
		for {
			keys, next, err := node.Scan(ctx, cursor, o.FromPrefix+":{*", 1000).Result()
			if err != nil {
				return fmt.Errorf("migrate: scan %s: %w", node.Options().Addr, err)
			}
			var users []uint64
			windows := 0
			for _, k := range keys {
				uid, rest, ok := v1Key(o.FromPrefix, k)
				switch {
				case !ok:
				case rest == "":
					users = append(users, uid)
				case strings.HasPrefix(rest, ":sw:") || strings.HasPrefix(rest, ":d:"):
					windows++
				}
			}
			part, err := e.migrateUsers(ctx, o, sources, users)
			mu.Lock()
			rep.Users += len(users)
			rep.Migrated += part.Migrated
			rep.IdemEntries += part.IdemEntries
			rep.Sends += part.Sends
			rep.WindowKeys += windows
			if o.Progress != nil {
				o.Progress(rep)
			}
			mu.Unlock()
			if err != nil {
				return err
			}
			if cursor = next; cursor == 0 {
				return nil
			}
		}
	})
	return rep, err
}

// v1Key splits a v1 key <prefix>:{<uid>}<rest>.
func v1Key(prefix, key string) (uid uint64, rest string, ok bool) {
	s, ok := strings.CutPrefix(key, prefix+":{")
	if !ok {
		return 0, "", false
	}
	end := strings.IndexByte(s, '}')
	if end <= 0 {
		return 0, "", false
	}
	uid, err := strconv.ParseUint(s[:end], 10, 64)
	if err != nil {
		return 0, "", false // a v2 bucket {b<n>}, or not capper's
	}
	return uid, s[end+1:], true
}

// migrateUsers reads the v1 logs of users and writes their records.
func (e *Engine) migrateUsers(ctx context.Context, o MigrateOptions, sources []v1Source, users []uint64) (MigrateReport, error) {
	var rep MigrateReport
	if len(users) == 0 {
		return rep, nil
	}
	set := e.set.Load()
	now := o.At.Unix()
	logs, err := e.readV1Logs(ctx, o.FromPrefix, sources, users)
	if err != nil {
		return rep, err
	}
	write := e.client.Pipeline()
	for i, uid := range users {
		rec, err := logs[i].record(set, sources, now)
		if err != nil {
			return rep, err
		}
		for _, sec := range rec.sections {
			rep.Sends += int64(len(sec.times))
		}
		if len(rec.idem) == 0 && len(rec.sections) == 0 {
			continue // nothing left that anything counts
		}
		if len(rec.idem) == 0 {
			// The record's last idempotency entry is its user's latest write
			// (the bucket sweep reads it): keep the newest send's.
			rec.idem = []idemEntry{{at: rec.newest()}}
		}
		rep.Migrated++
		rep.IdemEntries += len(rec.idem)
		if !o.DryRun {
			e.writeMigrated(ctx, write, set, now, uid, &rec)
		}
	}
	if !o.DryRun {
		if _, err := write.Exec(ctx); err != nil {
			return rep, fmt.Errorf("migrate: write records: %w", err)
		}
	}
	return rep, nil
}

// v1Name is the key of a v1 user log (channel "") or channel log.
func v1Name(prefix string, uid uint64, channel string) string {
	k := prefix + ":{" + strconv.FormatUint(uid, 10) + "}"
	if channel != "" {
		k += ":" + channel
	}
	return k
}

// v1Logs are a user's v1 logs, as read: the user log and the channel
// logs its sources need.
type v1Logs struct {
	prefix string
	uid    uint64
	log    *redis.ZSliceCmd
	chans  map[string]*redis.ZSliceCmd
}

// readV1Logs reads the user log of each of users and the channel logs the
// sources need, in one pipeline. v1 keys of different users are in
// different slots: no pipeline across them on a cluster but go-redis
// splits it by node.
func (e *Engine) readV1Logs(ctx context.Context, prefix string, sources []v1Source, users []uint64) ([]v1Logs, error) {
	pipe := e.client.Pipeline()
	logs := make([]v1Logs, len(users))
	for i, uid := range users {
		logs[i] = v1Logs{prefix: prefix, uid: uid, log: pipe.ZRangeWithScores(ctx, v1Name(prefix, uid, ""), 0, -1),
			chans: map[string]*redis.ZSliceCmd{}}
		for _, src := range sources {
			if src.channel != "" {
				logs[i].chans[src.channel] = pipe.ZRangeWithScores(ctx, v1Name(prefix, uid, src.channel), 0, -1)
			}
		}
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("migrate: read v1 logs: %w", err)
	}
	return logs, nil
}

// record builds the user's record as a write at now would leave it: the
// idempotency entries of the user log still in the idempotency window,
// and, per source, the send times its scope still counts.
func (l *v1Logs) record(set *policySet, sources []v1Source, now int64) (record, error) {
	log, err := l.log.Result()
	if err != nil {
		return record{}, fmt.Errorf("migrate: read %s: %w", v1Name(l.prefix, l.uid, ""), err)
	}
	var rec record
	for _, z := range log {
		at := int64(math.Floor(z.Score / 1000))
		if m, ok := z.Member.(string); ok && len(m) == 8 && at >= now-set.idem {
			rec.idem = append(rec.idem, idemEntry{digest: [5]byte([]byte(m[:5])), at: at})
		}
	}
	slices.SortStableFunc(rec.idem, func(a, b idemEntry) int { return int(a.at - b.at) })
	if len(rec.idem) > maxIdem {
		rec.idem = rec.idem[len(rec.idem)-maxIdem:]
	}
	for _, src := range sources {
		zs := log
		if src.channel != "" {
			if zs, err = l.chans[src.channel].Result(); err != nil {
				return record{}, fmt.Errorf("migrate: read %s: %w", v1Name(l.prefix, l.uid, src.channel), err)
			}
		}
		s := set.scopes[src.scope]
		sec := section{id: s.id}
		for _, z := range zs { // ZRANGE: by score, oldest first
			if at := int64(math.Floor(z.Score / 1000)); at >= now-s.retention {
				sec.times = append(sec.times, at)
			}
		}
		if len(sec.times) > s.keep { // dropped sends still in the retention
			sec.times, sec.trimmed = sec.times[len(sec.times)-s.keep:], true
		}
		if len(sec.times) > 0 {
			rec.sections = append(rec.sections, sec)
		}
	}
	return rec, nil
}

// writeMigrated queues the write of uid's record on write, with its
// bucket's expiry mark and TTL as a write at now would leave them (a later
// mark of another user's write is kept).
func (e *Engine) writeMigrated(ctx context.Context, write redis.Pipeliner, set *policySet, now int64, uid uint64, rec *record) {
	key := e.keys.bucket(uid)
	write.HSet(ctx, key, field(uid), rec.encode())
	write.Do(ctx, "eval", markLua+`local x, y = getMark()
if x < tonumber(ARGV[1]) then setMark(tonumber(ARGV[1]), y) end
if redis.call('TTL', KEYS[1]) < tonumber(ARGV[2]) then redis.call('EXPIRE', KEYS[1], ARGV[2]) end
return 0`, 1, key, now+set.keyLife+set.slack, set.keyLife+set.slack)
}
