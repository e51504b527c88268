package hashslot

import "testing"

// Vectors from the Redis Cluster specification and from `CLUSTER KEYSLOT` on
// a real cluster (redis-server 7).
func TestSlotMatchesRedis(t *testing.T) {
	for _, c := range []struct {
		key  string
		slot int
	}{
		{"123456789", 0x31C3 % Slots}, // the spec's CRC16 check value 0x31C3
		{"foo", 12182},
		{"bar", 5061},
		{"{user1000}.following", 3443},
		{"{user1000}.followers", 3443},
		{"user1000", 3443},
		{"foo{}{bar}", 8363},    // empty first tag: the whole key is hashed
		{"foo{{bar}}zap", 4015}, // tag is "{bar"
		{"foo{bar}{zap}", 5061}, // first tag only: "bar"
		{"{", 4092},             // no closing brace: whole key
		{"", 0},
		{"a}{b}", 3300},
		{"cy:{t:acme}:r:{x}", 9557},
	} {
		if got := Slot(c.key); got != c.slot {
			t.Errorf("Slot(%q) = %d, want %d", c.key, got, c.slot)
		}
	}
}

func TestTag(t *testing.T) {
	for key, want := range map[string]string{
		"cy:{t:acme}:b:tenant:acme:TOKENS": "t:acme",
		"cy:{t:acme}:r:{x}":                "t:acme",
		"cy:tenants":                       "cy:tenants",
		"a}{b}":                            "b",
	} {
		if got := Tag(key); got != want {
			t.Errorf("Tag(%q) = %q, want %q", key, got, want)
		}
	}
}
