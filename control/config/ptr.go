package config

// Helpers for the optional (pointer) fields of a configuration: nil is "not set", so a copy or a
// comparison goes by what a pointer points to, not by the pointer.

// clonePtr is a copy of *p of its own (nil stays nil), so that a change of the copy's field
// leaves the original alone.
func clonePtr[T any](p *T) *T {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}

// eqPtr reports whether a and b are both unset or both set to equal values.
func eqPtr[T comparable](a, b *T) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}
