package audit

// Throttled sends handed back: a delivery-status record that hands its
// delivery back (a "delivery" field) is an input of its own (the intent
// held again names it as its capper-source), and the delivery it hands
// back is no send (its provider refused it; capper gave it back).

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/capper-dev/capper/internal/kafka"
)

// handedBack reads statuses once: those that hand a delivery back, and
// the deliveries they hand back (by capper-source and capper-decided-at).
func handedBack(statuses []kafka.Message) (inputs []kafka.Message, keys map[[2]string]bool) {
	keys = map[[2]string]bool{}
	for _, m := range statuses {
		var s struct {
			Delivery *struct {
				Headers map[string]string `json:"headers"`
			} `json:"delivery"`
		}
		if json.Unmarshal(m.Value, &s) == nil && s.Delivery != nil {
			inputs = append(inputs, m)
			h := s.Delivery.Headers
			keys[[2]string{h["capper-source"], h["capper-decided-at"]}] = true
		}
	}
	return inputs, keys
}

// deliveryKey is what names a delivery a status hands back.
func deliveryKey(m kafka.Message) [2]string {
	return [2]string{headerValue(m, "capper-source"), headerValue(m, "capper-decided-at")}
}

// HandBacks are the status records that hand a delivery back.
func HandBacks(statuses []kafka.Message) []kafka.Message {
	inputs, _ := handedBack(statuses)
	return inputs
}

// AddInputs adds inputs of topic (status records that hand a delivery
// back) to those whose outputs c indexes.
func (c *Copies) AddInputs(topic string, inputs []kafka.Message) {
	for _, m := range inputs {
		c.inputs = append(c.inputs, Source(topic, m.Partition, m.Offset))
	}
}

// Delivered are deliveries without those statuses handed back: what the
// users received (their provider refused the others; capper gave them
// back).
func Delivered(deliveries, statuses []kafka.Message) []kafka.Message {
	_, keys := handedBack(statuses)
	if len(keys) == 0 {
		return deliveries
	}
	var out []kafka.Message
	for _, m := range deliveries {
		if !keys[deliveryKey(m)] {
			out = append(out, m)
		}
	}
	return out
}

// SplitSends splits sends (Sends(deliveries): Seq indexes deliveries)
// into those the users received and those statuses handed back. Each
// handed back has its ID marked (a later delivery of the intent keeps the
// ID) and is added to refunded (refunded[user] holds the ids): it counted
// from its decision until capper gave it back, so it may explain a refusal
// then (CheckRefusals), and no cap counts it (WithoutRefunded).
func SplitSends(sends []Send, deliveries, statuses []kafka.Message, refunded map[uint64]map[string]bool) (kept, back []Send) {
	_, keys := handedBack(statuses)
	if len(keys) == 0 {
		return sends, nil
	}
	for _, s := range sends {
		if !keys[deliveryKey(deliveries[s.Seq])] {
			kept = append(kept, s)
			continue
		}
		s.ID += "#handed-back"
		if refunded[s.User] == nil {
			refunded[s.User] = map[string]bool{}
		}
		refunded[s.User][s.ID] = true
		back = append(back, s)
	}
	return kept, back
}

// HandBackStatus is the value of a throttled status that hands delivery d
// back (as a sender writes it, docs/reference/event-contract.md): its id
// and user_id, the time, and the delivery's value and headers.
func HandBackStatus(d kafka.Message, at time.Time) ([]byte, error) {
	var in struct {
		ID     string          `json:"id"`
		UserID json.RawMessage `json:"user_id"`
	}
	if err := json.Unmarshal(d.Value, &in); err != nil {
		return nil, fmt.Errorf("hand back delivery %s: %w", headerValue(d, "capper-source"), err)
	}
	headers := map[string]string{}
	for _, h := range d.Headers {
		headers[h.Key] = string(h.Value)
	}
	return json.Marshal(map[string]any{"id": in.ID, "user_id": in.UserID, "status": "throttled",
		"at": at.UTC().Format(time.RFC3339Nano), "delivery": map[string]any{"value": json.RawMessage(d.Value), "headers": headers}})
}
