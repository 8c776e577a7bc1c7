package topics

import "github.com/segmentio/kafka-go"

// Partition returns the partition of key among numPartitions, as a
// Publisher places it: kafka-go's Murmur2Balancer{Consistent: true}, which
// is Java's default partitioner for keyed records,
// Utils.toPositive(Utils.murmur2(key)) % numPartitions, and librdkafka's
// "murmur2_random" (or "murmur2") partitioner. It returns -1 if
// numPartitions < 1.
func Partition(key []byte, numPartitions int) int {
	if numPartitions < 1 {
		return -1
	}
	if key == nil {
		key = []byte{} // Consistent: a nil key hashes like an empty one.
	}
	partitions := make([]int, numPartitions)
	for i := range partitions {
		partitions[i] = i
	}
	b := kafka.Murmur2Balancer{Consistent: true}
	return b.Balance(kafka.Message{Key: key}, partitions...)
}
