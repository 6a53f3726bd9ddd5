package segments

import (
	"fmt"
	"regexp"
)

// None is Lookup's answer for a user in no segment. It is not a valid segment
// name, so it can never clash with one.
const None = "none"

// Keys of the snapshot layout, relative to the store's root.
const (
	latestKey      = "LATEST"
	snapshotsDir   = "snapshots/"
	manifestObject = "manifest.json"
	objectSuffix   = ".roaring"
)

var (
	segmentNameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)
	// versionRE matches what Publish writes (see versionString). Load checks it
	// before using a version from LATEST as part of a key.
	versionRE = regexp.MustCompile(`^[0-9]{8}T[0-9]{6}Z-[0-9a-f]{8}$`)
)

// ValidateSegmentName reports whether name can be used as a segment name:
// lower-case letters, digits, '_' and '-', starting with a letter or digit, at
// most 63 bytes, and not "none".
func ValidateSegmentName(name string) error {
	if name == None {
		return fmt.Errorf("segment name %q is reserved (it is Lookup's answer for users in no segment)", name)
	}
	if !segmentNameRE.MatchString(name) {
		return fmt.Errorf("segment name %q is invalid (want %s)", truncate(name, 80), segmentNameRE)
	}
	return nil
}

func validateVersion(v string) error {
	if !versionRE.MatchString(v) {
		return fmt.Errorf("version %q is not of the form YYYYMMDDTHHMMSSZ-xxxxxxxx", truncate(v, 80))
	}
	return nil
}

func versionKey(version, object string) string {
	return snapshotsDir + version + "/" + object
}

// truncate shortens s to about n bytes for error messages.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
