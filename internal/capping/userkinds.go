package capping

// The kinds of users' own limits, one row each (userKinds): the limit's
// field in UserLimits, its parts in the stored form the decide script
// reads, its checks against the policy, its words, and its Lua. Adding a
// kind is a field, a row here, its JSON in the user-limits topic
// (internal/userlimits/fields.go) and, for a kind that holds intents
// back, a reason (verdicts.go): CONTRIBUTING's "Adding a user limit kind".

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/common/model"

	"github.com/capper-dev/capper/internal/problems"
)

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

// userKind is one kind of a user's own limits.
type userKind struct {
	// name is the kind's field in the user-limits record, and the path
	// of its problems.
	name string
	// keys are its parts in the stored form (";<key>=<value>"), the
	// first written whenever the kind is set.
	keys []string
	// ends is the key whose value (unix s) is when the limit ends (a
	// snooze); "": it lasts, and keeps its user's bucket from expiring
	// (users_store.go).
	ends string
	set  func(u UserLimits) bool
	// copy sets dst's limit of this kind to src's.
	copy func(dst *UserLimits, src UserLimits)
	// encode writes the kind's parts, set or not ("" when not).
	encode func(u UserLimits) string
	// parse reads one of its parts into u.
	parse func(u *UserLimits, key, v string) error
	// problems checks the limit against the rules (r.Users is not nil).
	problems func(r Rules, u UserLimits, ps *problems.List)
	// describe says the limit for a person, a line a part (it is set).
	describe func(u UserLimits, ur *UserRules) []string
	// lua is the script's part (a template; its data is kindData): run
	// in order, for a user with limits, before the caps; ul holds the
	// stored form, chn the intent's channel. A kind that holds intents
	// back returns {{.Hold}} + t, and hold decides what that means.
	lua  string
	hold func(ps *policySet, r *Request, d *Decision, until time.Time)
}

// kindData is a kind's Lua template's data.
type kindData struct {
	// Hold is the reply of an intent this kind holds back (plus t, until
	// when).
	Hold       string
	OffsetBias int
}

var userKinds = []userKind{
	{
		name: "snooze", keys: []string{"s", "sc"}, ends: "s",
		set: func(u UserLimits) bool { return !u.SnoozeUntil.IsZero() },
		copy: func(dst *UserLimits, src UserLimits) {
			dst.SnoozeUntil, dst.SnoozeChannels = src.SnoozeUntil, slices.Clone(src.SnoozeChannels)
		},
		encode: func(u UserLimits) string {
			if u.SnoozeUntil.IsZero() {
				return ""
			}
			s := ";s=" + strconv.FormatInt(u.SnoozeUntil.Unix(), 10)
			if len(u.SnoozeChannels) > 0 {
				s += ";sc=" + strings.Join(u.SnoozeChannels, ",")
			}
			return s
		},
		parse: func(u *UserLimits, key, v string) error {
			if key == "sc" {
				u.SnoozeChannels = strings.Split(v, ",")
				return nil
			}
			t, err := strconv.ParseInt(v, 10, 64)
			u.SnoozeUntil = time.Unix(t, 0).UTC()
			return err
		},
		problems: func(r Rules, u UserLimits, ps *problems.List) {
			for i, c := range u.SnoozeChannels {
				if !slices.Contains(r.Channels, c) {
					ps.Add(problems.Key("snooze").Key("channels").Index(i), "%q is not one of the policy's channels (%s)", c, strings.Join(r.Channels, ", "))
				}
			}
			if len(u.SnoozeChannels) > 0 && u.SnoozeUntil.IsZero() {
				ps.Add(problems.Key("snooze").Key("until"), "is required")
			}
		},
		describe: func(u UserLimits, _ *UserRules) []string {
			on := "every channel"
			if len(u.SnoozeChannels) > 0 {
				on = strings.Join(u.SnoozeChannels, ", ")
			}
			return []string{fmt.Sprintf("snoozed until %s (%s)", u.SnoozeUntil.UTC().Format(time.RFC3339), on)}
		},
		lua: `  local s = tonumber(string.match(ul, ';s=(%d+)') or '') -- or '': a Lua without a match's nil (gopher-lua, the demo's) refuses tonumber()
  if s and s > now then
    local sc = string.match(ul, ';sc=([^;]*)')
    if not sc or string.find(',' .. sc .. ',', ',' .. chn .. ',', 1, true) then return {{.Hold}} + s end
  end`,
		hold: (*policySet).snoozed,
	},
	{
		name: "tier", keys: []string{"t"},
		set:    func(u UserLimits) bool { return u.Tier != "" },
		copy:   func(dst *UserLimits, src UserLimits) { dst.Tier = src.Tier },
		encode: func(u UserLimits) string { return cond(u.Tier != "", ";t="+u.Tier) },
		parse:  func(u *UserLimits, _, v string) error { u.Tier = v; return nil },
		problems: func(r Rules, u UserLimits, ps *problems.List) {
			if _, ok := r.Users.Tier(u.Tier); u.Tier != "" && !ok {
				var names []string
				for _, t := range r.Users.Tiers {
					names = append(names, t.Name)
				}
				ps.Add(problems.Key("tier"), "%q is not one of the policy's tiers (%s)", u.Tier, strings.Join(names, ", "))
			}
		},
		describe: func(u UserLimits, _ *UserRules) []string { return []string{"tier " + u.Tier} },
		// The tier's limits are checked after the segment's (the template).
		lua: `  utier = string.match(ul, ';t=([^;]*)')`,
	},
	{
		name: "channels", keys: []string{"c"},
		set:  func(u UserLimits) bool { return len(u.Channels) > 0 },
		copy: func(dst *UserLimits, src UserLimits) { dst.Channels = maps.Clone(src.Channels) },
		encode: func(u UserLimits) string {
			var b strings.Builder
			for i, c := range slices.Sorted(maps.Keys(u.Channels)) {
				b.WriteString(cond(i == 0, ";c=", ","))
				b.WriteString(c + ":" + strconv.Itoa(u.Channels[c]))
			}
			return b.String()
		},
		parse: func(u *UserLimits, _, v string) error {
			u.Channels = map[string]int{}
			for _, cm := range strings.Split(v, ",") {
				c, m, _ := strings.Cut(cm, ":")
				n, err := strconv.Atoi(m)
				if err != nil {
					return err
				}
				u.Channels[c] = n
			}
			return nil
		},
		problems: func(r Rules, u UserLimits, ps *problems.List) {
			for _, c := range slices.Sorted(maps.Keys(u.Channels)) {
				at := problems.Key("channels").Key(c)
				switch m := u.Channels[c]; {
				case !slices.Contains(r.Users.Channels, c):
					ps.Add(at, "%q is not one of the channels users may turn down (%s)", c, strings.Join(r.Users.Channels, ", "))
				case m < 0 || m > r.Users.MaxPerChannel:
					ps.Add(at, "%d out of range [0, %d] (user_limits.max_per_channel)", m, r.Users.MaxPerChannel)
				}
			}
		},
		describe: describeChannels,
		// The channel's max is checked after the segment's (the template).
		lua: `  local cs = string.match(ul, ';c=([^;]*)')
  if cs then
    cs = ',' .. cs
    local q = string.find(cs, ',' .. chn .. ':', 1, true)
    if q then ucm = tonumber(string.match(cs, '^%d+', q + #chn + 2) or '') end
  end`,
	},
	{
		name: "quiet_hours", keys: []string{"q"},
		set: func(u UserLimits) bool { return u.Quiet != nil },
		copy: func(dst *UserLimits, src UserLimits) {
			dst.Quiet = nil
			if q := src.Quiet; q != nil {
				dst.Quiet = &UserQuiet{q.From, q.To}
			}
		},
		encode: func(u UserLimits) string {
			if q := u.Quiet; q != nil {
				return ";q=" + strconv.Itoa(q.From) + "-" + strconv.Itoa(q.To)
			}
			return ""
		},
		parse: func(u *UserLimits, _, v string) error {
			from, to, _ := strings.Cut(v, "-")
			q := &UserQuiet{}
			u.Quiet = q
			var err error
			if q.From, err = strconv.Atoi(from); err != nil {
				return err
			}
			q.To, err = strconv.Atoi(to)
			return err
		},
		problems: func(_ Rules, u UserLimits, ps *problems.List) {
			q := u.Quiet
			if q == nil {
				return
			}
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
		},
		describe: func(u UserLimits, _ *UserRules) []string {
			return []string{fmt.Sprintf("quiet hours %02d:%02d-%02d:%02d (their time zone)", u.Quiet.From/60, u.Quiet.From%60, u.Quiet.To/60, u.Quiet.To%60)}
		},
		lua: `  local qf, qt = string.match(ul, ';q=(%d+)-(%d+)')
  if qf then
    qf, qt = tonumber(qf), tonumber(qt)
    local ls = (now + (uoff - {{.OffsetBias}}) * 60) % 86400 -- seconds after the user's midnight
    local lm = math.floor(ls / 60)
    if (qf < qt and lm >= qf and lm < qt) or (qt < qf and (lm >= qf or lm < qt)) then
      local e = now - ls + qt * 60
      if e <= now then e = e + 86400 end
      return {{.Hold}} + e
    end
  end`,
		hold: func(_ *policySet, _ *Request, d *Decision, until time.Time) {
			d.Outcome, d.NotBefore, d.Reason = Deferred, until, ReasonUserQuietHours
		},
	},
}

// describeChannels says a user's channel limits, "per" the policy's
// channel window.
func describeChannels(u UserLimits, ur *UserRules) []string {
	per := "the policy's channel window"
	switch {
	case ur != nil && ur.ChannelWindow%(24*time.Hour) == 0: // 7d, not model's 1w
		per = fmt.Sprintf("%dd", ur.ChannelWindow/(24*time.Hour))
	case ur != nil:
		per = model.Duration(ur.ChannelWindow).String()
	}
	var parts []string
	for _, c := range slices.Sorted(maps.Keys(u.Channels)) {
		if n := u.Channels[c]; n == 0 {
			parts = append(parts, fmt.Sprintf("channel %s off", c))
		} else {
			parts = append(parts, fmt.Sprintf("channel %s at most %d per %s", c, n, per))
		}
	}
	return parts
}

func cond(ok bool, yes string, no ...string) string {
	if ok {
		return yes
	}
	return strings.Join(no, "")
}
