// Package lua embeds the Redis Lua scripts of cyclesd.
//
// Every script under this folder (except lib/) is compiled by internal/script as
// lib/int64.lua + lib/core.lua + the libraries its "-- include:" header names
// (and, transitively, theirs) + <script>.lua, so the helpers are local to each
// script; on Redis 7 that is one Function library per script, the body its
// function (internal/script/compile.go). A first line "#!lua flags=..." holds the
// Redis flags: allow-oom (runs when Redis is full), no-writes (reads). Each script starts with a header listing KEYS, ARGV and its result.
package lua

import "embed"

// FS holds lib/*.lua and the scripts (subfolders included).
//
//go:embed *
var FS embed.FS
