package main

import (
	"bytes"
	"os"
	"testing"

	"github.com/capper-dev/capper/internal/cli"
)

// TestCLIReference: docs/reference/cli.md holds, as one of its parts, what
// `capper docs cli` writes from capper's command line and clidoc.md
// (Prometheus's TestDocumentation does the same for its flags page).
func TestCLIReference(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run([]string{"docs", "cli"}, &out, &errOut); code != cli.ExitOK {
		t.Fatalf("capper docs cli: exit %d\n%s", code, errOut.String())
	}
	const path = "../../docs/reference/cli.md"
	page, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := cli.CheckReference(string(page), out.String()); err != nil {
		t.Errorf("docs/reference/cli.md is not what capper's command line and cmd/capper/clidoc.md make of it: "+
			"run `make docs` (edit the help texts or clidoc.md, not the page)\n%v", err)
	}
}
