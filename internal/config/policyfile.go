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
	r, err := ReadPolicyAt(path)
	return r.Document, r.Problems, err
}

// PolicyRead is a policy as ReadPolicyAt read it.
type PolicyRead struct {
	// Document is nil when a key or a value does not decode (a problem).
	Document *policy.Document
	// Problems are the policy's, each at its field's path and line in
	// File.
	Problems problems.List
	// File is the document the policy is in: path, or the policy file the
	// worker config there names ("": the policy inline in it).
	File string
	// Config is the worker config path is (nil: a policy document).
	Config *Config
}

// ReadPolicyAt is ReadPolicy, saying which file the policy is in and, when
// path is a worker config, the config.
func ReadPolicyAt(path string) (PolicyRead, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return PolicyRead{}, fmt.Errorf("read policy: %w", err)
	}
	var top map[string]any
	if err := yaml.Unmarshal(data, &top); err != nil {
		return PolicyRead{}, fmt.Errorf("read policy %s: %w", path, err)
	}
	_, kafka := top["kafka"]
	_, capping := top["capping"]
	if !kafka && !capping {
		return policyDocument(path, data)
	}
	cfg, err := LoadWithEnv(path, os.Environ())
	if err != nil {
		return PolicyRead{}, fmt.Errorf("worker config %s: %w", path, err)
	}
	if _, err := cfg.PolicyFile(); err != nil {
		return PolicyRead{}, fmt.Errorf("worker config %s: %w", path, err)
	}
	r, _, err := cfg.LocalPolicy() // a policy document, never a config again
	if err != nil {
		return PolicyRead{}, fmt.Errorf("worker config %s: %w", path, err)
	}
	return r, nil
}

// LocalPolicy is the policy c's workers read when it is on this machine:
// the file policy.source names, or the one inline; ok is false for a
// policy store (read over the network: capper policy history).
func (c *Config) LocalPolicy() (r PolicyRead, ok bool, err error) {
	file, err := c.PolicyFile()
	switch {
	case c.Policy.Source != "" && !c.Policy.IsFile():
		return PolicyRead{}, false, nil
	case err != nil:
		return PolicyRead{}, true, err
	case file == "":
		d := c.Capping.Document
		return PolicyRead{Document: &d, Config: c}, true, nil
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return PolicyRead{}, true, fmt.Errorf("read policy: %w", err)
	}
	r, err = policyDocument(file, data)
	r.Config = c
	return r, true, err
}

func policyDocument(path string, data []byte) (PolicyRead, error) {
	d, ps, err := policy.Read(data)
	if err != nil {
		return PolicyRead{}, fmt.Errorf("%s: %w", path, err)
	}
	return PolicyRead{Document: d, Problems: ps, File: path}, nil
}

// PolicyNeeds is every key of c that the policy d needs and c leaves
// unset, each a problem at the key: kafka.topics.lanes for budgets (send
// pacing), kafka.delay_tiers for a policy that defers. A worker refuses
// such a policy (at start, it exits 2).
func (c *Config) PolicyNeeds(d *policy.Document) problems.List {
	var ps problems.List
	if len(d.Budgets) > 0 && c.Kafka.Topics.Lanes == "" {
		ps.Add(problems.Key("kafka.topics.lanes"), "is not set, but the policy has budgets (send pacing): set it "+
			"(the prefix of the lane topics, e.g. capper-lanes; capper topics create makes them), or remove the budgets")
	}
	if r, _ := d.Rules(); r.Defers() && len(c.Kafka.DelayTiers) == 0 {
		ps.Add(problems.Key("kafka.delay_tiers"), "is empty, but the policy defers intents (on_cap: defer or quiet_hours): "+
			"add a delay tier, or stop deferring")
	}
	return ps
}
