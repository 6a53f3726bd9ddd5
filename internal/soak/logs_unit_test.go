package soak

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRedisLines: a worker log's lines about Redis, and only those, with
// the log's name; a long story keeps its start and its end.
func TestRedisLines(t *testing.T) {
	dir := t.TempDir()
	log := `{"level":"WARN","msg":"Redis cannot decide (check redis.addrs and the servers)"}
{"level":"INFO","msg":"batch written"}
{"level":"WARN","msg":"write a user's limits to Redis; retrying"}
{"level":"WARN","msg":"redis could not decide; waiting and retrying","error":"not replicated"}
{"level":"WARN","msg":"redis clock check failed","err":"x"}
{"level":"INFO","msg":"Redis answers again","after":"1.2s"}
`
	if err := os.WriteFile(filepath.Join(dir, "w1-1.log"), []byte(log), 0o644); err != nil {
		t.Fatal(err)
	}
	var long strings.Builder
	for i := range 70 {
		fmt.Fprintf(&long, "Redis line %d\n", i)
	}
	if err := os.WriteFile(filepath.Join(dir, "w2-1.log"), []byte(long.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	got := redisLines(dir)
	for _, want := range []string{"w1-1.log says of Redis:\n  {\"level\":\"WARN\",\"msg\":\"Redis cannot decide", "redis clock check failed", "Redis answers again",
		"w2-1.log says of Redis:\n  Redis line 0", "redis could not decide", "Redis line 29\n  ... 10 more ...\n  Redis line 40", "Redis line 69"} {
		if !strings.Contains(got, want) {
			t.Errorf("lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "batch written") || strings.Contains(got, "user's limits") || strings.Contains(got, "Redis line 30\n") {
		t.Errorf("holds a line it should not:\n%s", got)
	}
}
