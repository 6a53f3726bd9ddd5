// Package configs holds capper's documented examples, the worker's
// configuration (configs/capper.yaml) and the cap policy
// (configs/policy.yaml), embedded so that the demo runs the very policy a
// reader of those files sees.
package configs

import (
	"bytes"
	_ "embed"
)

var (
	//go:embed capper.yaml
	example []byte
	//go:embed policy.yaml
	examplePolicy []byte
)

// Example returns the content of configs/capper.yaml.
func Example() []byte { return bytes.Clone(example) }

// ExamplePolicy returns the content of configs/policy.yaml.
func ExamplePolicy() []byte { return bytes.Clone(examplePolicy) }
