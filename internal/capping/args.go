package capping

// The script's arguments, defined once: their order, what each is, when a
// set of rules needs one, and its value for a call. The generated script
// reads them by name (ARGV[{{.Arg.name}}], and its header lists them from
// this table), placeArgs numbers the ones a set needs, and appendArgs
// sends them in that order. Adding an argument is a row here and a case in
// appendArgs.

import "strconv"

type argKind uint8

const (
	argField argKind = iota
	argNow
	argDigest
	argPolicy
	argApplies
	argRecords
	argCampaign
	argPriority
	argDay
	argWeek
	argMonth
	argMode
	argIdem
	numArgs
)

// argSpec is one argument: its name in the template, what it is, and
// whether a set of rules needs it (need nil: every call passes it).
type argSpec struct {
	name, doc string
	need      func(ps *policySet) bool
}

var argSpecs = [numArgs]argSpec{
	argField:    {"field", "the user's field in the bucket (<uid%32>)", nil},
	argNow:      {"now", "the decision time (unix s, 4 bytes big endian)", nil},
	argDigest:   {"digest", "the intent id's digest (5 bytes)", nil},
	argPolicy:   {"policy", "the intent's policy (1 = the default one, then the segments in order)", nil},
	argApplies:  {"applies", "the limits of that policy that apply (bit i-1: limit i)", nil},
	argRecords:  {"records", "the scopes the intent falls in, to record it in (bit i-1: scope i)", nil},
	argCampaign: {"campaign", "the campaign (3-byte hash), for the per-campaign scopes", (*policySet).perCampaign},
	argPriority: {"priority", "the priority (0 low, 1 normal, 2 high), for reserved slots", (*policySet).reserves},
	argDay:      {"day", "the start of the intent's calendar day (unix s)", func(ps *policySet) bool { return ps.calendars[Day-1] }},
	argWeek:     {"week", "the start of the intent's calendar week (unix s)", func(ps *policySet) bool { return ps.calendars[Week-1] }},
	argMonth:    {"month", "the start of the intent's calendar month (unix s)", func(ps *policySet) bool { return ps.calendars[Month-1] }},
	argMode:     {"mode", "'b': an honoured bypass, recorded without checking", (*policySet).mayOverride},
	argIdem:     {"idem", "'i': a refusal also returns the idempotency entries (for the worker's refusal cache)", nil},
}

// argPlaces says where each argument is in ARGV (1-based; 0: not passed).
type argPlaces struct {
	pos [numArgs]int
	n   int // arguments in all
}

// placeArgs numbers the arguments the set needs, in the table's order.
func (ps *policySet) placeArgs() {
	for k, a := range argSpecs {
		if a.need == nil || a.need(ps) {
			ps.args.n++
			ps.args.pos[k] = ps.args.n
		}
	}
}

func (ps *policySet) perCampaign() bool {
	for _, s := range ps.scopes {
		if s.per == PerCampaign {
			return true
		}
	}
	return false
}

func (ps *policySet) reserves() bool {
	for _, p := range ps.pols {
		for _, l := range p.limits {
			if l.Reserve.Slots > 0 {
				return true
			}
		}
	}
	return false
}

func (ps *policySet) mayOverride() bool {
	return len(ps.rules.Overrides.Campaigns)+len(ps.rules.Overrides.Categories) > 0
}

// fixedArgs are the arguments a call's caller owns (the engine passes
// pointers to its per-batch strings: no allocation per value).
type fixedArgs struct{ field, now, digest any }

// appendArgs appends a call's ARGV, in order.
func (ps *policySet) appendArgs(args []any, f fixedArgs, r *Request, c *call) []any {
	for k := range numArgs {
		if ps.args.pos[k] == 0 {
			continue
		}
		switch k {
		case argField:
			args = append(args, f.field)
		case argNow:
			args = append(args, f.now)
		case argDigest:
			args = append(args, f.digest)
		case argPolicy:
			args = append(args, strconv.Itoa(c.plan.pol+1))
		case argApplies:
			args = append(args, int64(c.plan.applies))
		case argRecords:
			args = append(args, int64(c.plan.records))
		case argCampaign:
			h := campaignHash(r.Campaign)
			args = append(args, string(h[:]))
		case argPriority:
			args = append(args, int64(r.Priority))
		case argDay, argWeek, argMonth:
			args = append(args, c.plan.cal[k-argDay].start)
		case argMode:
			args = append(args, pick(c.bypass, "b", "c"))
		case argIdem:
			args = append(args, pick(c.wantIdem, "i", "-"))
		}
	}
	return args
}

// argData is the arguments as the template reads them: positions by name,
// and the header's list.
func (ps *policySet) argData() (pos map[string]int, docs []argDoc) {
	pos = map[string]int{}
	for k, a := range argSpecs {
		if p := ps.args.pos[k]; p > 0 {
			pos[a.name] = p
			docs = append(docs, argDoc{Pos: p, Name: a.name, Doc: a.doc})
		}
	}
	return pos, docs
}

type argDoc struct {
	Pos       int
	Name, Doc string
}

func pick(b bool, yes, no string) string {
	if b {
		return yes
	}
	return no
}
