package userlimits

// Writing a record's value: the JSON Decode reads back to the same record.

import (
	"bytes"
	"encoding/json"
	"strconv"
	"time"
)

// Encode writes a record's value (nil for Erase: a tombstone): user_id,
// each kind's field that is set (fields' order), updated_at. Decode reads
// it back to the same record.
func Encode(r Record) ([]byte, error) {
	if r.Erase {
		return nil, nil
	}
	b := bytes.NewBufferString(`{"user_id":`)
	b.WriteString(strconv.FormatUint(r.UserID, 10))
	add := func(name string, v any) error {
		j, err := json.Marshal(v)
		if err != nil {
			return err
		}
		b.WriteString(`,"` + name + `":`)
		b.Write(j)
		return nil
	}
	for _, f := range fields {
		if v, ok := f.encode(r.Limits); ok {
			if err := add(f.name, v); err != nil {
				return nil, err
			}
		}
	}
	if !r.UpdatedAt.IsZero() {
		if err := add("updated_at", r.UpdatedAt.UTC().Format(time.RFC3339Nano)); err != nil {
			return nil, err
		}
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}
