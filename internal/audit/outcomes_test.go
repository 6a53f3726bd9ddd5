package audit

import (
	"slices"
	"testing"

	"github.com/capper-dev/capper/internal/kafka"
)

// TestCopies: each input's outputs by capper-source: one lost, one with
// two, an output of an unknown input, and one of another topic (a
// delivery status dead-lettered) that a prefix leaves out.
func TestCopies(t *testing.T) {
	in := []kafka.Message{{Partition: 0, Offset: 0}, {Partition: 0, Offset: 1}, {Partition: 1, Offset: 0}}
	out := func(topic, src string) kafka.Message {
		return kafka.Message{Topic: topic, Headers: []kafka.Header{{Key: "capper-source", Value: []byte(src)}}}
	}
	c := NewCopies("in", in,
		[]kafka.Message{out("deliveries", "in/0/0"), out("deliveries", "in/1/0"), out("deliveries", "in/9/9")},
		[]kafka.Message{out("suppressed", "in/1/0"), out("dlq", "status/0/3")})
	if got := c.Inputs(); !slices.Equal(got, []string{"in/0/0", "in/0/1", "in/1/0"}) {
		t.Errorf("Inputs %v", got)
	}
	if got := c.Missing(); !slices.Equal(got, []string{"in/0/1"}) {
		t.Errorf("Missing %v, want in/0/1", got)
	}
	if got := c.Several(); !slices.Equal(got, []string{"in/1/0 (deliveries, suppressed)"}) {
		t.Errorf("Several %v", got)
	}
	if got := c.Unknown(""); !slices.Equal(got, []string{"in/9/9", "status/0/3"}) {
		t.Errorf("Unknown %v", got)
	}
	if got := c.Unknown("in/"); !slices.Equal(got, []string{"in/9/9"}) {
		t.Errorf("Unknown(in/) %v", got)
	}
	if n := len(c.Of("in/0/0")); n != 1 {
		t.Errorf("Of(in/0/0): %d outputs", n)
	}
}
