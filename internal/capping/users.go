package capping

// Users' own limits: what one user asked for (a snooze, a frequency tier,
// a channel turned down, their own quiet hours), stored beside their record
// in their bucket (field u<uid%32>) so that the decide script reads it in
// the same call, atomically with the caps: no extra round trip, nothing
// cached in a worker. The policy names the tiers and how channels are
// counted (UserRules); the user's limits name a tier by name, so a policy
// change never needs the stored limits rewritten. The kinds are one table
// (userkinds.go); here are what reads it (the stored form, the checks, the
// words) and the decisions the script's answers become.

import (
	"fmt"
	"slices"
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

// kindsLifeLua is the users' limits script's part that reads a user's
// stored limits v: lasting set when one of them lasts, snooze raised to
// the end of one that ends.
func kindsLifeLua(v, indent string) string {
	var lasting, ends []string
	for _, k := range userKinds {
		if k.ends == "" {
			lasting = append(lasting, fmt.Sprintf("string.find(%s, ';%s=', 1, true)", v, k.keys[0]))
		} else {
			ends = append(ends, fmt.Sprintf("%ssnooze = math.max(snooze, tonumber(string.match(%s, ';%s=(%%d+)') or '') or 0)\n", indent, v, k.ends))
		}
	}
	return indent + "if " + strings.Join(lasting, " or ") + " then lasting = true end\n" + strings.Join(ends, "")
}

// UserKinds are the kinds' names, as the user-limits record's fields, in
// the stored form's order.
func UserKinds() []string {
	names := make([]string, len(userKinds))
	for i, k := range userKinds {
		names[i] = k.name
	}
	return names
}

// CopyUserKind sets dst's limit of the kind named name to src's.
func CopyUserKind(name string, dst *UserLimits, src UserLimits) error {
	i := slices.IndexFunc(userKinds, func(k userKind) bool { return k.name == name })
	if i < 0 {
		return fmt.Errorf("%q is not a kind of user limit (%s)", name, strings.Join(UserKinds(), ", "))
	}
	userKinds[i].copy(dst, src)
	return nil
}

// IsZero reports whether u holds no limit.
func (u UserLimits) IsZero() bool {
	return !slices.ContainsFunc(userKinds, func(k userKind) bool { return k.set(u) })
}

// Describe says the limits for a person, one a line; ur (nil: none) are
// the policy's rules for them.
func (u UserLimits) Describe(ur *UserRules) []string {
	if u.IsZero() {
		return []string{"no limits of their own"}
	}
	var lines []string
	for _, k := range userKinds {
		if k.set(u) {
			lines = append(lines, k.describe(u, ur)...)
		}
	}
	return lines
}

// userLimitsVersion starts every stored form: a later format is another.
const userLimitsVersion = "1"

// Encode is the stored form the decide script reads: "1", then each set
// kind's parts, ";<key>=<value>" (docs/design/record-layout.md). Names
// never hold ';', ',' or ':' (validName).
func (u UserLimits) Encode() string {
	var b strings.Builder
	b.WriteString(userLimitsVersion)
	for _, k := range userKinds {
		b.WriteString(k.encode(u))
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
		key, v, _ := strings.Cut(p, "=")
		i := slices.IndexFunc(userKinds, func(k userKind) bool { return slices.Contains(k.keys, key) })
		if i < 0 {
			return UserLimits{}, fmt.Errorf("stored user limits %q: unknown part %q", s, key)
		}
		if err := userKinds[i].parse(&u, key, v); err != nil {
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
	for _, k := range userKinds {
		k.problems(r, u, &ps)
	}
	return ps
}
