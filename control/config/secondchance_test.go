package config

import (
	"strings"
	"testing"
	"time"
)

// TestSecondChanceConfig: second chance is on by default, a file turns it off, the retirement
// time parses, and a bad value is an error naming the line.
func TestSecondChanceConfig(t *testing.T) {
	c, err := Parse([]byte("interface: eth0\nvips: []\n"))
	if err != nil {
		t.Fatal(err)
	}
	c.ApplyDefaults()
	if c.SecondChance == nil || !*c.SecondChance || c.SecondChanceRetire != 0 {
		t.Fatalf("defaults: second_chance %v retire %v, want on and 0", c.SecondChance, c.SecondChanceRetire)
	}
	c, err = Parse([]byte("interface: eth0\nsecond_chance: false\nsecond_chance_retire: 10m\nvips: []\n"))
	if err != nil {
		t.Fatal(err)
	}
	c.ApplyDefaults()
	if *c.SecondChance || c.SecondChanceRetire.D() != 10*time.Minute {
		t.Fatalf("parsed: second_chance %v retire %v", *c.SecondChance, c.SecondChanceRetire.D())
	}
	if n := c.Clone(); n.SecondChance == c.SecondChance || *n.SecondChance {
		t.Fatal("clone shares or loses second_chance")
	}
	_, err = Parse([]byte("interface: eth0\nsecond_chance_retire: soon\nvips: []\n"))
	if err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Fatalf("bad retirement time: %v, want an error naming line 2", err)
	}
}
