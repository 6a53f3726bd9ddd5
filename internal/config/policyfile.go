package config

// Reading the cap policy a worker uses, for the commands that need it
// without running a worker (capper policy check/diff, segment-builder).

import (
	"fmt"
	"os"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/capper-dev/capper/internal/objstore"
	"github.com/capper-dev/capper/internal/policy"
	"github.com/capper-dev/capper/internal/problems"
)

// PolicyFile is the path of the policy file policy.source names; "" when
// the policy is inline (no source).
func (c *Config) PolicyFile() (string, error) {
	src := c.Policy.Source
	switch {
	case src == "":
		return "", nil
	case !c.Policy.IsFile():
		return "", fmt.Errorf("policy.source %s is a policy store: name the policy file itself (capper policy history --from %s shows its versions)", src, src)
	}
	path := src
	if strings.HasPrefix(src, "file://") {
		p, err := objstore.FilePath(src)
		if err != nil {
			return "", fmt.Errorf("policy.source %s: %w", src, err)
		}
		path = p
	}
	return path, nil
}

// ReadPolicy reads path as a policy document or, when it has a kafka or
// capping section, as a worker config: then the policy is the file its
// policy.source names, or the one inline. Problems of a policy document
// are returned, not an error: the caller shows them all.
func ReadPolicy(path string) (*policy.Document, problems.List, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("read policy: %w", err)
	}
	var top map[string]any
	if err := yaml.Unmarshal(data, &top); err != nil {
		return nil, nil, fmt.Errorf("read policy %s: %w", path, err)
	}
	_, kafka := top["kafka"]
	_, capping := top["capping"]
	if !kafka && !capping {
		return policyDocument(path, data)
	}
	cfg, err := LoadWithEnv(path, os.Environ())
	if err != nil {
		return nil, nil, fmt.Errorf("worker config %s: %w", path, err)
	}
	file, err := cfg.PolicyFile()
	if err != nil {
		return nil, nil, fmt.Errorf("worker config %s: %w", path, err)
	}
	if file == "" {
		d := cfg.Capping.Document
		return &d, nil, nil
	}
	if data, err = os.ReadFile(file); err != nil {
		return nil, nil, fmt.Errorf("worker config %s: read its policy: %w", path, err)
	}
	return policyDocument(file, data) // a policy document, never a config again
}

func policyDocument(path string, data []byte) (*policy.Document, problems.List, error) {
	d, err := policy.Parse(data)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	return d, d.Problems(), nil
}
