package capping

// What every script shares: its SHA, its reply format, the intent digest.

import (
	"crypto/sha1"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"time"

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

// Outcome codes of the scripts' replies.
const (
	codeAllowed   = 0
	codeCapped    = 1
	codeDuplicate = 2
)

// parseReply reads the reply every script gives: {outcome (0 allowed,
// 1 capped, 2 duplicate), capping limit (1-based), retry-after ms (-1 never;
// for a duplicate the ms it was allowed at), count per limit...}. at is the
// decision time the call was made with.
func parseReply(res []int64, limits []Limit, at time.Time) (Decision, error) {
	if len(res) != 3+len(limits) {
		return Decision{}, fmt.Errorf("script answered %d values, want %d", len(res), 3+len(limits))
	}
	d := Decision{At: at, Counts: res[3:]}
	switch res[0] {
	case codeAllowed:
		d.Outcome = Allowed
	case codeCapped:
		if res[1] < 1 || res[1] > int64(len(limits)) {
			return Decision{}, fmt.Errorf("script named limit %d of %d", res[1], len(limits))
		}
		d.Outcome = Capped
		d.Limit = limits[res[1]-1].Name
		if res[2] < 0 {
			d.RetryAfter.Never = true
		} else {
			d.RetryAfter.In = time.Duration(res[2]) * time.Millisecond
		}
	case codeDuplicate:
		d.Outcome = Duplicate
		d.At = time.UnixMilli(res[2])
	default:
		return Decision{}, fmt.Errorf("script answered outcome %d", res[0])
	}
	return d, nil
}

// digest is what stands for an intent id in Redis: xxhash64, 8 raw bytes.
// Only a collision between two intents of the same user, both inside that
// user's retained log, matters (the second would be taken for a duplicate):
// with tens of entries per user that is about 1e-18 per intent.
func digest(intentID string) [8]byte {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], xxhash.Sum64String(intentID))
	return b
}

func appendHex(b []byte, d [8]byte) []byte {
	const digits = "0123456789abcdef"
	for _, x := range d {
		b = append(b, digits[x>>4], digits[x&15])
	}
	return b
}
