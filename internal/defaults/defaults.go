// Package defaults fills an options struct's unset settings, so every
// package's New reads the same way: a setting left at zero (or set below it,
// which no setting here means) takes its default, and a bounded one is
// capped. Set does one setting; Fill does every number of a struct from a
// struct of defaults declared once (a negative that means "off" is kept by
// the field's tag).
package defaults

// number is what a setting can be: a count, a size, a rate or a duration.
type number interface {
	~int | ~int32 | ~int64 | ~uint32 | ~uint64 | ~float64
}

// Set gives *v the value def when *v is zero or negative.
func Set[T number](v *T, def T) {
	if *v <= 0 {
		*v = def
	}
}

// Cap lowers *v to limit when it is above it.
func Cap[T number](v *T, limit T) {
	if *v > limit {
		*v = limit
	}
}
