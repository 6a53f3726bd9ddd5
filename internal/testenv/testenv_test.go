package testenv

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/redis/go-redis/v9"
	"github.com/segmentio/kafka-go"
)

func TestRedisKillRestart(t *testing.T) {
	r := StartRedis(t, RedisOptions{})
	ctx := context.Background()
	c := r.Client()
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	r.Kill()
	if err := c.Ping(ctx).Err(); err == nil {
		t.Fatal("PING answered after Kill")
	}
	r.Restart()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING after Restart: %v", err)
	}
	// No persistence: a restarted node is empty, like a crashed cache node.
	if n, err := c.Exists(ctx, "k").Result(); err != nil || n != 0 {
		t.Fatalf("EXISTS k after restart = %d, %v; want 0", n, err)
	}
}

func TestClusterSpreadsKeysOverAllMasters(t *testing.T) {
	cl := StartCluster(t, 3)
	ctx := context.Background()
	c := cl.Client()
	for i := 0; i < 300; i++ {
		if err := c.Set(ctx, fmt.Sprintf("k:{%d}", i), i, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	var seen atomic.Int32 // ForEachMaster runs the masters in parallel
	err := c.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
		n, err := m.DBSize(ctx).Result()
		if err != nil {
			return err
		}
		if n == 0 {
			return fmt.Errorf("master %s has no keys", m.Options().Addr)
		}
		seen.Add(1)
		return nil
	})
	if err != nil || seen.Load() != 3 {
		t.Fatalf("masters with keys: %d, err %v", seen.Load(), err)
	}
}

func TestClusterSlotMigration(t *testing.T) {
	cl := StartCluster(t, 3)
	ctx := context.Background()
	c := cl.Client()
	key := "m:{42}"
	slot := int(redisSlot(t, c, key))
	if err := c.Set(ctx, key, "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	src := cl.SlotOwner(ctx, slot)
	dst := (src + 1) % 3
	if err := cl.BeginSlotMigration(ctx, slot, src, dst); err != nil {
		t.Fatal(err)
	}
	if n, err := cl.MoveSlotKeys(ctx, slot, src, dst, 100); err != nil || n != 1 {
		t.Fatalf("moved %d keys: %v", n, err)
	}
	// Mid-migration the client follows ASK to the importing node.
	if v, err := c.Get(ctx, key).Result(); err != nil || v != "v" {
		t.Fatalf("GET during migration = %q, %v", v, err)
	}
	if err := cl.FinishSlotMigration(ctx, slot, dst); err != nil {
		t.Fatal(err)
	}
	if got := cl.SlotOwner(ctx, slot); got != dst {
		t.Fatalf("slot %d owner = %d, want %d", slot, got, dst)
	}
}

func redisSlot(t *testing.T, c *redis.ClusterClient, key string) int64 {
	n, err := c.ClusterKeySlot(context.Background(), key).Result()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestS3RoundTrip(t *testing.T) {
	s := StartS3(t, "capper-test")
	ctx := context.Background()
	c := s.Client()
	if _, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(s.Bucket), Key: aws.String("a/b"), Body: strings.NewReader("hello")}); err != nil {
		t.Fatal(err)
	}
	out, err := c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(s.Bucket), Key: aws.String("a/b")})
	if err != nil {
		t.Fatal(err)
	}
	defer out.Body.Close()
	b, _ := io.ReadAll(out.Body)
	if string(b) != "hello" {
		t.Fatalf("got %q", b)
	}
}

func TestKafkaRoundTrip(t *testing.T) {
	k := StartKafka(t, 2, []string{"t"})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w := &kafka.Writer{Addr: kafka.TCP(k.Addrs...), Topic: "t", RequiredAcks: kafka.RequireAll, BatchTimeout: time.Millisecond}
	defer w.Close()
	if err := w.WriteMessages(ctx, kafka.Message{Key: []byte("1"), Value: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	r := kafka.NewReader(kafka.ReaderConfig{Brokers: k.Addrs, GroupID: "g", Topic: "t", MaxWait: 100 * time.Millisecond})
	defer r.Close()
	m, err := r.FetchMessage(ctx)
	if err != nil || string(m.Value) != "x" {
		t.Fatalf("fetched %q, %v", m.Value, err)
	}
}

// TestOverLimit: the report names the figures and holds the stacks.
func TestOverLimit(t *testing.T) {
	var b strings.Builder
	overLimit(&b, 5<<30, 4<<30)
	out := b.String()
	for _, want := range []string{"holds 5120 MiB, over its limit of 4096 MiB", "goroutine ", "TestOverLimit", "heap profile"} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%.500s", want, out)
		}
	}
	if residentMemory() == 0 {
		t.Error("residentMemory: 0 bytes")
	}
}
