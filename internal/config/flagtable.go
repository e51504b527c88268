package config

import (
	"flag"
	"fmt"
	"io"
	"strings"
)

// FlagTable writes the Markdown table of every flag: name, environment
// variable, default and meaning, from the same definitions Load parses (the
// README's configuration table is this output, checked by a test).
func FlagTable(w io.Writer) error {
	fs := flag.NewFlagSet("cyclesd", flag.ContinueOnError)
	var addrs, methodPolicies string
	define(fs, &Config{}, &addrs, &methodPolicies)
	var b strings.Builder
	b.WriteString("| Flag | Environment | Default | Meaning |\n|---|---|---|---|\n")
	fs.VisitAll(func(f *flag.Flag) {
		def := "—"
		if f.DefValue != "" {
			def = "`" + f.DefValue + "`"
		}
		fmt.Fprintf(&b, "| `-%s` | `%s` | %s | %s |\n", f.Name, EnvName(f.Name), def, cell(f.Usage))
	})
	_, err := io.WriteString(w, b.String())
	return err
}

// cell makes a usage string safe inside a Markdown table cell.
func cell(s string) string {
	return strings.NewReplacer("|", `\|`, "\n", " ").Replace(s)
}
