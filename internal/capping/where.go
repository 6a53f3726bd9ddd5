package capping

// Where, and its dimensions in one table: what a limit's where can select
// on, how each is read from a Where and from a Request, and how a listed
// value is checked. Scopes (scope.go: compiled sets, matching, identity,
// words), validation (rules.go) and the policy diff read the table, so a
// dimension is a field of Where and a row here (plus, for a new intent
// field, the Request field and the decoder: see CONTRIBUTING.md, "Where to
// look").

import "strconv"

// Where selects the intents a limit applies to, and the past sends it
// counts: an intent matches when it matches every dimension that is set (a
// channel of Channels, any tag of Tags, a category of Categories, a campaign
// of Campaigns). An empty Where matches every intent. The policy document
// (package policy) holds a limit's where as a Where: the yaml tags are its
// keys there.
type Where struct {
	Channels   []string `yaml:"channels,omitempty"`
	Tags       []string `yaml:"tags,omitempty"` // any of them
	Categories []string `yaml:"categories,omitempty"`
	Campaigns  []string `yaml:"campaigns,omitempty"`
}

// whereDim is one dimension of a Where.
type whereDim struct {
	key  string // its key under where (and in a scope's identity and words)
	list func(w *Where) []string
	// one is the intent's value of a one-valued field; many those of a
	// many-valued one, of which any may match.
	one  func(r *Request) string
	many func(r *Request) []string
	// check says what is wrong with a listed value, naming it ("":
	// nothing), given the policy's channels and categories.
	check func(v string, channels, categories map[string]bool) string
}

// The dimensions, in the order of a scope's identity (canonical): a change
// of order would give every scope another id, and reset every count.
const (
	dimChannels = iota
	dimTags
	dimCategories
	dimCampaigns
	numDims
)

var whereDims = [numDims]whereDim{
	dimChannels: {key: "channels", list: func(w *Where) []string { return w.Channels }, one: func(r *Request) string { return r.Channel },
		check: func(v string, channels, _ map[string]bool) string {
			return unless(channels[v], strconv.Quote(v)+" is not one of the channels")
		}},
	dimTags: {key: "tags", list: func(w *Where) []string { return w.Tags }, many: func(r *Request) []string { return r.Tags },
		check: func(v string, _, _ map[string]bool) string {
			return unless(ValidTag(v), strconv.Quote(v)+" must be 1 to "+strconv.Itoa(MaxTagBytes)+" bytes of printable characters")
		}},
	dimCategories: {key: "categories", list: func(w *Where) []string { return w.Categories }, one: func(r *Request) string { return r.Category },
		check: func(v string, _, categories map[string]bool) string {
			return unless(categories[v], strconv.Quote(v)+" is not one of the categories")
		}},
	dimCampaigns: {key: "campaigns", list: func(w *Where) []string { return w.Campaigns }, one: func(r *Request) string { return r.Campaign },
		check: func(v string, _, _ map[string]bool) string { return unless(v != "", "is empty") }},
}

func unless(ok bool, msg string) string {
	if ok {
		return ""
	}
	return msg
}

// WhereList is one dimension of a Where that is set: its key and values.
type WhereList struct {
	Key    string
	Values []string
}

// Lists are the dimensions of w that are set, in the table's order.
func (w Where) Lists() []WhereList {
	var out []WhereList
	for _, d := range whereDims {
		if l := d.list(&w); len(l) > 0 {
			out = append(out, WhereList{Key: d.key, Values: l})
		}
	}
	return out
}

// compiledWhere is a Where as sets, by dimension (nil: not set).
type compiledWhere [numDims]map[string]bool

// set counts the dimensions that are set.
func (cw *compiledWhere) set() int {
	n := 0
	for _, s := range cw {
		if s != nil {
			n++
		}
	}
	return n
}

func compileWhere(w Where) compiledWhere {
	var cw compiledWhere
	for i, d := range whereDims {
		cw[i] = setOf(d.list(&w))
	}
	return cw
}

func setOf(list []string) map[string]bool {
	if len(list) == 0 {
		return nil
	}
	m := make(map[string]bool, len(list))
	for _, s := range list {
		m[s] = true
	}
	return m
}

// matches reports whether an intent falls in the where: in every dimension
// that is set (any value of a many-valued one).
func (cw *compiledWhere) matches(r *Request) bool {
	for i, set := range cw {
		if set == nil {
			continue
		}
		d := &whereDims[i]
		if d.one != nil {
			if !set[d.one(r)] {
				return false
			}
			continue
		}
		any := false
		for _, v := range d.many(r) {
			if set[v] {
				any = true
				break
			}
		}
		if !any {
			return false
		}
	}
	return true
}
