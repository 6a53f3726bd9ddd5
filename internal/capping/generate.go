package capping

// Generating the decide script: the template (packed.lua.tmpl) with the
// compiled set's constants, the record's layout (layout.go), the reply's
// packing (scripts.go) and the arguments' places (args.go) as its data, so
// that none of them is written twice. testdata/*.golden.lua hold the script
// of the example policies: a change of the output shows in review.

import (
	"bytes"
	_ "embed"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"text/template"
	"time"
)

//go:embed packed.lua.tmpl
var packedTemplate string

// chunkScopes is how many scopes' new sections one concatenation of the
// decide script appends (each takes up to 4 registers, of Lua's 250 a
// function has, most of them the scopes' own locals in the largest
// policies).
const chunkScopes = 8

var scriptTemplate = template.Must(template.New("packed.lua").Funcs(template.FuncMap{
	"dbl": func(n int) int { return 2 * n }, // has bit n of a mask: m % dbl(n) >= n
	// qs names the packed argument's first n bytes (q1, q2, ...), which
	// the script takes in one string.byte call; q is the big-endian number
	// of size bytes at off among them.
	"qs": func(n int) string {
		names := make([]string, n)
		for i := range names {
			names[i] = fmt.Sprintf("q%d", i+1)
		}
		return strings.Join(names, ", ")
	},
	"q": func(off, size int) string {
		e := fmt.Sprintf("q%d", off)
		for i := 1; i < size; i++ {
			e = fmt.Sprintf("%s * 256 + q%d", e, off+i)
			if i < size-1 {
				e = "(" + e + ")"
			}
		}
		return e
	},
	// round is what template "full" needs to answer code for limit l.
	"round": func(d scriptData, code string, l limitData, indent int) roundData {
		return roundData{Code: code, Lim: l, Time: d.L.Time, LimitMul: d.R.Limit, In: strings.Repeat(" ", indent)}
	},
}).Parse(packedTemplate))

// ScriptSource is the decide script generated for rules (what Redis runs
// for them, as `capper policy script` prints it).
func ScriptSource(r Rules, idempotencyWindow time.Duration) (string, error) {
	set, err := compileRules(r, idempotencyWindow)
	if err != nil {
		return "", err
	}
	return set.script.src, nil
}

type (
	scopeData struct {
		I, Bit, Keep int
		ID           uint32
		PerCampaign  bool
		RetS         int64
		From         string // Lua: the earliest start of a limit's window on the scope
		Used         bool
		Header       string
	}
	limitData struct {
		I, Bit, S, Max, ReserveMax, Below int
		Name, Start                       string
		Rolling                           bool
	}
	// roundData: one check of a limit (template "full"): capped by it,
	// or held by it once bookings are counted.
	roundData struct {
		Code, LimitMul string
		In             string // the indentation
		Lim            limitData
		Time           int
	}
	policyData struct {
		I      int
		Limits []limitData
	}
	// usersData: users' limits. Channels are the policy's channels as
	// Lua string bodies, by index; Chans the channels users may turn down.
	usersData struct {
		// Kinds: each kind's part of the script (userkinds.go).
		Kinds    []string
		Channels []string
		Tiers    []tierData
		Chans    []chanData
	}
	tierData struct {
		Name   string
		Limits []limitData
	}
	chanData struct {
		Idx int
		Lim limitData
	}
	scriptData struct {
		Version                            string
		IdemS, KeyLife, Slack, UnknownRetS int64
		KeyLifeSlack                       int64 // the key's life and slack, the bucket's TTL
		// NewSections: the scopes a record keeps, in chunks of ChunkScopes
		// (the record's concatenations).
		NewSections                          [][]scopeData
		ChunkScopes                          int
		L                                    layoutData
		R                                    replyData
		Argv, At                             map[string]int
		Args                                 []argDoc
		FlagBypass, FlagWantIdem, OffsetBias int
		Packed                               int // the packed argument's fixed bytes
		Scopes                               []scopeData
		Policies                             []policyData
		Users                                *usersData // nil: users' limits are not read
	}
)

func (ps *policySet) generate() (_ string, err error) {
	d := scriptData{Version: ps.version(), IdemS: ps.idem, KeyLife: ps.keyLife, Slack: ps.slack, KeyLifeSlack: ps.keyLife + ps.slack,
		UnknownRetS: unknownRetention, L: layout, R: replyText, FlagBypass: flagBypass, FlagWantIdem: flagWantIdem, OffsetBias: utcOffsetBias, Packed: ps.args.packed}
	d.Argv, d.At, d.Args = ps.argData()
	used := map[int]bool{}
	for pi, p := range ps.pols {
		pd := policyData{I: pi + 1}
		for li, l := range p.limits {
			used[l.scope] = true
			pd.Limits = append(pd.Limits, limitOf(l, li+1, 1<<li))
		}
		d.Policies = append(d.Policies, pd)
	}
	if ps.users != nil {
		u := &usersData{}
		for _, c := range ps.rules.Channels {
			u.Channels = append(u.Channels, luaBytes([]byte(c)...))
		}
		lim := func(k int) limitData {
			used[ps.ulimits[k].scope] = true
			return limitOf(ps.ulimits[k], userLimitBase+k, 1<<k)
		}
		for ti, t := range ps.users.Tiers {
			td := tierData{Name: luaBytes([]byte(t.Name)...)}
			for k := ps.tiers[ti][0]; k < ps.tiers[ti][1]; k++ {
				td.Limits = append(td.Limits, lim(k))
			}
			u.Tiers = append(u.Tiers, td)
		}
		for i, c := range ps.users.Channels {
			u.Chans = append(u.Chans, chanData{Idx: slices.Index(ps.rules.Channels, c) + 1, Lim: lim(ps.chanBase + i)})
		}
		if u.Kinds, err = kindsLua(); err != nil {
			return "", err
		}
		d.Users = u
	}
	for i, s := range ps.scopes {
		d.Scopes = append(d.Scopes, scopeData{I: i + 1, Bit: 1 << i, Keep: s.keep, ID: s.id, PerCampaign: s.per == PerCampaign,
			RetS: s.retention, From: ps.fromExpr(s), Used: used[i], Header: luaBytes(byte(s.id>>16), byte(s.id>>8), byte(s.id))})
	}
	d.ChunkScopes = chunkScopes
	for _, sc := range d.Scopes {
		if sc.Keep == 0 {
			continue
		}
		if n := len(d.NewSections); n == 0 || len(d.NewSections[n-1]) == chunkScopes {
			d.NewSections = append(d.NewSections, nil)
		}
		d.NewSections[len(d.NewSections)-1] = append(d.NewSections[len(d.NewSections)-1], sc)
	}
	var b bytes.Buffer
	if err := scriptTemplate.Execute(&b, d); err != nil {
		return "", fmt.Errorf("generate the script: %w", err)
	}
	return b.String(), nil
}

// kindsLua is the script's part of each kind of users' limits.
func kindsLua() ([]string, error) {
	out := make([]string, len(userKinds))
	for i, k := range userKinds {
		t, err := template.New(k.name).Parse(k.lua)
		if err != nil {
			return nil, fmt.Errorf("the script of users' limits of kind %s: %w", k.name, err)
		}
		hold := fmt.Sprintf("%d * %s", codeUserHeld, replyText.Code)
		if i > 0 {
			hold += fmt.Sprintf(" + %d * %s", i, replyText.Limit)
		}
		var b strings.Builder
		if err := t.Execute(&b, kindData{Hold: hold, OffsetBias: utcOffsetBias}); err != nil {
			return nil, fmt.Errorf("the script of users' limits of kind %s: %w", k.name, err)
		}
		out[i] = b.String()
	}
	return out, nil
}

// limitOf is a limit as the template reads it, answered as limit i, bit
// bit of its mask.
func limitOf(l compiledLimit, i, bit int) limitData {
	ld := limitData{I: i, Bit: bit, S: l.scope + 1, Max: l.Max, Name: strings.ReplaceAll(l.Name, "\n", " "), Rolling: l.Calendar == None}
	if l.Reserve.Slots > 0 {
		ld.ReserveMax, ld.Below = l.Max-l.Reserve.Slots, int(l.Reserve.Below)
	}
	switch l.Calendar {
	case None:
		ld.Start = "now - " + strconv.FormatInt(l.window, 10)
	case Day:
		ld.Start = "cday"
	case Week:
		ld.Start = "cweek"
	case Month:
		ld.Start = "cmonth"
	}
	return ld
}

// fromExpr is the script's expression of scope.from.
func (ps *policySet) fromExpr(s *scope) string {
	var parts []string
	if s.rolling >= 0 {
		parts = append(parts, "now - "+strconv.FormatInt(s.rolling, 10))
	}
	for i, v := range []string{"cday", "cweek", "cmonth"} {
		if s.calendars&(1<<i) != 0 {
			parts = append(parts, v)
		}
	}
	if len(parts) == 1 {
		return parts[0]
	}
	return "math.min(" + strings.Join(parts, ", ") + ")"
}

// luaBytes writes bytes as a Lua string literal's body (decimal escapes).
func luaBytes(bs ...byte) string {
	var s strings.Builder
	for _, b := range bs {
		fmt.Fprintf(&s, "\\%03d", b)
	}
	return s.String()
}
