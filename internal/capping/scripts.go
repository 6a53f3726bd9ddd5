package capping

// What every script shares: its SHA, its reply format, the intent digest.

import (
	"crypto/sha1"
	"encoding/binary"
	"encoding/hex"

	"github.com/cespare/xxhash/v2"
)

// script is a Lua script and its SHA1, which is what EVALSHA names.
type script struct {
	src string
	sha string
}

func newScript(src string) *script {
	sum := sha1.Sum([]byte(src))
	return &script{src: src, sha: hex.EncodeToString(sum[:])}
}

// Outcome codes of the script's reply (its top bits).
const (
	codeAllowed   = 0
	codeCapped    = 1
	codeDuplicate = 2
)

// digest is what stands for an intent id in Redis: the first 5 bytes of its
// xxhash64 (see record.go). Only a collision between two intents of the same
// user, both inside the idempotency window, matters (the second would be
// taken for a duplicate): with a few entries per user in a day, about 5e-12
// per intent, or one intent in 500 days at a billion intents a day.
func digest(intentID string) [8]byte {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], xxhash.Sum64String(intentID))
	return b
}

// packTime is a unix time as the script reads it: 4 bytes, big endian
// (the record's own format; the script needs no number formatting).
func packTime(unix int64) string {
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], uint32(unix))
	return string(b[:])
}

func appendHex(b []byte, d [8]byte) []byte {
	const digits = "0123456789abcdef"
	for _, x := range d {
		b = append(b, digits[x>>4], digits[x&15])
	}
	return b
}
