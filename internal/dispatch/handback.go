package dispatch

// Hand-backs: a send its provider throttled, handed back by its sender in
// the throttled status (the delivery record itself: its value and
// headers). The worker gives the send back (not counted: its slot and the
// id's idempotency entry go, as for an intent never delivered) and holds
// the intent again in its lane's retry topic, which its budget releases
// ahead of the lane's own records (pacing.RetryTopic); released, it is
// decided again like any held intent. Its records name the status record
// as their source (capper-source: every input, a status that hands a send
// back included, has one outcome) and the throttled delivery's input
// (capper-handed-back: its user's home partition comes from it).
//
// Once, whatever is read twice: the give-back takes out only the send the
// delivery's own decision recorded (its capper-decided-at, to the second),
// so a status read again gives back nothing, and the second copy it holds
// is decided Duplicate of the first's delivery (marked capper-duplicate).
// A give-back Redis could not apply (on_redis_error: allow) leaves the
// send counted: the lane record then says when (capper-throttled-at), and
// a Duplicate answer at that time is the intent's own delivery, counted
// once (giveback.go's ownDuplicate).

import (
	"bytes"
	stdjson "encoding/json"
	"slices"
	"strings"
	"time"

	"github.com/capper-dev/capper/internal/capping"
	"github.com/capper-dev/capper/internal/clip"
	"github.com/capper-dev/capper/internal/kafka"
	"github.com/capper-dev/capper/internal/pacing"
)

// Headers of a handed-back intent's records.
const (
	// HeaderHandedBack: the capper-source of the throttled delivery (the
	// input it was of), on every record of the intent handed back.
	HeaderHandedBack = "capper-handed-back"
	// HeaderThrottledAt: the throttled delivery's capper-decided-at, on a
	// lane record whose give-back Redis did not apply (it may still count).
	HeaderThrottledAt = "capper-throttled-at"
)

// HandBack is a throttled send handed back: its delivery record.
type HandBack struct {
	Value     []byte         // the delivery's value: the intent as its producer wrote it
	Headers   []kafka.Header // the delivery's headers that are not capper's (the producer's own)
	DecidedAt time.Time      // its capper-decided-at: the decision that counted it
	Origin    []byte         // its capper-source: the input it was of (nil: not given)
}

// handBackOf reads a throttled status's delivery, and checks the status's
// lane against the delivery's (s.Budget is the delivery's budget after).
func handBackOf(value []byte, s *Status) (*HandBack, error) {
	var doc struct {
		Delivery struct {
			Value   stdjson.RawMessage `json:"value"`
			Headers stdjson.RawMessage `json:"headers"`
		} `json:"delivery"`
	}
	if err := stdjson.Unmarshal(value, &doc); err != nil {
		return nil, invalid("delivery", "must be an object {\"value\": the delivery's value, \"headers\": its headers}: %s", clip.String(err.Error(), 120))
	}
	d := &doc.Delivery
	v := bytes.TrimSpace(d.Value)
	if len(v) == 0 || v[0] != '{' {
		return nil, invalid("delivery.value", "must be the delivery's value (a JSON object), got %s", kindOf(v))
	}
	var hs map[string]string
	if err := stdjson.Unmarshal(d.Headers, &hs); err != nil || hs == nil {
		return nil, invalid("delivery.headers", "must be a JSON object of the delivery's headers, each value a string")
	}
	b, lane := &HandBack{Value: v}, hs[HeaderLane]
	at, ok := hs[HeaderDecidedAt]
	if !ok {
		return nil, invalid("delivery.headers."+HeaderDecidedAt, "is required (the decision the give-back takes out)")
	}
	t, err := time.Parse(time.RFC3339Nano, at)
	if err != nil {
		return nil, invalid("delivery.headers."+HeaderDecidedAt, "%q is not an RFC 3339 time", clip.String(at, 40))
	}
	b.DecidedAt = t
	if hs[HeaderDuplicate] == string(vTrue) {
		// Its decided-at is the id's first delivery's: a give-back at it
		// would take that delivery's send out.
		return nil, invalid("delivery.headers."+HeaderDuplicate, "a duplicate delivery is not handed back: it counted nothing (the id's first delivery is the send)")
	}
	budget, _, ok := strings.Cut(lane, "/")
	if !ok || !pacing.NamePattern.MatchString(budget) {
		return nil, invalid("delivery.headers."+HeaderLane, "%q is not a capper-lane header (budget/lane): only a paced send is handed back", clip.String(lane, 40))
	}
	if s.Budget != "" && s.Budget != budget {
		return nil, invalid("lane", "%q is not the delivery's capper-lane %q", clip.String(s.Budget, 40), clip.String(lane, 40))
	}
	s.Budget = budget
	if src, ok := hs[HeaderSource]; ok && homeOf([]byte(src)) >= 0 {
		b.Origin = []byte(src)
	}
	for _, k := range slices.Sorted(func(yield func(string) bool) {
		for k := range hs {
			if !strings.HasPrefix(k, capperPrefix) && !yield(k) {
				return
			}
		}
	}) {
		b.Headers = append(b.Headers, kafka.Header{Key: k, Value: []byte(hs[k])})
	}
	return b, nil
}

// handBack is what an entry of a handed-back send carries until its batch
// is written.
type handBack struct {
	id        string
	user      uint64
	decidedAt time.Time
}

// readHandBack makes the status entry e, whose status s hands a send back,
// the intent's: m's value and headers become the delivery's (its outcome
// names m as its source), and its give-back is asked for.
func (w *Worker) readHandBack(m *kafka.Message, e *entry, s *Status) capping.RefundRequest {
	b := s.Back
	m.Value, m.Headers = b.Value, b.Headers
	e.back = &handBack{id: s.ID, user: s.UserID, decidedAt: b.DecidedAt}
	e.tier.handedBack = b.Origin
	if h := homeOf(b.Origin); h >= 0 {
		e.home = h
	}
	return capping.RefundRequest{UserID: s.UserID, IntentID: s.ID, Forget: true, Answered: true, Attempts: []time.Time{b.DecidedAt}}
}

// checkHandBack reports whether the intent handed back is the status's
// (its id and user); otherwise e is dead-lettered.
func checkHandBack(e *entry, in *Intent) bool {
	if b := e.back; b != nil && (in.ID != b.id || in.UserID != b.user) {
		e.setUnreadable(invalid("delivery.value", "its id and user_id are not the status's"))
		return false
	}
	return true
}

// handedBackLost is the attempt a handed-back intent's decision owns
// besides its own: the throttled delivery's, while its give-back was not
// applied (nil: none).
func handedBackLost(e *entry) []lostAttempt {
	switch {
	case !e.throttledAt.IsZero():
		return []lostAttempt{{at: e.throttledAt}}
	case e.back != nil && e.refund == refundFailed:
		return []lostAttempt{{at: e.back.decidedAt}}
	}
	return nil
}

// handBackHeaders adds the headers of a handed-back intent's lane record.
func (hb *headerBuilder) handBackHeaders(h []kafka.Header, e *entry) []kafka.Header {
	if e.tier.handedBack != nil {
		h = append(h, kafka.Header{Key: HeaderHandedBack, Value: e.tier.handedBack})
	}
	if lost := handedBackLost(e); lost != nil {
		h = append(h, kafka.Header{Key: HeaderThrottledAt, Value: hb.time(lost[0].at)})
	}
	return h
}
