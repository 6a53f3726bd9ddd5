package capping

// What every script shares: its SHA, its reply, the intent digest.

import (
	"crypto/sha1"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/cespare/xxhash/v2"
	"github.com/redis/go-redis/v9"
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

// reply is what the script (or its Go port) answers for one call, what its
// decision is made from (policySet.decision).
type reply struct {
	code  int64 // codeAllowed, codeCapped or codeDuplicate
	limit int64 // capped: the limit, 1-based in its policy
	// t: capped by a rolling limit, the send that frees a slot when it
	// leaves the window (0 for a calendar or max 0 limit); a duplicate,
	// when it was allowed.
	t int64
	// idem, for a refusal asked with wantIdem: the user's idempotency
	// entries (the refusal cache learns which ids are duplicates).
	idem     string
	withIdem bool
}

// Outcome codes of a reply.
const (
	codeAllowed   = 0
	codeCapped    = 1
	codeDuplicate = 2
	// codeHeld: capped because campaign plans book slots of the limit (it
	// had room without them); t as for codeCapped, 0 when the bookings
	// alone fill it.
	codeHeld = 3
	// codeVoided: an attempt given back before Redis ran it (a voided
	// entry of the id at its decision time: refund.lua.tmpl) recorded
	// nothing (decide.go: an error, retried).
	codeVoided = 4
	// codeUserHeld: the user's own limit of kind limit (userKinds) holds
	// it until t (a snooze, their quiet hours). Nothing recorded.
	codeUserHeld = 5
)

// userLimitBase: a reply's limit from it up is users' limit limit -
// userLimitBase (policySet.ulimits).
const userLimitBase = 128

// ErrVoided is the error of an attempt that Redis ran after the intent was
// given back at the attempt's decision time (RefundRequest.Forget): it
// recorded nothing. Only an attempt whose answer was already lost meets
// it, or one made in the same second as such an attempt: a retry goes on.
var ErrVoided = errors.New("the attempt was given back before Redis ran it, and recorded nothing")

// On the wire a reply is one integer (a table costs Redis more), code <<
// replyCodeShift | limit << replyLimitShift | t, and for a refusal with the
// idempotency entries a table {that integer, the entries}.
const (
	replyCodeShift  = 40
	replyLimitShift = 32
)

// replyData is the reply's packing as the script template writes it.
type replyData struct{ Code, Duplicate, Capped, Held, Voided, Limit string }

var replyText = replyData{
	Code:      fmt.Sprintf("2^%d", replyCodeShift),
	Duplicate: fmt.Sprintf("%d * 2^%d", codeDuplicate, replyCodeShift),
	Capped:    fmt.Sprintf("%d * 2^%d", codeCapped, replyCodeShift),
	Held:      fmt.Sprintf("%d * 2^%d", codeHeld, replyCodeShift),
	Voided:    fmt.Sprintf("%d * 2^%d", codeVoided, replyCodeShift),
	Limit:     fmt.Sprintf("2^%d", replyLimitShift),
}

// unpackReply reads the packed integer.
func unpackReply(v int64) reply {
	return reply{code: v >> replyCodeShift, limit: v >> replyLimitShift & 0xff, t: v & 0xffffffff}
}

// decodeReply reads a script call's answer.
func decodeReply(cmd *redis.Cmd) (reply, error) {
	v, err := cmd.Result()
	if err != nil {
		return reply{}, err
	}
	switch v := v.(type) {
	case int64:
		return unpackReply(v), nil
	case []any:
		if len(v) == 2 {
			res, ok1 := v[0].(int64)
			idem, ok2 := v[1].(string)
			if ok1 && ok2 && len(idem)%idemEntrySize == 0 {
				r := unpackReply(res)
				r.idem, r.withIdem = idem, true
				return r, nil
			}
		}
	}
	return reply{}, fmt.Errorf("script answered %v", v)
}

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
