package producer_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/floodgate-dev/floodgate/event"
	"github.com/floodgate-dev/floodgate/internal/stacktest"
	"github.com/floodgate-dev/floodgate/internal/topics"
	"github.com/floodgate-dev/floodgate/producer"
)

// readAll reads every partition of topic from the start to its end offset,
// taken once everything was published: the topic then holds all it will
// ever hold, so an unexpected duplicate is in it already, and no wait for
// "nothing more" is needed.
func readAll(tb testing.TB, brokers []string, topic string, partitions, want int) []kafka.Message {
	tb.Helper()
	ctx, cancel := context.WithTimeout(tb.Context(), time.Minute)
	defer cancel()
	client := &kafka.Client{Addr: kafka.TCP(brokers...)}
	req := &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{}}
	for p := range partitions {
		req.Topics[topic] = append(req.Topics[topic], kafka.LastOffsetOf(p))
	}
	res, err := client.ListOffsets(ctx, req)
	if err != nil {
		tb.Fatalf("end offsets of %s: %v", topic, err)
	}
	var (
		mu  sync.Mutex
		got []kafka.Message
		wg  sync.WaitGroup
	)
	for _, po := range res.Topics[topic] {
		if po.Error != nil {
			tb.Fatalf("end offset of %s partition %d: %v", topic, po.Partition, po.Error)
		}
		if po.LastOffset == 0 {
			continue
		}
		r := kafka.NewReader(kafka.ReaderConfig{
			Brokers: brokers, Topic: topic, Partition: po.Partition, MaxWait: 100 * time.Millisecond,
		})
		wg.Go(func() {
			defer func() {
				if err := r.Close(); err != nil {
					tb.Errorf("close reader partition=%d: %v", po.Partition, err)
				}
			}()
			for {
				m, err := r.ReadMessage(ctx)
				if err != nil {
					tb.Errorf("read partition=%d: %v", po.Partition, err)
					return
				}
				mu.Lock()
				got = append(got, m)
				mu.Unlock()
				if m.Offset+1 >= po.LastOffset {
					return
				}
			}
		})
	}
	wg.Wait()
	if len(got) != want {
		tb.Fatalf("read %d messages from %s, want %d", len(got), topic, want)
	}
	return got
}

func kcatProduce(tb testing.TB, brokers []string, topic string, headers []string, lines []string) {
	tb.Helper()
	kcat, err := exec.LookPath("kcat")
	if err != nil {
		tb.Fatalf("kcat not found (installed by scripts/stack up): %v", err)
	}
	args := []string{"-P", "-b", strings.Join(brokers, ","), "-t", topic, "-K", "|", "-X", "partitioner=murmur2_random"}
	for _, h := range headers {
		args = append(args, "-H", h)
	}
	ctx, cancel := context.WithTimeout(tb.Context(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, kcat, args...)
	cmd.Stdin = strings.NewReader(strings.Join(lines, "\n") + "\n")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		tb.Fatalf("kcat %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
}

func TestPublishAndKcatAgree(t *testing.T) {
	brokers := stacktest.Brokers(t)
	const partitions = 12
	topic := stacktest.Topic(t, brokers, partitions)

	subjects := []event.Event{}
	for i := range 40 {
		subjects = append(subjects, event.Event{Kind: "ip", Subject: fmt.Sprintf("198.51.100.%d", i)})
	}
	for _, s := range []string{"a@example.com", "zoë@exämple.com", "x+tag@example.org", "user with spaces", "日本語"} {
		subjects = append(subjects, event.Event{Kind: "email", Subject: s})
	}
	subjects = append(subjects, event.Event{Kind: "ip", Subject: "2001:db8::1"})

	ts := time.Now().Add(-time.Hour).Truncate(time.Millisecond).UTC()
	sent := map[string]event.Event{} // by id
	counted := map[string]bool{}     // ids published with floodgate-counted=1
	var goEvents, goCounted []event.Event
	var kcatLines, kcatCountedLines []string
	for i, s := range subjects {
		for j, source := range []string{"go", "kcat"} {
			e := event.Event{
				V: 1, ID: event.NewID(), Action: "login_failed." + source, Kind: s.Kind, Subject: s.Subject,
				TS: ts.Add(time.Duration(i) * time.Millisecond), N: int64(1 + j + i%3),
			}
			sent[e.ID] = e
			isCounted := i%5 == 0
			counted[e.ID] = isCounted
			if source == "go" {
				if isCounted {
					goCounted = append(goCounted, e)
				} else {
					goEvents = append(goEvents, e)
				}
				continue
			}
			value, err := event.Encode(e)
			if err != nil {
				t.Fatal(err)
			}
			line := e.Key() + "|" + string(value)
			if isCounted {
				kcatCountedLines = append(kcatCountedLines, line)
			} else {
				kcatLines = append(kcatLines, line)
			}
		}
	}

	p, err := producer.New(producer.Config{Brokers: brokers, Topic: topic})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := p.Publish(ctx, goEvents...); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	if err := p.PublishCounted(ctx, goCounted...); err != nil {
		t.Fatalf("PublishCounted: %v", err)
	}
	if err := p.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if st := p.Stats(); st.Published != int64(len(goEvents)+len(goCounted)) || st.Failed != 0 || st.Buffered != 0 {
		t.Errorf("Stats = %+v", st)
	}
	kcatProduce(t, brokers, topic, nil, kcatLines)
	kcatProduce(t, brokers, topic, []string{event.HeaderCounted + "=1"}, kcatCountedLines)

	msgs := readAll(t, brokers, topic, partitions, len(sent))
	partitionOf := map[string]int{} // key -> partition
	seen := map[string]bool{}
	for _, m := range msgs {
		e, err := event.Decode(m.Value)
		if err != nil {
			t.Errorf("partition %d offset %d: %v", m.Partition, m.Offset, err)
			continue
		}
		if err := event.CheckKey(m.Key, e); err != nil {
			t.Errorf("partition %d offset %d: %v", m.Partition, m.Offset, err)
		}
		want, ok := sent[e.ID]
		if !ok || seen[e.ID] {
			t.Errorf("unexpected or duplicate event %+v (known %v, seen %v)", e, ok, seen[e.ID])
			continue
		}
		seen[e.ID] = true
		if !reflect.DeepEqual(e, want) {
			t.Errorf("event read back = %+v, sent %+v", e, want)
		}
		if javaP := topics.Partition(m.Key, partitions); m.Partition != javaP {
			t.Errorf("%s (%s) on partition %d, Java's default partitioner says %d", m.Key, e.Action, m.Partition, javaP)
		}
		if p, ok := partitionOf[string(m.Key)]; ok && p != m.Partition {
			t.Errorf("key %s on partitions %d and %d (go and kcat disagree)", m.Key, p, m.Partition)
		}
		partitionOf[string(m.Key)] = m.Partition
		var hdr []string
		for _, h := range m.Headers {
			hdr = append(hdr, h.Key+"="+string(h.Value))
		}
		wantHdr := counted[e.ID]
		if gotHdr := len(hdr) == 1 && hdr[0] == event.HeaderCounted+"=1"; gotHdr != wantHdr || (!wantHdr && len(hdr) != 0) {
			t.Errorf("%s (%s) headers %v, want counted=%v", m.Key, e.Action, hdr, wantHdr)
		}
	}
	used := map[int]bool{}
	for _, p := range partitionOf {
		used[p] = true
	}
	if len(used) < partitions/2 {
		t.Errorf("%d subjects used only %d of %d partitions", len(partitionOf), len(used), partitions)
	}
	t.Logf("%d events from Go and kcat over %d keys on %d partitions: all agree with Java's partitioner", len(msgs), len(partitionOf), len(used))
}

func TestPublishAsyncUnknownTopicSurfaces(t *testing.T) {
	brokers := stacktest.Brokers(t)
	topic := fmt.Sprintf("floodgate.test.missing.%d", time.Now().UnixNano())
	p, err := producer.New(producer.Config{Brokers: brokers, Topic: topic, Async: true, MaxAttempts: 2})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	evs := event.Split("login_failed", time.Now(), map[string]string{"ip": "203.0.113.7"})
	pubErr := p.Publish(ctx, evs...)
	closeErr := p.Close()
	// The topic does not exist and is not auto-created: the failure must
	// come back from Publish (metadata) or from Close (the batch).
	if err := errors.Join(pubErr, closeErr); err == nil {
		t.Fatalf("publishing to missing topic %s reported no error", topic)
	} else {
		t.Logf("reported: %v", err)
	}
}
