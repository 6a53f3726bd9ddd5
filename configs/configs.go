// Package configs holds capper's documented example configuration,
// configs/capper.yaml, embedded so that the demo runs the very policy a
// reader of that file sees.
package configs

import (
	"bytes"
	_ "embed"
)

//go:embed capper.yaml
var example []byte

// Example returns the content of configs/capper.yaml.
func Example() []byte { return bytes.Clone(example) }
