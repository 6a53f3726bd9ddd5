// Package yamldoc owns how capper reads its YAML documents (the worker
// config, cap policies): strict decoding, where an unknown key is an error
// naming its line and a file holds exactly one document, and the value types
// the documents share (Duration).
package yamldoc

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"
	"time"

	"github.com/prometheus/common/model"
	"go.yaml.in/yaml/v3"
)

// Decode decodes one YAML document strictly into v, over what v already
// holds (its defaults): keys the document leaves out keep their values, an
// unknown key is an error naming its line. An empty document changes
// nothing; a second document is an error.
func Decode(data []byte, v any) error {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(v); err != nil && !errors.Is(err, io.EOF) {
		return CleanError(err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return errors.New("more than one YAML document; capper reads exactly one")
	}
	return nil
}

var unknownField = regexp.MustCompile(`^(line \d+): field (\S+) not found in type \S+$`)

// CleanError turns yaml's "line 5: field adress not found in type
// config.Redis" into wording about keys, which is what a user edits (Go
// type names mean nothing to them).
func CleanError(err error) error {
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		return err
	}
	msgs := make([]string, 0, len(te.Errors))
	for _, m := range te.Errors {
		if g := unknownField.FindStringSubmatch(m); g != nil {
			m = fmt.Sprintf("%s: unknown key %q", g[1], g[2])
		}
		msgs = append(msgs, m)
	}
	return errors.New(strings.Join(msgs, "; "))
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
		return fmt.Errorf("line %d: %q is not a duration (write e.g. 50ms, 30s, 24h, 7d)", n.Line, n.Value)
	}
	*d = Duration(v)
	return nil
}

// MarshalYAML writes the duration in the same form it is read.
func (d Duration) MarshalYAML() (any, error) { return model.Duration(d).String(), nil }

// String writes the duration as in a document.
func (d Duration) String() string { return model.Duration(d).String() }
