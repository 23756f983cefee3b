package core

import (
	"bytes"
	"net/http"
)

// HeaderFilter modifies a message's header fields on its way through a route: the Gateway API's
// RequestHeaderModifier and ResponseHeaderModifier. Fields named in Remove are dropped, those
// named in Set replace every field of that name, and Add appends fields beside any of the same
// name. A nil filter changes nothing.
type HeaderFilter struct {
	Set, Add []FieldValue
	Remove   [][]byte
	fields   []FieldValue // Set then Add (Compile)
}

// FieldValue is one field a filter writes.
type FieldValue struct{ Name, Value []byte }

// Keep reports whether a field named name passes (it is neither removed nor replaced by Set).
func (f *HeaderFilter) Keep(name []byte) bool {
	if f == nil {
		return true
	}
	for _, r := range f.Remove {
		if bytes.EqualFold(r, name) {
			return false
		}
	}
	for _, s := range f.Set {
		if bytes.EqualFold(s.Name, name) {
			return false
		}
	}
	return true
}

// Fields are the fields the filter writes (Set, then Add), to go after the kept ones.
func (f *HeaderFilter) Fields() []FieldValue {
	if f == nil {
		return nil
	}
	return f.fields
}

// Compile fixes the filter's field list; call it once the filter is filled.
func (f *HeaderFilter) Compile() *HeaderFilter {
	if f == nil || (len(f.Set) == 0 && len(f.Add) == 0 && len(f.Remove) == 0) {
		return nil
	}
	f.fields = append(append([]FieldValue(nil), f.Set...), f.Add...)
	return f
}

// Apply modifies an http.Header the same way (the net/http engine).
func (f *HeaderFilter) Apply(h http.Header) {
	if f == nil {
		return
	}
	for _, r := range f.Remove {
		h.Del(string(r))
	}
	for _, s := range f.Set {
		h.Set(string(s.Name), string(s.Value))
	}
	for _, a := range f.Add {
		h.Add(string(a.Name), string(a.Value))
	}
}
