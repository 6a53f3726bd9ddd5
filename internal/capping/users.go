package capping

// Users' own limits: what one user asked for (a snooze, a frequency tier,
// a channel turned down, their own quiet hours), stored beside their record
// in their bucket (field u<uid%32>) so that the decide script reads it in
// the same call, atomically with the caps: no extra round trip, nothing
// cached in a worker. The policy names the tiers and how channels are
// counted (UserRules); the user's limits name a tier by name, so a policy
// change never needs the stored limits rewritten.

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/capper-dev/capper/internal/problems"
)

// UserRules is the policy's side of users' own limits (policy key
// user_limits). Nil Rules.Users: the script does not read users' limits.
type UserRules struct {
	// Tiers a user may choose (e.g. "fewer"): limits applied on top of
	// their segment's, the stricter wins.
	Tiers []UserTier
	// Channels users may turn down (a max per ChannelWindow, 0: off);
	// each costs a log section per user who receives on it.
	Channels []string
	// ChannelWindow is the rolling window a channel's max counts.
	ChannelWindow time.Duration
	// MaxPerChannel is the largest max a user may set for a channel.
	MaxPerChannel int
	// MaxDefer: a snoozed intent is deferred to the snooze's end when it
	// ends within MaxDefer of the intent's first deferral, else cancelled.
	MaxDefer time.Duration
}

// UserTier is a named set of limits a user may opt into.
type UserTier struct {
	Name   string
	Limits []Limit
}

// Defaults of UserRules, as the policy format documents them.
const (
	DefaultChannelWindow = 7 * 24 * time.Hour
	DefaultMaxPerChannel = 7
	DefaultUserMaxDefer  = 24 * time.Hour
)

// MaxUserLimits bounds the tiers' limits and channels together (a bit each
// in the script's mask).
const MaxUserLimits = 32

// UserTierPath is the path of tier i in the policy.
func UserTierPath(i int, name string) problems.Path {
	return problems.Key("user_limits").Key("tiers").Named(i, "tier", name)
}

func (u *UserRules) problems(ps *problems.List, channels, categories map[string]bool) {
	at := problems.Key("user_limits")
	seen := map[string]bool{}
	n := 0
	for i, t := range u.Tiers {
		path := UserTierPath(i, t.Name)
		switch {
		case !validName(t.Name):
			ps.Add(path.Key("name"), "%q must be non-empty, at most 64 bytes, without spaces, braces or colons", t.Name)
		case seen[t.Name]:
			ps.Add(path.Key("name"), "tier %q is listed twice", t.Name)
		}
		seen[t.Name] = true
		// A tier's limits are checked as a policy's.
		Policy{Limits: t.Limits}.problems(ps, path, channels, categories)
		for j, l := range t.Limits {
			if l.Reserve.Slots > 0 {
				ps.Add(LimitPath(path, j, l.Name).Key("reserve"), "a user's tier reserves nothing")
			}
			n++
		}
	}
	for i, c := range u.Channels {
		if !channels[c] {
			ps.Add(at.Key("channels").Index(i), "%q is not one of the channels", c)
		}
	}
	if len(slices.Compact(slices.Sorted(slices.Values(u.Channels)))) != len(u.Channels) {
		ps.Add(at.Key("channels"), "a channel is listed twice")
	}
	if n+len(u.Channels) > MaxUserLimits {
		ps.Add(at, "%d tier limits and %d channels, at most %d together", n, len(u.Channels), MaxUserLimits)
	}
	if u.ChannelWindow < MinWindow || u.ChannelWindow > MaxWindow || u.ChannelWindow%time.Second != 0 {
		ps.Add(at.Key("channel_window"), "%s out of range [%s, %s] or not whole seconds", u.ChannelWindow, MinWindow, MaxWindow)
	}
	if u.MaxPerChannel < 1 || u.MaxPerChannel > MaxMax {
		ps.Add(at.Key("max_per_channel"), "%d out of range [1, %d]", u.MaxPerChannel, MaxMax)
	}
	if u.MaxDefer < time.Minute || u.MaxDefer > MaxMaxDefer {
		ps.Add(at.Key("max_defer"), "%s out of range [%s, %s]", u.MaxDefer, time.Minute, MaxMaxDefer)
	}
}

// Tier returns the tier named name.
func (u *UserRules) Tier(name string) (UserTier, bool) {
	i := slices.IndexFunc(u.Tiers, func(t UserTier) bool { return t.Name == name })
	if i < 0 {
		return UserTier{}, false
	}
	return u.Tiers[i], true
}

// UserLimits are one user's own limits. The zero value is none.
type UserLimits struct {
	// SnoozeUntil: until then the user's intents on SnoozeChannels (empty:
	// every channel) are deferred to it, or cancelled (UserRules.MaxDefer).
	SnoozeUntil    time.Time
	SnoozeChannels []string
	// Tier is one of the policy's tiers ("": none).
	Tier string
	// Channels: at most this many sends of a channel per the policy's
	// channel window (0: the channel is off).
	Channels map[string]int
	// Quiet: the user's own quiet hours, in their time zone.
	Quiet *UserQuiet
}

// UserQuiet is a user's quiet hours: From to To, minutes after local
// midnight (To before From spans midnight).
type UserQuiet struct{ From, To int }

// IsZero reports whether u holds no limit.
func (u UserLimits) IsZero() bool {
	return u.SnoozeUntil.IsZero() && u.Tier == "" && len(u.Channels) == 0 && u.Quiet == nil
}

// userLimitsVersion starts every stored form: a later format is another.
const userLimitsVersion = "1"

// Encode is the stored form the decide script reads: "1", then for each
// limit set ";s=<unix s>", ";sc=<channels>", ";t=<tier>",
// ";c=<channel>:<max>,..." and ";q=<from>-<to>" (docs/design/record-layout.md).
// Names never hold ';', ',' or ':' (validName).
func (u UserLimits) Encode() string {
	var b strings.Builder
	b.WriteString(userLimitsVersion)
	if !u.SnoozeUntil.IsZero() {
		b.WriteString(";s=" + strconv.FormatInt(u.SnoozeUntil.Unix(), 10))
		if len(u.SnoozeChannels) > 0 {
			b.WriteString(";sc=" + strings.Join(u.SnoozeChannels, ","))
		}
	}
	if u.Tier != "" {
		b.WriteString(";t=" + u.Tier)
	}
	if len(u.Channels) > 0 {
		b.WriteString(";c=")
		for i, c := range slices.Sorted(maps.Keys(u.Channels)) {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(c + ":" + strconv.Itoa(u.Channels[c]))
		}
	}
	if q := u.Quiet; q != nil {
		b.WriteString(";q=" + strconv.Itoa(q.From) + "-" + strconv.Itoa(q.To))
	}
	return b.String()
}

// ParseUserLimits reads Encode's form.
func ParseUserLimits(s string) (UserLimits, error) {
	var u UserLimits
	parts := strings.Split(s, ";")
	if parts[0] != userLimitsVersion {
		return u, fmt.Errorf("stored user limits %q: version %q, want %s", s, parts[0], userLimitsVersion)
	}
	for _, p := range parts[1:] {
		k, v, _ := strings.Cut(p, "=")
		var err error
		switch k {
		case "s":
			var t int64
			t, err = strconv.ParseInt(v, 10, 64)
			u.SnoozeUntil = time.Unix(t, 0).UTC()
		case "sc":
			u.SnoozeChannels = strings.Split(v, ",")
		case "t":
			u.Tier = v
		case "c":
			u.Channels = map[string]int{}
			for _, cm := range strings.Split(v, ",") {
				c, m, _ := strings.Cut(cm, ":")
				var n int
				if n, err = strconv.Atoi(m); err != nil {
					break
				}
				u.Channels[c] = n
			}
		case "q":
			from, to, _ := strings.Cut(v, "-")
			q := &UserQuiet{}
			if q.From, err = strconv.Atoi(from); err == nil {
				q.To, err = strconv.Atoi(to)
			}
			u.Quiet = q
		default:
			err = fmt.Errorf("unknown part %q", k)
		}
		if err != nil {
			return UserLimits{}, fmt.Errorf("stored user limits %q: %w", s, err)
		}
	}
	return u, nil
}

// UserProblems checks a user's limits against the rules, each problem at
// its path (snooze.channels[0], tier, channels.sms, quiet_hours.from, as
// the user-limits record names them).
func (r Rules) UserProblems(u UserLimits) problems.List {
	var ps problems.List
	if r.Users == nil {
		if !u.IsZero() {
			ps.Add(problems.Key("user_limits"), "the policy in force has no user_limits section: users' limits are not applied")
		}
		return ps
	}
	for i, c := range u.SnoozeChannels {
		if !slices.Contains(r.Channels, c) {
			ps.Add(problems.Key("snooze").Key("channels").Index(i), "%q is not one of the policy's channels (%s)", c, strings.Join(r.Channels, ", "))
		}
	}
	if len(u.SnoozeChannels) > 0 && u.SnoozeUntil.IsZero() {
		ps.Add(problems.Key("snooze").Key("until"), "is required")
	}
	if u.Tier != "" {
		if _, ok := r.Users.Tier(u.Tier); !ok {
			var names []string
			for _, t := range r.Users.Tiers {
				names = append(names, t.Name)
			}
			ps.Add(problems.Key("tier"), "%q is not one of the policy's tiers (%s)", u.Tier, strings.Join(names, ", "))
		}
	}
	for _, c := range slices.Sorted(maps.Keys(u.Channels)) {
		at := problems.Key("channels").Key(c)
		switch m := u.Channels[c]; {
		case !slices.Contains(r.Users.Channels, c):
			ps.Add(at, "%q is not one of the channels users may turn down (%s)", c, strings.Join(r.Users.Channels, ", "))
		case m < 0 || m > r.Users.MaxPerChannel:
			ps.Add(at, "%d out of range [0, %d] (user_limits.max_per_channel)", m, r.Users.MaxPerChannel)
		}
	}
	if q := u.Quiet; q != nil {
		for _, f := range []struct {
			name string
			v    int
		}{{"from", q.From}, {"to", q.To}} {
			if f.v < 0 || f.v >= 24*60 {
				ps.Add(problems.Key("quiet_hours").Key(f.name), "%d minutes is not a time of day", f.v)
			}
		}
		if q.From == q.To {
			ps.Add(problems.Key("quiet_hours"), "from and to are the same time: quiet hours would never end")
		}
	}
	return ps
}

// The names of users' limits in decisions (capper-limit): a tier's limit
// is user-tier/<tier>/<limit>, a channel's user-channel/<channel>.
const (
	userTierLimitPrefix    = "user-tier/"
	userChannelLimitPrefix = "user-channel/"
)

// snoozed decides an intent the user's snooze holds until until: deferred
// to it when it ends within the policy's max_defer of the intent's first
// deferral, else cancelled (nothing counted either way).
func (ps *policySet) snoozed(r *Request, d *Decision, until time.Time) {
	since := r.DeferredSince
	if since.IsZero() {
		since = r.At
	}
	if until.Sub(since) > ps.users.MaxDefer {
		d.Outcome, d.Reason = Cancelled, ReasonSnoozeTooLong
		return
	}
	d.Outcome, d.NotBefore, d.Reason = Deferred, until, ReasonSnoozed
}

// userCapped is the decision of an intent one of the user's own limits
// capped (a tier's, or a channel's, whose max the user set: t 0 means 0).
func (ps *policySet) userCapped(rep reply, r *Request) (Decision, error) {
	k := int(rep.limit - userLimitBase)
	if k < 0 || k >= len(ps.ulimits) {
		return Decision{}, fmt.Errorf("script named users' limit %d of %d", k, len(ps.ulimits))
	}
	l := &ps.ulimits[k]
	d := Decision{At: r.At, Outcome: Capped, Limit: l.Name, UserLimit: true}
	switch {
	case l.Max == 0, rep.t == 0 && l.Calendar == None:
		d.RetryAfter.Never = true
	case l.Calendar != None:
		// A tier's calendar limit: the period's end in the user's zone.
		_, end := (*periods)(nil).of(l.Calendar, r.At, ps.location(r), ps.rules.WeekStart)
		d.RetryAfter.In = end.Sub(r.At)
	default:
		d.RetryAfter.In = max(time.Unix(rep.t+l.window+1, 0).Sub(r.At), 0)
	}
	return d, nil
}

// limitNamed is the limit a capped decision of policy pol names: the
// policy's, or a user's (nil: none).
func (ps *policySet) limitNamed(pol int, name string) *compiledLimit {
	for _, ls := range [][]compiledLimit{ps.pols[pol].limits, ps.ulimits} {
		if i := slices.IndexFunc(ls, func(l compiledLimit) bool { return l.Name == name }); i >= 0 {
			return &ls[i]
		}
	}
	return nil
}
