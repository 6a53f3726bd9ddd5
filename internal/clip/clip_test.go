package clip

import (
	"testing"
	"unicode/utf8"
)

func TestString(t *testing.T) {
	for _, tc := range []struct {
		in   string
		n    int
		want string
	}{
		{"short", 10, "short"},
		{"exactly10!", 10, "exactly10!"},
		{"0123456789abc", 10, "0123456789..."},
		{"ab€", 3, "ab..."}, // € is 3 bytes: not cut inside it
		{"€€", 4, "€..."},
	} {
		got := String(tc.in, tc.n)
		if got != tc.want || !utf8.ValidString(got) {
			t.Errorf("String(%q, %d) = %q, want %q", tc.in, tc.n, got, tc.want)
		}
	}
}
