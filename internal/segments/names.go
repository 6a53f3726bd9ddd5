package segments

// Names of the snapshot layout: keys, versions, segment names.

import (
	"fmt"
	"regexp"

	"github.com/capper-dev/capper/internal/clip"
)

// None is Lookup's answer for a user in no segment. It is not a valid segment
// name, so it can never clash with one.
const None = "none"

// Keys of the snapshot layout, relative to the store's root.
const (
	LatestKey      = "LATEST"        // the current version, written last
	SnapshotsDir   = "snapshots/"    // one directory per version
	ManifestObject = "manifest.json" // in a version's directory
	ObjectSuffix   = ".roaring"      // a segment's object: <name>.roaring
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
		return fmt.Errorf("segment name %q is invalid (want %s)", clip.String(name, 80), segmentNameRE)
	}
	return nil
}

// ValidateVersion checks the form of a snapshot version.
func ValidateVersion(v string) error {
	if !versionRE.MatchString(v) {
		return fmt.Errorf("version %q is not of the form YYYYMMDDTHHMMSSZ-xxxxxxxx", clip.String(v, 80))
	}
	return nil
}

// VersionKey is the key of an object of a version.
func VersionKey(version, object string) string {
	return SnapshotsDir + version + "/" + object
}
