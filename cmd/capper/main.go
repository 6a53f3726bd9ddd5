// Command capper is the frequency-capping worker (see README.md).
package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "capper: not built yet")
	os.Exit(1)
}
