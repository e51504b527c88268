package audit

// Operations lists the audited methods (for the completeness test).
func Operations() map[string]string {
	out := make(map[string]string, len(operations))
	for m, op := range operations {
		out[m] = op.name
	}
	return out
}
