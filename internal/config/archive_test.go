package config

import (
	"testing"
	"time"

	"github.com/cyclesgo/cycles-go/test/errtest"
)

// TestArchiveSettings: the archive is off unless a DSN is given (flag or
// environment), the retention defaults to 400 days and refuses less than
// two days; -hot-retention defaults to 24 h and refuses less than 1 s.
func TestArchiveSettings(t *testing.T) {
	cases := []struct {
		name          string
		args          []string
		env           map[string]string
		wantDSN       string
		wantRetention time.Duration
		wantHot       time.Duration
		wantErr       string
	}{
		{name: "off by default", wantRetention: 400 * 24 * time.Hour},
		{name: "flag", args: []string{"-archive-dsn", "postgres://a@h/db"}, wantDSN: "postgres://a@h/db", wantRetention: 400 * 24 * time.Hour},
		{name: "environment", env: map[string]string{"CYCLESD_ARCHIVE_DSN": "postgres://e@h/db", "CYCLESD_ARCHIVE_RETENTION": "720h"},
			wantDSN: "postgres://e@h/db", wantRetention: 720 * time.Hour},
		{name: "flag wins", args: []string{"-archive-dsn", "postgres://f@h/db"}, env: map[string]string{"CYCLESD_ARCHIVE_DSN": "postgres://e@h/db"},
			wantDSN: "postgres://f@h/db", wantRetention: 400 * 24 * time.Hour},
		{name: "retention under two days", args: []string{"-archive-retention", "47h"}, wantErr: "archive-retention"},
		{name: "negative retention", args: []string{"-archive-retention", "-1h"}, wantErr: "archive-retention"},
		{name: "hot retention", args: []string{"-hot-retention", "60s"}, wantRetention: 400 * 24 * time.Hour, wantHot: time.Minute},
		{name: "hot retention zero", args: []string{"-hot-retention", "0s"}, wantErr: "hot-retention"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Load(tc.args, func(k string) string { return tc.env[k] })
			if errtest.Want(t, err, tc.wantErr) {
				return
			}
			if tc.wantHot == 0 {
				tc.wantHot = 24 * time.Hour
			}
			if c.ArchiveDSN != tc.wantDSN || c.ArchiveRetention != tc.wantRetention || c.HotRetention != tc.wantHot {
				t.Fatalf("dsn %q retention %v, want %q %v", c.ArchiveDSN, c.ArchiveRetention, tc.wantDSN, tc.wantRetention)
			}
		})
	}
}
