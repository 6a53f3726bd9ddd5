// Command segment-builder builds and publishes segment snapshots (see README.md).
package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "segment-builder: not built yet")
	os.Exit(1)
}
