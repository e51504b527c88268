package main

import "flag"

// toolFlags are the flags every one-off bench tool (archive, feed, gogc)
// takes: its result file, the cyclesd binary and whether to print progress.
type toolFlags struct {
	out, bin string
	quiet    bool
}

// register declares the flags on fs, out being the tool's default result file.
func (t *toolFlags) register(fs *flag.FlagSet, out string) {
	fs.StringVar(&t.out, "out", out, "result file")
	fs.StringVar(&t.bin, "cyclesd", "", "cyclesd binary (default: bin/cyclesd, else go build)")
	fs.BoolVar(&t.quiet, "q", false, "no progress lines")
}
