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

// Version describes a binary in one line:
//
//	capper v1.2.3 (go1.26.8, linux/amd64, revision 20b5d7c…, modified)
//
// version is what the build stamped (-ldflags "-X main.version=..."); when
// it is empty or "dev", the module version of a `go install ...@vX` build is
// used instead. The revision comes from the build's VCS stamp (vcs.revision,
// and ", modified" for vcs.modified=true) and is "unknown" without one.
func Version(name, version string) string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		bi = nil
	}
	return versionLine(name, version, bi, runtime.Version(), runtime.GOOS+"/"+runtime.GOARCH)
}

func versionLine(name, version string, bi *debug.BuildInfo, goVersion, platform string) string {
	revision, modified := "unknown", false
	if bi != nil {
		if (version == "" || version == "dev") && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				if s.Value != "" {
					revision = s.Value
				}
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
	}
	if version == "" {
		version = "dev"
	}
	line := fmt.Sprintf("%s %s (%s, %s, revision %s", name, version, goVersion, platform, revision)
	if modified {
		line += ", modified"
	}
	return line + ")"
}

// VersionVars is the kong option that VersionCmd (and a kong.VersionFlag)
// print: Version(name, version).
func VersionVars(name, version string) kong.Vars {
	return kong.Vars{VersionVar: Version(name, version)}
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
