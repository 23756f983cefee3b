package edge

import (
	"strings"
	"testing"
)

func TestMemoryEvictionConfig(t *testing.T) {
	t.Parallel()
	_, err := ParseConfig([]byte("origin: http://a:1\nmemory:\n  max_objects: 10\n  eviction: arc\n"))
	if err == nil || !strings.Contains(err.Error(), "line 4: field memory.eviction") || !strings.Contains(err.Error(), "tinylfu, lru or s3fifo") {
		t.Fatalf("bad policy: %v", err)
	}
	for _, pol := range []string{"tinylfu", "lru", "s3fifo"} {
		cfg, err := ParseConfig([]byte("origin: http://a:1\nmemory:\n  eviction: " + pol + "\n"))
		if err != nil || cfg.Memory.Eviction != pol {
			t.Fatalf("%s: %+v %v", pol, cfg.Memory, err)
		}
	}
}
