package capping

import "testing"

func TestParsePriority(t *testing.T) {
	for s, want := range map[string]Priority{"low": Low, "normal": Normal, "high": High, "0": 0, "7": 7, "50": 50, "100": MaxPriority} {
		if p, err := ParsePriority(s); err != nil || p != want {
			t.Errorf("ParsePriority(%q) = %d, %v; want %d", s, p, err, want)
		}
	}
	for _, s := range []string{"", "HIGH", "urgent", "101", "-1", "050", "+5", "5.0", " 5"} {
		if p, err := ParsePriority(s); err == nil {
			t.Errorf("ParsePriority(%q) = %d; want an error", s, p)
		}
	}
}
