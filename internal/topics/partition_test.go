package topics

import (
	"fmt"
	"testing"
)

// javaPartitions were computed with Kafka 4.2.0's kafka-clients jar:
// BuiltInPartitioner.partitionForKey(key.getBytes(UTF_8), n), which is
// Utils.toPositive(Utils.murmur2(key)) % n, for n = 1, 3, 12, 100.
var javaPartitions = []struct {
	key    string
	murmur int32 // Utils.murmur2(key), for reference
	want   [4]int
}{
	{"", 275646681, [4]int{0, 0, 9, 81}},
	{"a", -1563381124, [4]int{0, 1, 4, 24}},
	{"ab", 316155434, [4]int{0, 2, 2, 34}},
	{"abc", 479470107, [4]int{0, 0, 3, 7}},
	{"abcd", -1323649548, [4]int{0, 2, 8, 0}},
	{"ip:203.0.113.7", -1830043892, [4]int{0, 0, 0, 56}},
	{"ip:198.51.100.23", 1543020042, [4]int{0, 0, 6, 42}},
	{"email:a@example.com", -436058869, [4]int{0, 1, 7, 79}},
	{"email:zoë@exämple.com", 977310043, [4]int{0, 1, 7, 43}},
	{"user:42", -1493546323, [4]int{0, 1, 1, 25}},
	{"ip:2001:db8::1", -871412198, [4]int{0, 0, 6, 50}},
	{"kind:subject-with-a-longer-value-0123456789", 1530885368, [4]int{0, 2, 8, 68}},
}

func TestPartitionMatchesJava(t *testing.T) {
	counts := [4]int{1, 3, 12, 100}
	for _, tt := range javaPartitions {
		t.Run(tt.key, func(t *testing.T) {
			for i, n := range counts {
				if got := Partition([]byte(tt.key), n); got != tt.want[i] {
					t.Errorf("Partition(%q, %d) = %d, Java says %d", tt.key, n, got, tt.want[i])
				}
				// The formula itself, from the Java murmur2 value.
				if got := int(uint32(tt.murmur)&0x7fffffff) % n; got != tt.want[i] {
					t.Errorf("toPositive(%d) %% %d = %d, want %d", tt.murmur, n, got, tt.want[i])
				}
			}
		})
	}
	if got := Partition([]byte("x"), 0); got != -1 {
		t.Errorf("Partition with 0 partitions = %d, want -1", got)
	}
}

func ExamplePartition() {
	fmt.Println(Partition([]byte("ip:203.0.113.7"), 12))
	fmt.Println(Partition([]byte("email:a@example.com"), 12))
	// Output:
	// 0
	// 7
}
