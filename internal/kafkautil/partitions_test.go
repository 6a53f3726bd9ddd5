package kafkautil_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/capper-dev/capper/internal/kafkautil"
	"github.com/capper-dev/capper/internal/testenv"
)

func TestPartitions(t *testing.T) {
	k := testenv.StartKafka(t, 3, []string{"in"})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c := &kafka.Client{Addr: kafka.TCP(k.Addrs...), Timeout: 10 * time.Second}
	ids, err := kafkautil.Partitions(ctx, c, "in")
	if slices.Sort(ids); err != nil || !slices.Equal(ids, []int{0, 1, 2}) {
		t.Errorf("Partitions(in) = %v, %v; want [0 1 2]", ids, err)
	}
	if ids, err := kafkautil.Partitions(ctx, c, "missing"); !errors.Is(err, kafka.UnknownTopicOrPartition) || ids != nil {
		t.Errorf("Partitions(missing) = %v, %v; want an unknown topic", ids, err)
	}

	dead := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t)) // nothing listens there
	ids, err = kafkautil.LookupPartitions(ctx, &kafka.Dialer{Timeout: 5 * time.Second}, []string{dead, k.Addrs[0]}, "in")
	if slices.Sort(ids); err != nil || !slices.Equal(ids, []int{0, 1, 2}) {
		t.Errorf("LookupPartitions(a dead broker, a live one) = %v, %v; want [0 1 2]", ids, err)
	}
	if _, err := kafkautil.LookupPartitions(ctx, kafka.DefaultDialer, []string{dead}, "in"); err == nil {
		t.Error("LookupPartitions(a dead broker): no error")
	}
	if _, err := kafkautil.LookupPartitions(ctx, kafka.DefaultDialer, nil, "in"); err == nil {
		t.Error("LookupPartitions(no brokers): no error")
	}
}
