package audit

// Every input has exactly one outcome: the output records that name each
// input record (their capper-source), for the demo, the soak, the tests
// and the benchmarks to judge.

import (
	"fmt"
	"slices"
	"strings"

	"github.com/capper-dev/capper/internal/kafka"
)

// Source is how capper-source names the record at partition and offset of
// topic.
func Source(topic string, partition int, offset int64) string {
	return fmt.Sprintf("%s/%d/%d", topic, partition, offset)
}

// Copies are the outputs of each input: the output records whose
// capper-source names it, each an outcome.
type Copies struct {
	inputs []string
	of     map[string][]kafka.Message
}

// NewCopies indexes outputs (every output topic's records) by the input
// of inputTopic they name.
func NewCopies(inputTopic string, inputs []kafka.Message, outputs ...[]kafka.Message) *Copies {
	c := &Copies{inputs: make([]string, 0, len(inputs)), of: map[string][]kafka.Message{}}
	for _, m := range inputs {
		c.inputs = append(c.inputs, Source(inputTopic, m.Partition, m.Offset))
	}
	for _, out := range outputs {
		for _, m := range out {
			src := headerValue(m, "capper-source")
			c.of[src] = append(c.of[src], m)
		}
	}
	return c
}

// Inputs are the inputs' sources, in the order given.
func (c *Copies) Inputs() []string { return c.inputs }

// Of are the outputs that name input src.
func (c *Copies) Of(src string) []kafka.Message { return c.of[src] }

// Missing are the inputs no output names: lost, or not decided yet.
func (c *Copies) Missing() []string {
	var out []string
	for _, src := range c.inputs {
		if len(c.of[src]) == 0 {
			out = append(out, src)
		}
	}
	return out
}

// Several are the inputs more than one output names, each with the topics
// of its copies: "send-intents/0/7 (deliveries, suppressed)".
func (c *Copies) Several() []string {
	var out []string
	for _, src := range c.inputs {
		if cs := c.of[src]; len(cs) > 1 {
			topics := make([]string, len(cs))
			for i, m := range cs {
				topics[i] = m.Topic
			}
			out = append(out, fmt.Sprintf("%s (%s)", src, strings.Join(topics, ", ")))
		}
	}
	return out
}

// Unknown are the sources outputs name that are no input, of those
// starting with prefix ("": all), sorted.
func (c *Copies) Unknown(prefix string) []string {
	in := make(map[string]bool, len(c.inputs))
	for _, src := range c.inputs {
		in[src] = true
	}
	var out []string
	for src := range c.of {
		if !in[src] && strings.HasPrefix(src, prefix) {
			out = append(out, src)
		}
	}
	slices.Sort(out)
	return out
}

func headerValue(m kafka.Message, key string) string {
	for _, h := range m.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}
