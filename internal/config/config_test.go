package config

import (
	"strings"
	"testing"
)

func TestAdminKeyStrength(t *testing.T) {
	strong := strings.Repeat("k", MinAdminKeyLen)
	cases := []struct {
		name    string
		args    []string
		wantErr string
	}{
		{"dev mode generates its own", nil, ""},
		{"dev mode accepts the dev key", []string{"-admin-key", DevAdminKey}, ""},
		// One rule, one message: a key too short for dev mode is told the
		// length it will need everywhere, not a smaller one.
		{"dev mode refuses a short key with the one rule", []string{"-admin-key", "short"}, "at least 32 characters"},
		{"dev mode refuses 20 chars with the one rule", []string{"-admin-key", strong[:20]}, "at least 32 characters"},
		{"dev mode accepts 32 chars", []string{"-admin-key", strong}, ""},
		{"real Redis refuses the published dev key", []string{"-redis-addrs", "r:6379", "-admin-key", DevAdminKey}, "published"},
		{"real Redis refuses a 16-char key", []string{"-redis-addrs", "r:6379", "-admin-key", "aaaaaaaaaaaaaaaa"}, "at least 32"},
		{"real Redis refuses 31 chars", []string{"-redis-addrs", "r:6379", "-admin-key", strong[1:]}, "at least 32"},
		{"real Redis accepts 32 chars", []string{"-redis-addrs", "r:6379", "-admin-key", strong}, ""},
		{"real Redis needs a key", []string{"-redis-addrs", "r:6379"}, "required"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load(tc.args, func(string) string { return "" })
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("err = %v, want one mentioning %q", err, tc.wantErr)
			}
		})
	}
}

func TestLimitFlagsMustBePositive(t *testing.T) {
	for _, flag := range []string{"-max-recv-msg-bytes", "-streams-per-key", "-max-connections", "-unverified-per-failing-peer"} {
		if _, err := Load([]string{flag, "0"}, func(string) string { return "" }); err == nil {
			t.Fatalf("%s 0 accepted", flag)
		}
	}
}
