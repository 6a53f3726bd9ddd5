// Package yamldoc owns how capper reads its YAML documents (the worker
// config, cap policies): strict decoding, where an unknown key or a value
// of the wrong kind is a problem at its field's path and line and a file
// holds exactly one document; the lines of problems found after decoding
// (Locate); and the value types the documents share (Duration).
package yamldoc

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/prometheus/common/model"
	"go.yaml.in/yaml/v3"
)

// Decode decodes one YAML document strictly into v, over what v already
// holds (its defaults): keys the document leaves out keep their values. An
// unknown key, or a value of the wrong kind, is a problems.Problem at its
// field's path and line (an unknown key with the key it is likely a typo
// of); problems.From finds every one in the error. An empty document
// changes nothing; a second document is an error.
func Decode(data []byte, v any) error {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(v); err != nil && !errors.Is(err, io.EOF) {
		return Explain(data, v, err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return errors.New("more than one YAML document; capper reads exactly one")
	}
	return nil
}

// Duration is a time.Duration written as "50ms", "30s", "24h" or "7d" in
// YAML (Prometheus' syntax: units y w d h m s ms, largest first).
type Duration time.Duration

// D returns the value as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// UnmarshalYAML parses a duration and names the line of a bad one.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	v, err := model.ParseDuration(n.Value)
	if n.Kind != yaml.ScalarNode || err != nil {
		return fmt.Errorf("line %d: %s is not a duration (write e.g. 50ms, 30s, 24h, 7d)", n.Line, written(n.ShortTag(), n.Value))
	}
	*d = Duration(v)
	return nil
}

// MarshalYAML writes the duration in the same form it is read.
func (d Duration) MarshalYAML() (any, error) { return model.Duration(d).String(), nil }

// String writes the duration as in a document.
func (d Duration) String() string { return model.Duration(d).String() }
