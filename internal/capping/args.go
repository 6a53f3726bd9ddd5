package capping

// The script's arguments, defined once: their order, what each is, when a
// set of rules needs one, and how it is sent. The user's field is an ARGV
// of its own (the script passes it to Redis as it is); everything else is
// a field of one packed argument (ARGV[2], big endian), which the script
// reads in one call: each argument costs Redis a string to parse and one
// for Lua, and the worker no boxed value. The generated
// script reads them by name (ARGV[{{.Argv.name}}], or at {{.At.name}} in
// the packed one; its header lists them from this table), placeArgs places
// the ones a set needs, and appendPacked writes them. Adding an argument is
// a row here and a case in appendPacked.

import (
	"encoding/binary"
	"slices"
)

// utcOffsetBias keeps a UTC offset in minutes (-720 to +840) positive.
const utcOffsetBias = 1024

type argKind uint8

const (
	argField argKind = iota
	argPacked
	argDigest // then argNow, right after it: together, the idempotency entry
	argNow
	argPolicy
	argApplies
	argRecords
	argFlags
	argPriority
	argDay
	argWeek
	argMonth
	argCampaign
	argUApplies
	argChannel
	argOffset
	numArgs
)

// argSpec is one argument: its name in the template, what it is, its size
// in the packed argument (0: an ARGV of its own), and whether a set of
// rules needs it (need nil: every call passes it).
type argSpec struct {
	name, doc string
	size      int
	need      func(ps *policySet) bool
}

// Flags of argFlags.
const (
	flagBypass   = 1 // an honoured bypass: recorded without checking
	flagWantIdem = 2 // a refusal also returns the idempotency entries (for the refusal cache)
)

var argSpecs = [numArgs]argSpec{
	argField:    {"field", "the user's field in the bucket (<uid%32>)", 0, nil},
	argPacked:   {"packed", "the fields below, packed", 0, nil},
	argDigest:   {"digest", "the intent id's digest", digestSize, nil},
	argNow:      {"now", "the decision time (unix s)", timeSize, nil},
	argPolicy:   {"policy", "the intent's policy (1 = the default one, then the segments in order)", 2, nil},
	argApplies:  {"applies", "the limits of that policy that apply (bit i-1: limit i)", 4, nil},
	argRecords:  {"records", "the scopes the intent falls in, to record it in (bit i-1: scope i)", 4, nil},
	argFlags:    {"flags", "1: an honoured bypass, recorded without checking; 2: a refusal also returns the idempotency entries", 1, nil},
	argPriority: {"priority", "the priority (0-100; low, normal, high are 25, 50, 75), for reserved slots", 1, (*policySet).reserves},
	argDay:      {"day", "the start of the intent's calendar day (unix s)", 4, func(ps *policySet) bool { return ps.calendars[Day-1] }},
	argWeek:     {"week", "the start of the intent's calendar week (unix s)", 4, func(ps *policySet) bool { return ps.calendars[Week-1] }},
	argMonth:    {"month", "the start of the intent's calendar month (unix s)", 4, func(ps *policySet) bool { return ps.calendars[Month-1] }},
	argCampaign: {"campaign", "the campaign (3-byte hash), for the per-campaign scopes", campaignSize, (*policySet).perCampaign},
	argUApplies: {"uapplies", "the users' limits that apply (bit k: tier or channel limit k)", 4, (*policySet).readsUsers},
	argChannel:  {"channel", "the channel (1-based in the policy's channels), for a user's snooze and channel limits", 1, (*policySet).readsUsers},
	argOffset:   {"offset", "the user's UTC offset now (minutes + 1024), for their own quiet hours", 2, (*policySet).readsUsers},
}

func (ps *policySet) readsUsers() bool { return ps.users != nil }

// argPlaces says where each argument is: pos, its ARGV index (1-based) or
// its offset in the packed one (1-based, as Lua counts); 0: not passed.
// After the fixed fields (packed bytes), the packed argument ends with the
// slots campaign plans book (plans.go), when any: a byte pair per booked
// limit, its index in the policy (1-based) and the slots.
type argPlaces struct {
	pos    [numArgs]int
	argv   int // the ARGV in all
	packed int // the fixed fields' bytes
}

// placeArgs places the arguments the set needs, in the table's order.
func (ps *policySet) placeArgs() {
	off := 1
	for k, a := range argSpecs {
		switch {
		case a.need != nil && !a.need(ps):
		case a.size == 0:
			ps.args.argv++
			ps.args.pos[k] = ps.args.argv
		default:
			ps.args.pos[k] = off
			off += a.size
		}
	}
	ps.args.packed = off - 1
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

// appendPacked appends a call's packed argument.
func (ps *policySet) appendPacked(b []byte, r *Request, c *call) []byte {
	for k := argPacked + 1; k < numArgs; k++ {
		if ps.args.pos[k] == 0 {
			continue
		}
		switch k {
		case argDigest:
			d := digest(r.IntentID)
			b = append(b, d[:digestSize]...)
		case argNow:
			b = binary.BigEndian.AppendUint32(b, uint32(r.At.Unix()))
		case argPolicy:
			b = binary.BigEndian.AppendUint16(b, uint16(c.plan.pol+1))
		case argApplies:
			b = binary.BigEndian.AppendUint32(b, c.plan.applies)
		case argRecords:
			b = binary.BigEndian.AppendUint32(b, c.plan.records)
		case argFlags:
			var f byte
			if c.bypass {
				f |= flagBypass
			}
			if c.wantIdem {
				f |= flagWantIdem
			}
			b = append(b, f)
		case argPriority:
			b = append(b, byte(r.Priority))
		case argDay, argWeek, argMonth:
			b = binary.BigEndian.AppendUint32(b, uint32(c.plan.cal[k-argDay].start))
		case argCampaign:
			h := campaignHash(r.Campaign)
			b = append(b, h[:]...)
		case argUApplies:
			b = binary.BigEndian.AppendUint32(b, c.plan.uapplies)
		case argChannel:
			b = append(b, byte(slices.Index(ps.rules.Channels, r.Channel)+1))
		case argOffset:
			b = binary.BigEndian.AppendUint16(b, uint16(c.plan.offset/60+utcOffsetBias))

		}
	}
	if c.plan.anyBooked {
		for li, n := range c.plan.booked {
			if n > 0 {
				b = append(b, byte(li+1), n)
			}
		}
	}
	return b
}

// argData is the arguments as the template reads them: ARGV indexes and
// packed offsets by name, and the header's list.
func (ps *policySet) argData() (argv, at map[string]int, docs []argDoc) {
	argv, at = map[string]int{}, map[string]int{}
	for k, a := range argSpecs {
		p := ps.args.pos[k]
		if p == 0 {
			continue
		}
		d := argDoc{Name: a.name, Doc: a.doc}
		if a.size == 0 {
			argv[a.name], d.Argv = p, p
		} else {
			at[a.name], d.From, d.To = p, p, p+a.size-1
		}
		docs = append(docs, d)
	}
	return argv, at, docs
}

// argDoc is one line of the script's header: ARGV[Argv], or bytes From-To
// of the packed argument.
type argDoc struct {
	Argv, From, To int
	Name, Doc      string
}

// appendArgv appends a call's ARGV, in the table's order: pointers to its
// strings (prepare built them), so that nothing is boxed per call.
func (ps *policySet) appendArgv(args []any, c *call) []any {
	for k := range argPacked + 1 {
		switch k {
		case argField:
			args = append(args, &c.field)
		case argPacked:
			args = append(args, &c.packed)
		}
	}
	return args
}
