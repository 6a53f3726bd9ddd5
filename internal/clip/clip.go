// Package clip shortens text that error messages quote from their input (a
// producer's bytes, a line of a file): to about n bytes, cut on a rune
// boundary so that a message stays valid UTF-8 wherever it ends up (a Kafka
// header, a JSON log line).
package clip

import "unicode/utf8"

// String returns s, or its first n bytes or fewer (whole runes) and "...".
func String(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "..."
}
