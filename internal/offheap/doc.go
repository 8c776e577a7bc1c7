// Package offheap holds large, pointer-free tables outside the Go heap.
//
// A write-back aggregator keeps a record of every resident subject (issue
// 27: at most 150 bytes of RSS each). On the Go heap such tables cost twice
// their size in RSS, because the collector lets the heap grow to twice what
// is live before it runs (GOGC=100); memory mapped from the kernel costs
// what is touched. The tables here hold no Go pointers (the collector does
// not see them) and never move once allocated, so a pointer into one stays
// valid until Free or Reset.
//
// On platforms without mmap the same types fall back to the Go heap.
package offheap
