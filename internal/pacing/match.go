package pacing

// What a budget matches intents on, in one table: each dimension's key in
// the policy, its values in a Where, the intent's value, what an empty
// list covers, its words and how a listed value is checked. Match, the
// policy's checks (values, a budget another one shadows), its descriptions
// and diff, and `capper budgets` read the table. A new dimension is a
// Where field, an Intent field (and Clone) and a row here; then the
// policy's field (policy/budgets.go: Budget and matching) and the intent's
// value (dispatch/intent.go: Intent.Pacing).

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/capper-dev/capper/internal/capping"
)

// Intent is what budgets match an intent on: its value in each dimension,
// and its priority (which picks the lane).
type Intent struct {
	Channel, Route string
	Priority       capping.Priority
}

// Clone is in with strings of its own (to keep it while the buffer it was
// decoded from is reused).
func (in Intent) Clone() Intent {
	in.Channel, in.Route = strings.Clone(in.Channel), strings.Clone(in.Route)
	return in
}

// Vocabulary is what a policy names, that a listed value may have to be
// one of.
type Vocabulary struct {
	Channels []string
}

// Where is what a budget covers: a list per dimension, each empty list
// covering what its row says.
type Where struct {
	Channels []string // the policy's channels; empty: every channel
	Routes   []string // the intents' routes; empty: any route, none included
}

// RoutePattern is what a route may be, in a budget and in an intent's
// route field.
var RoutePattern = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,63}$`)

type dim struct {
	key  string // the policy's key, and a description's word
	list func(w *Where) []string
	of   func(in Intent) string // by value: a pointer through a func value would put every matched intent on the heap
	// all is what an empty list covers when the values are a closed set
	// (the policy's channels); nil: any value, none included, which no
	// list names.
	all func(v *Vocabulary) []string
	// every is an empty list in words.
	every string
	// check says what is wrong with a listed value ("": nothing).
	check func(v string, voc *Vocabulary) string
}

var dims = [...]dim{
	{key: "channels", list: func(w *Where) []string { return w.Channels }, of: func(in Intent) string { return in.Channel },
		all: func(v *Vocabulary) []string { return v.Channels }, every: "every channel",
		check: func(c string, v *Vocabulary) string {
			if !slices.Contains(v.Channels, c) {
				return strconv.Quote(c) + " is not one of the channels"
			}
			return ""
		}},
	{key: "routes", list: func(w *Where) []string { return w.Routes }, of: func(in Intent) string { return in.Route },
		every: "any route",
		check: func(r string, _ *Vocabulary) string {
			if !RoutePattern.MatchString(r) {
				return fmt.Sprintf("%q must match %s (an intent's route field)", r, RoutePattern)
			}
			return ""
		}},
}

// Matches reports whether w covers the intent: in every dimension, an
// empty list or one that holds the intent's value (what an audit of the
// deliveries asks too).
func (w Where) Matches(in Intent) bool { return w.covers(&in) }

// covers is Matches without copies.
func (w *Where) covers(in *Intent) bool {
	for i := range dims {
		d := &dims[i]
		if l := d.list(w); len(l) > 0 && !slices.Contains(l, d.of(*in)) {
			return false
		}
	}
	return true
}

// Covering says what w covers, a phrase per dimension in the table's
// order: "every channel", "channels email|push".
func (w Where) Covering() []string {
	out := make([]string, len(dims))
	for i := range dims {
		d := &dims[i]
		out[i] = d.every
		if l := d.list(&w); len(l) > 0 {
			v := slices.Clone(l)
			slices.Sort(v)
			out[i] = d.key + " " + strings.Join(v, "|")
		}
	}
	return out
}

// Covers is Covering in one phrase.
func (w Where) Covers() string { return strings.Join(w.Covering(), ", ") }

// Problems reports each listed value that is wrong or listed twice, by
// dimension key and index.
func (w Where) Problems(voc Vocabulary, add func(key string, i int, msg string)) {
	for k := range dims {
		d := &dims[k]
		l := d.list(&w)
		for i, v := range l {
			switch msg := d.check(v, &voc); {
			case msg != "":
				add(d.key, i, msg)
			case slices.Contains(l[:i], v):
				add(d.key, i, strconv.Quote(v)+" is listed twice")
			}
		}
	}
}

// CoveredBy reports whether e covers every intent w covers (so that a
// budget of w, listed after one of e, could never pace one).
func (w Where) CoveredBy(e Where, voc Vocabulary) bool {
	for k := range dims {
		d := &dims[k]
		el := d.list(&e)
		if len(el) == 0 {
			continue
		}
		bl := d.list(&w)
		if len(bl) == 0 && d.all != nil {
			bl = d.all(&voc)
		}
		if len(bl) == 0 || slices.ContainsFunc(bl, func(v string) bool { return !slices.Contains(el, v) }) {
			return false
		}
	}
	return true
}
