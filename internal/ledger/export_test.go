package ledger

// The script-level suites (scripts_*_test.go, package ledger_test) call the
// ledger's scripts through its typed bindings and read their replies with
// its reply layouts: no suite builds KEYS or ARGV by position or keeps its
// own copy of a layout.

type (
	ReserveKeys = reserveKeys
	ReserveArgs = reserveArgs
	DecideKeys  = decideKeys
	DecideArgs  = decideArgs
	CommitKeys  = commitKeys
	CommitArgs  = commitArgs
	ReleaseKeys = releaseKeys
	ReleaseArgs = releaseArgs
	ExtendKeys  = extendKeys
	ExtendArgs  = extendArgs
	EventKeys   = eventKeys
	EventArgs   = eventArgs
)

var (
	ScriptReserve = scriptReserve
	ScriptDecide  = scriptDecide
	ScriptCommit  = scriptCommit
	ScriptRelease = scriptRelease
	ScriptExtend  = scriptExtend
	ScriptEvent   = scriptEvent

	// KindToken marks a reply field with its kind, as the Lua layouts do.
	KindToken = kindToken
)

// ReplyLayouts are the mutations' reply layouts by script name.
var ReplyLayouts = func() map[string]replyLayout {
	out := map[string]replyLayout{}
	for _, l := range replyLayouts {
		out[l.Name()] = l
	}
	return out
}()
