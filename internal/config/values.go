package config

// The YAML value types of the config file: durations and secrets.

import (
	"fmt"
	"time"

	"github.com/prometheus/common/model"
	"go.yaml.in/yaml/v3"
)

// Duration is a time.Duration written as "50ms", "30s", "24h" or "7d" in YAML.
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

// Secret is a credential. It is never read from the config file (files end up
// in ConfigMaps and version control); it comes from a CAPPER_* variable or the
// matching *_file key, and it is masked when the config is printed.
type Secret string

// UnmarshalYAML refuses an inline secret (an empty value is no secret).
func (s *Secret) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode && n.Value == "" {
		return nil
	}
	return fmt.Errorf("line %d: secrets are not read from the config file; set the environment variable or the *_file key instead", n.Line)
}

// MarshalYAML masks the value.
func (s Secret) MarshalYAML() (any, error) {
	if s == "" {
		return "", nil
	}
	return "<masked>", nil
}

// String writes the duration as in the config file.
func (d Duration) String() string { return model.Duration(d).String() }
