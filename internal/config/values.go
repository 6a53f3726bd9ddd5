package config

// The YAML value types of the config file: durations (shared with the cap
// policy, package yamldoc) and secrets.

import (
	"fmt"

	"go.yaml.in/yaml/v3"

	"github.com/capper-dev/capper/internal/yamldoc"
)

// Duration is a time.Duration written as "50ms", "30s", "24h" or "7d" in YAML.
type Duration = yamldoc.Duration

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
