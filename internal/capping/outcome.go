package capping

// The outcome vocabulary shared by the engine, headers, metrics and logs.

import "strconv"

// Outcome is what happened to one intent. It is capper's one vocabulary of
// outcomes: the engine answers with Allowed, Capped, Duplicate, Exempt or Deferred, the
// worker adds the others (campaign control: Cancelled, and Deferred for a pause), and String is the word every surface uses (the
// capper_intents_total label, logs, `capper inspect`, the demo's report).
// The capper-decision header is derived from it in one place (dispatch).
type Outcome uint8

const (
	Allowed      Outcome = iota // under every cap; now counted
	Capped                      // a cap is full; not recorded
	Duplicate                   // allowed before (same intent id); not counted again
	Exempt                      // exempt category; Redis not consulted, not counted
	ShadowCapped                // shadow mode: would have been capped; forwarded, not recorded
	FailOpen                    // Redis could not decide; forwarded unchecked, not recorded
	Invalid                     // could not be decoded or validated; dead-lettered
	Deferred                    // held back (a cap with on_cap: defer, quiet hours, a paused campaign); decided again later
	Cancelled                   // campaign control: its campaign is stopped, or past its send-by; never delivered, not counted
)

var outcomeNames = [...]string{
	Allowed:      "allowed",
	Capped:       "capped",
	Duplicate:    "duplicate",
	Exempt:       "exempt",
	ShadowCapped: "shadow_capped",
	FailOpen:     "fail_open",
	Invalid:      "invalid",
	Deferred:     "deferred",
	Cancelled:    "cancelled",
}

func (o Outcome) String() string {
	if int(o) < len(outcomeNames) {
		return outcomeNames[o]
	}
	return "outcome(" + strconv.Itoa(int(o)) + ")"
}

// Outcomes lists every outcome in order (e.g. to initialise metric labels).
func Outcomes() []Outcome {
	out := make([]Outcome, len(outcomeNames))
	for i := range out {
		out[i] = Outcome(i)
	}
	return out
}
