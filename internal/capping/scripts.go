package capping

import (
	"crypto/sha1"
	_ "embed"
	"encoding/binary"
	"encoding/hex"

	"github.com/cespare/xxhash/v2"
)

var (
	//go:embed sliding_log.lua
	slidingLogSrc string
	//go:embed sliding_window.lua
	slidingWindowSrc string
)

// script is a Lua script and its SHA1, which is what EVALSHA names.
type script struct {
	src string
	sha string
}

func newScript(src string) script {
	sum := sha1.Sum([]byte(src))
	return script{src: src, sha: hex.EncodeToString(sum[:])}
}

// Outcome codes returned by both scripts.
const (
	codeAllowed   = 0
	codeDenied    = 1
	codeDuplicate = 2
)

// digest is the member that stands for an intent id: xxhash64, 8 raw bytes.
// Only a collision between two intents of the same user, both inside that
// user's retained log, matters (the second would be taken for a duplicate):
// with tens of entries per user that is about 1e-18 per intent.
func digest(intentID string) [8]byte {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], xxhash.Sum64String(intentID))
	return b
}
