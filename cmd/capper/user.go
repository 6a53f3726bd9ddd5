package main

// capper user show|set|snooze|forget: a user's own limits (the
// user-limits topic, kafka.topics.user_limits), and erasing a user.

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/common/model"

	"github.com/capper-dev/capper/internal/app"
	"github.com/capper-dev/capper/internal/capping"
	"github.com/capper-dev/capper/internal/cli"
	"github.com/capper-dev/capper/internal/userlimits"
)

type userCmd struct {
	Show   userShowCmd   `cmd:"" help:"Show a user's own limits as Redis holds them (what the workers decide by), and what the policy in force says of them."`
	Set    userSetCmd    `cmd:"" help:"Change a user's tier, channel limits or quiet hours: their limits are read from Redis, the flags applied, the result checked against the policy in force, and the whole record written to the user-limits topic; then it waits until the workers applied it."`
	Snooze userSnoozeCmd `cmd:"" help:"Snooze a user's intents (on every channel, or some) until a time, or end a snooze (--off); written like set."`
	Forget userForgetCmd `cmd:"" help:"Erase a user: writes their tombstone to the user-limits topic (every worker drops what its refusal cache holds about them when it reads it) and removes their record (send log, idempotency entries) and limits from Redis."`
}

// userArgs are what every user command takes.
type userArgs struct {
	Config string `required:"" type:"existingfile" help:"Config file (its Redis, its Kafka settings and kafka.topics.user_limits, and the policy in force: policy.source)." completion:"<file>"`
	User   uint64 `arg:"" name:"id" help:"The user id (an intent's user_id)."`
}

type userShowCmd struct {
	userArgs
	JSON bool `name:"json" help:"Print the limits as the user-limits topic's record (JSON)."`
}

func (c *userShowCmd) Run(e *env) error {
	cfg, log, err := e.forHuman(c.Config)
	if err != nil {
		return err
	}
	r, err := app.ShowUser(e.ctx, cfg, c.User, log)
	if err != nil {
		return err
	}
	if c.JSON {
		return r.WriteJSON(e.stdout)
	}
	return r.WriteText(e.stdout)
}

// waitFlag is how long set and snooze wait for the workers.
type waitFlag struct {
	Wait time.Duration `default:"10s" help:"How long to wait until Redis shows the limits (the workers applied the record); 0: do not wait. Not applied in time is said, not an error."`
}

type userSetCmd struct {
	userArgs
	Tier          string   `help:"The frequency tier the user chose (one of the policy's user_limits.tiers)."`
	NoTier        bool     `name:"no-tier" help:"No tier."`
	Channel       []string `placeholder:"CHANNEL=MAX" help:"At most MAX sends of CHANNEL per the policy's user_limits.channel_window (0: the channel is off); repeat for several channels."`
	ClearChannels bool     `name:"clear-channels" help:"Remove the user's channel limits (before --channel)."`
	Quiet         string   `placeholder:"HH:MM-HH:MM" help:"The user's own quiet hours, in their time zone (22:00-07:00 spans midnight)."`
	NoQuiet       bool     `name:"no-quiet" help:"No quiet hours of their own."`
	Limit         []string `sep:"none" placeholder:"KIND=JSON" help:"Set a kind of limit as the user-limits record's field of that name writes it (e.g. quiet_hours={\"from\":\"22:00\",\"to\":\"07:00\"}): every kind, also those without a flag of their own; repeat for several."`
	NoLimit       []string `name:"no-limit" placeholder:"KIND" help:"Remove a kind of limit (its record field's name, as for --limit); repeat for several."`
	Clear         bool     `help:"Start from no limits (then apply the other flags): with no other flag, clears every limit, the snooze too."`
	waitFlag
}

func (c *userSetCmd) Run(e *env) error {
	var ch app.UserChange
	switch {
	case c.Tier != "" && c.NoTier:
		return cli.UsageError(errors.New("--tier and --no-tier: give one"))
	case c.Quiet != "" && c.NoQuiet:
		return cli.UsageError(errors.New("--quiet and --no-quiet: give one"))
	case c.Tier == "" && !c.NoTier && len(c.Channel) == 0 && !c.ClearChannels && c.Quiet == "" && !c.NoQuiet && !c.Clear && len(c.Limit) == 0 && len(c.NoLimit) == 0:
		return cli.UsageError(errors.New("nothing to change: give --tier, --no-tier, --channel, --clear-channels, --quiet, --no-quiet, --limit, --no-limit or --clear"))
	}
	for _, kv := range c.Limit {
		kind, raw, ok := strings.Cut(kv, "=")
		if !ok {
			return cli.UsageError(fmt.Errorf("--limit %q: want KIND=JSON, KIND one of %s", kv, strings.Join(capping.UserKinds(), ", ")))
		}
		if err := userlimits.DecodeField(kind, json.RawMessage(raw), &ch.Set); err != nil {
			return cli.UsageError(fmt.Errorf("--limit %s: %w", kind, err))
		}
		ch.Kinds = append(ch.Kinds, kind)
	}
	for _, kind := range c.NoLimit {
		if !slices.Contains(capping.UserKinds(), kind) {
			return cli.UsageError(fmt.Errorf("--no-limit %q: not a kind of limit (%s)", kind, strings.Join(capping.UserKinds(), ", ")))
		}
	}
	ch.Unset = c.NoLimit
	if c.Tier != "" || c.NoTier {
		ch.Tier = &c.Tier
	}
	for _, kv := range c.Channel {
		name, max, ok := strings.Cut(kv, "=")
		n, err := strconv.Atoi(max)
		if !ok || name == "" || err != nil || n < 0 {
			return cli.UsageError(fmt.Errorf("--channel %q: want CHANNEL=MAX, MAX a whole number from 0 (off)", kv))
		}
		if ch.Channels == nil {
			ch.Channels = map[string]int{}
		}
		ch.Channels[name] = n
	}
	ch.ClearChannels, ch.NoQuiet, ch.Clear = c.ClearChannels, c.NoQuiet, c.Clear
	if c.Quiet != "" {
		from, to, ok := strings.Cut(c.Quiet, "-")
		f, err1 := userlimits.ParseClock(from)
		t, err2 := userlimits.ParseClock(to)
		if err := errors.Join(err1, err2); !ok || err != nil {
			return cli.UsageError(fmt.Errorf("--quiet %q: want HH:MM-HH:MM, e.g. 22:00-07:00", c.Quiet))
		}
		ch.Quiet = &capping.UserQuiet{From: f, To: t}
	}
	return setUser(e, c.Config, c.User, ch, c.Wait)
}

type userSnoozeCmd struct {
	userArgs
	Until    string       `placeholder:"TIME" help:"Until when: an RFC 3339 time (2026-12-01T08:00:00+01:00), or a local time without offset (2026-12-01T08:00) with --time-zone."`
	TimeZone cli.TimeZone `name:"time-zone" placeholder:"ZONE" help:"The IANA time zone of an --until without offset (e.g. Europe/Berlin)."`
	For      string       `placeholder:"DURATION" help:"For how long from now (e.g. 12h, 7d)."`
	Channels []string     `help:"Only these channels (comma-separated; default every channel)."`
	Off      bool         `help:"End the user's snooze."`
	waitFlag
}

func (c *userSnoozeCmd) Run(e *env) error {
	var ch app.UserChange
	now := time.Now()
	switch n := btoi(c.Until != "") + btoi(c.For != "") + btoi(c.Off); {
	case n != 1:
		return cli.UsageError(errors.New("give one of --until, --for and --off"))
	case c.Off && len(c.Channels) > 0:
		return cli.UsageError(errors.New("--off ends the whole snooze: no --channels"))
	case c.Off:
		ch.NoSnooze = true
	case c.Until != "":
		t, err := parseUntil(c.Until, c.TimeZone.Location, now)
		if err != nil {
			return cli.UsageError(err)
		}
		ch.SnoozeUntil = t
	default:
		d, err := model.ParseDuration(c.For)
		if err != nil || d <= 0 {
			return cli.UsageError(fmt.Errorf("--for: %q is not a duration (e.g. 12h, 7d)", c.For))
		}
		ch.SnoozeUntil = now.Add(time.Duration(d))
	}
	if c.TimeZone.Location != nil && c.Until == "" {
		return cli.UsageError(errors.New("--time-zone is the zone of --until: give --until too"))
	}
	if !c.Off && !ch.SnoozeUntil.After(now) {
		return cli.UsageError(fmt.Errorf("--until: %s is not in the future", ch.SnoozeUntil.Format(time.RFC3339)))
	}
	ch.SnoozeChannels = c.Channels
	return setUser(e, c.Config, c.User, ch, c.Wait)
}

// localLayouts are the times without offset --until takes with
// --time-zone.
var localLayouts = []string{"2006-01-02T15:04", "2006-01-02T15:04:05", "2006-01-02 15:04", "2006-01-02 15:04:05", "2006-01-02"}

// parseUntil reads --until: an RFC 3339 time, or, with zone, a local time
// of that zone. An error gives examples (tomorrow 08:00, from now).
func parseUntil(s string, zone *time.Location, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		if zone != nil {
			return time.Time{}, fmt.Errorf("--until %q has an offset: leave out --time-zone, or the offset", s)
		}
		return t, nil
	}
	for _, layout := range localLayouts {
		if _, err := time.Parse(layout, s); err != nil {
			continue
		}
		if zone == nil {
			return time.Time{}, fmt.Errorf("--until %q has no offset: give one (%s) or the time zone it is in (--until %s --time-zone Europe/Berlin)",
				s, tomorrowAt8(now, time.UTC).Format(time.RFC3339), s)
		}
		t, _ := time.ParseInLocation(layout, s, zone)
		return t, nil
	}
	name := "Europe/Berlin"
	if zone != nil {
		name = zone.String()
	}
	ex := tomorrowAt8(now, time.UTC)
	return time.Time{}, fmt.Errorf("--until %q is not a time: write an RFC 3339 time (%s), or a local time and its time zone (--until %s --time-zone %s)",
		s, ex.Format(time.RFC3339), ex.Format("2006-01-02T15:04"), name)
}

// tomorrowAt8 is the next day's 08:00 in zone.
func tomorrowAt8(now time.Time, zone *time.Location) time.Time {
	d := now.In(zone).AddDate(0, 0, 1)
	return time.Date(d.Year(), d.Month(), d.Day(), 8, 0, 0, 0, zone)
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

func setUser(e *env, config string, uid uint64, ch app.UserChange, wait time.Duration) error {
	cfg, log, err := e.forHuman(config)
	if err != nil {
		return err
	}
	r, err := app.SetUser(e.ctx, cfg, uid, ch, app.SetUserOptions{Wait: wait, ConfigPath: config}, log)
	if err != nil {
		return err
	}
	return r.WriteText(e.stdout)
}

type userForgetCmd struct {
	userArgs
}

func (c *userForgetCmd) Run(e *env) error {
	cfg, log, err := e.forHuman(c.Config)
	if err != nil {
		return err
	}
	r, err := app.ForgetUser(e.ctx, cfg, c.User, app.ForgetUserOptions{ConfigPath: c.Config}, log)
	if err != nil {
		return err
	}
	return r.WriteText(e.stdout)
}
