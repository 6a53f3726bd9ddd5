package dispatch

import (
	"testing"
)

// BenchmarkDecode: one typical intent through validation.
func BenchmarkDecode(b *testing.B) {
	d := testDecoder(b, 0)
	key := []byte("4242")
	value := []byte(`{"id":"spring-sale-00000000042","user_id":4242,"campaign_id":"spring-sale","channel":"push","category":"marketing","created_at":"2026-11-21T16:00:00Z","payload":{"template":"spring-1","locale":"en-SG","vars":{"name":"Ana","promo":"SPRING20"}}}`)
	b.ReportAllocs()
	b.SetBytes(int64(len(value)))
	for b.Loop() {
		if _, err := d.Decode(key, value); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecodePolicyFields: the typical intent with tags, priority,
// time zone (a cache hit after the first) and an override.
func BenchmarkDecodePolicyFields(b *testing.B) {
	d := testDecoder(b, 0)
	key := []byte("4242")
	value := []byte(`{"id":"spring-sale-00000000042","user_id":4242,"campaign_id":"spring-sale","channel":"push","category":"marketing","created_at":"2026-11-21T16:00:00Z","tags":["promo","spring-2026","en-SG"],"priority":"high","time_zone":"Asia/Singapore","capping":"bypass","payload":{"template":"spring-1","locale":"en-SG","vars":{"name":"Ana","promo":"SPRING20"}}}`)
	b.ReportAllocs()
	b.SetBytes(int64(len(value)))
	for b.Loop() {
		if _, err := d.Decode(key, value); err != nil {
			b.Fatal(err)
		}
	}
}
