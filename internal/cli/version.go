package cli

// What a binary says about itself: `capper version`, `segment-builder
// version`, `capper-demo --version`.

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/alecthomas/kong"
)

// VersionVar is the kong variable VersionCmd and kong.VersionFlag print.
const VersionVar = "version"

// Build is what a binary knows about its build.
type Build struct {
	Version   string // stamped (-ldflags "-X main.version=..."), else the module version, else "dev"
	Revision  string // stamped (-X main.revision=...), else the VCS stamp, else "unknown"
	Modified  bool   // the VCS stamp says the tree had local changes
	GoVersion string
	Platform  string // GOOS/GOARCH
}

// BuildOf fills in a Build from what main was stamped with and the binary's
// build information.
func BuildOf(version, revision string) Build {
	bi, _ := debug.ReadBuildInfo()
	return buildOf(version, revision, bi, runtime.Version(), runtime.GOOS+"/"+runtime.GOARCH)
}

func buildOf(version, revision string, bi *debug.BuildInfo, goVersion, platform string) Build {
	b := Build{Version: version, Revision: revision, GoVersion: goVersion, Platform: platform}
	if bi != nil {
		if (b.Version == "" || b.Version == "dev") && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			b.Version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				if b.Revision == "" {
					b.Revision = s.Value
				}
			case "vcs.modified":
				b.Modified = s.Value == "true"
			}
		}
	}
	if b.Version == "" {
		b.Version = "dev"
	}
	if b.Revision == "" {
		b.Revision = "unknown"
	}
	return b
}

// Line describes the build in one line:
//
//	capper v1.2.3 (go1.26.8, linux/amd64, revision 20b5d7c…, modified)
func (b Build) Line(name string) string {
	line := fmt.Sprintf("%s %s (%s, %s, revision %s", name, b.Version, b.GoVersion, b.Platform, b.Revision)
	if b.Modified {
		line += ", modified"
	}
	return line + ")"
}

// VersionVars is the kong option that VersionCmd (and a kong.VersionFlag)
// print: the build's Line.
func VersionVars(name string, b Build) kong.Vars {
	return kong.Vars{VersionVar: b.Line(name)}
}

// VersionCmd is a `version` command: it prints the VersionVars line on
// stdout. Parse the command line with VersionVars.
type VersionCmd struct{}

// Run prints the version line.
func (VersionCmd) Run(kctx *kong.Context, vars kong.Vars) error {
	if _, err := fmt.Fprintln(kctx.Stdout, vars[VersionVar]); err != nil {
		return fmt.Errorf("print version: %w", err)
	}
	return nil
}
