package main

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"

	"github.com/capper-dev/capper/internal/cli"
)

// TestCLIReference: docs/reference/cli.md holds, as one of its parts, what
// `segment-builder docs cli` writes from segment-builder's command line
// and clidoc.md (Prometheus's TestDocumentation does the same for its
// flags page).
func TestCLIReference(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"docs", "cli"}, strings.NewReader(""), &out, &errOut); code != cli.ExitOK {
		t.Fatalf("segment-builder docs cli: exit %d\n%s", code, errOut.String())
	}
	const path = "../../docs/reference/cli.md"
	page, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := cli.CheckReference(string(page), out.String()); err != nil {
		t.Errorf("docs/reference/cli.md is not what segment-builder's command line and cmd/segment-builder/clidoc.md make of it: "+
			"run `make docs` (edit the help texts or clidoc.md, not the page)\n%v", err)
	}
}
