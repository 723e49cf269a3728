// Package jsonfield decodes JSON as encoding/json does, but tells a value of
// the wrong type in the terms of the one who wrote the JSON: the value's
// path in it, as written (messages.0.content.1.text), and what it must be,
// in words ("an integer", "a string"). encoding/json names Go types and
// fields instead, and leaves out the indices of arrays. An UnmarshalJSON
// method that refuses a value for another reason (a missing member, an
// unknown kind) tells it the same way, and is placed by the same path.
package jsonfield

import (
	"bytes"
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// FieldError is a JSON value that decoding refused: of the wrong type
// (Want says what it must be), or missing or not one its decoder takes
// (Problem says what is wrong).
type FieldError struct {
	// Path is where the value is, from the root of the decoded JSON: the
	// keys of objects as written and the indices of arrays, joined by
	// dots; empty for the root itself.
	Path string
	// Want says what a value of the wrong type must be: "an integer", "a
	// string", "an object", "an array", "true or false", "a number"...
	Want string
	// Problem says what is wrong with a value of the right type, or with
	// its absence, as in "required" or `must be "a" or "b"`; empty for a
	// value of the wrong type.
	Problem string
}

// Required is the error of a member named name that a value must have
// and does not.
func Required(name string) *FieldError {
	return &FieldError{Path: name, Problem: "required"}
}

// Error says where the value is and what is wrong, as in "max_tokens:
// must be an integer" or "messages.0.content.1.type: required".
func (e *FieldError) Error() string {
	what := "must be " + e.Want
	if e.Problem != "" {
		what = e.Problem
	}
	if e.Path == "" {
		return what
	}
	return e.Path + ": " + what
}

// Under returns e as seen from a value that holds e's root at path at
// (itself a dotted path).
func (e *FieldError) Under(at string) *FieldError {
	if at == "" {
		return e
	}
	under := *e
	under.Path = at
	if e.Path != "" {
		under.Path = at + "." + e.Path
	}
	return &under
}

// Under returns err as seen from a value that holds the root of what
// err's decoding read at path at: a *FieldError in err's chain with at
// before its path, any other error as it is. An UnmarshalJSON method that
// decodes a part of its value on its own reports that part's errors
// through Under.
func Under(at string, err error) error {
	if te, ok := errors.AsType[*FieldError](err); ok {
		return te.Under(at)
	}
	return err
}

// Unmarshal is json.Unmarshal, but a value of the wrong type is reported as
// a *FieldError. Decoding itself is json.Unmarshal's, so what decodes, and
// every other error, is the same. An UnmarshalJSON method of a type within
// v tells its own refusals when it returns a *FieldError (decoding its
// parts with Unmarshal), and Unmarshal puts the value's path before it; a
// json.UnmarshalTypeError it returns is told by the field names
// encoding/json gives it.
func Unmarshal(data []byte, v any) error {
	err := json.Unmarshal(data, v)
	if err == nil || !isFieldError(err) {
		return err
	}
	if te := locate(data, reflect.TypeOf(v).Elem()); te != nil {
		return te
	}
	// What encoding/json reported but the walk did not find: only a
	// method that decodes differently alone than within its value.
	if te, ok := errors.AsType[*FieldError](err); ok {
		return te
	}
	ue, _ := errors.AsType[*json.UnmarshalTypeError](err)
	return &FieldError{Path: ue.Field, Want: want(ue.Type)}
}

// isFieldError reports whether err is a value Unmarshal tells by its path:
// one of the wrong type, told by encoding/json, or any refusal an
// UnmarshalJSON method tells as a *FieldError.
func isFieldError(err error) bool {
	if _, ok := errors.AsType[*FieldError](err); ok {
		return true
	}
	_, ok := errors.AsType[*json.UnmarshalTypeError](err)
	return ok
}

var (
	unmarshalerType     = reflect.TypeFor[json.Unmarshaler]()
	textUnmarshalerType = reflect.TypeFor[encoding.TextUnmarshaler]()
	numberType          = reflect.TypeFor[json.Number]()
)

// locate returns the first value of data, in the order it is written,
// that json.Unmarshal would refuse to decode into a value of type t, or nil
// when there is none. data is valid JSON, as json.Unmarshal checked. It
// follows encoding/json's rules: null decodes into anything, an object's
// member matches a field by name (then by name in any case) or is skipped,
// and a type with an UnmarshalJSON method is asked itself.
func locate(data []byte, t reflect.Type) *FieldError {
	data = bytes.TrimSpace(data)
	null := string(data) == "null"
	for t.Kind() == reflect.Pointer {
		if null {
			return nil // null makes a pointer nil
		}
		t = t.Elem()
	}
	if reflect.PointerTo(t).Implements(unmarshalerType) {
		err := json.Unmarshal(data, reflect.New(t).Interface())
		if te, ok := errors.AsType[*FieldError](err); ok {
			return te
		}
		if ue, ok := errors.AsType[*json.UnmarshalTypeError](err); ok {
			return &FieldError{Path: ue.Field, Want: want(ue.Type)}
		}
		return nil
	}
	if null {
		return nil
	}
	wrong := &FieldError{Want: want(t)}
	if reflect.PointerTo(t).Implements(textUnmarshalerType) {
		if data[0] != '"' {
			return wrong
		}
		return nil
	}
	switch t.Kind() {
	case reflect.Interface:
		if t.NumMethod() > 0 {
			return wrong
		}
	case reflect.Struct:
		if data[0] != '{' {
			return wrong
		}
		fs := fieldsOf(t)
		return eachMember(data, func(key string, v []byte) *FieldError {
			if f := fs.lookup(key); f != nil && !f.quoted {
				return locate(v, f.typ)
			}
			return nil
		})
	case reflect.Map:
		if data[0] != '{' {
			return wrong
		}
		return eachMember(data, func(_ string, v []byte) *FieldError { return locate(v, t.Elem()) })
	case reflect.Slice, reflect.Array:
		if t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Uint8 && data[0] == '"' {
			return nil // base64
		}
		if data[0] != '[' {
			return wrong
		}
		return eachElement(data, t, func(v []byte) *FieldError { return locate(v, t.Elem()) })
	case reflect.String:
		if data[0] == '"' || t == numberType && isNumber(data) {
			return nil
		}
		return wrong
	case reflect.Bool:
		if string(data) != "true" && string(data) != "false" {
			return wrong
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		_, err := strconv.ParseInt(string(data), 10, t.Bits())
		if errors.Is(err, strconv.ErrRange) {
			most := int64(^uint64(0) >> (65 - t.Bits()))
			return &FieldError{Want: fmt.Sprintf("an integer from %d to %d", -most-1, most)}
		}
		if err != nil {
			return wrong
		}
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		_, err := strconv.ParseUint(string(data), 10, t.Bits())
		if errors.Is(err, strconv.ErrRange) {
			return &FieldError{Want: fmt.Sprintf("an integer from 0 to %d", ^uint64(0)>>(64-t.Bits()))}
		}
		if err != nil {
			return wrong
		}
	case reflect.Float32, reflect.Float64:
		if !isNumber(data) {
			return wrong
		}
		if _, err := strconv.ParseFloat(string(data), t.Bits()); err != nil {
			return wrong
		}
	}
	return nil
}

// isNumber reports whether the JSON value data is a number.
func isNumber(data []byte) bool {
	return len(data) > 0 && (data[0] == '-' || '0' <= data[0] && data[0] <= '9')
}

// want says, in words, what a JSON value decoded into a value of type t
// must be.
func want(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == numberType {
		return "a number"
	}
	if reflect.PointerTo(t).Implements(textUnmarshalerType) && !reflect.PointerTo(t).Implements(unmarshalerType) {
		return "a string"
	}
	switch t.Kind() {
	case reflect.Struct, reflect.Map:
		return "an object"
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 {
			return "a string"
		}
		return "an array"
	case reflect.Array:
		return "an array"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return "an integer"
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return "an integer of 0 or more"
	case reflect.Float32, reflect.Float64:
		return "a number"
	}
	return "of another type"
}

// eachMember calls fn with each member of the JSON object data in order,
// its key unescaped, until fn returns an error, which it returns under
// the key.
func eachMember(data []byte, fn func(key string, value []byte) *FieldError) *FieldError {
	dec := json.NewDecoder(bytes.NewReader(data))
	if _, err := dec.Token(); err != nil { // {
		return nil
	}
	for dec.More() {
		tok, err := dec.Token()
		key, ok := tok.(string)
		if err != nil || !ok {
			return nil
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil
		}
		if te := fn(key, v); te != nil {
			return te.Under(key)
		}
	}
	return nil
}

// eachElement calls fn with each element of the JSON array data that
// decodes into a value of type t (every one for a slice, the first Len
// for an array) until fn returns an error, which it returns under the
// element's index.
func eachElement(data []byte, t reflect.Type, fn func(value []byte) *FieldError) *FieldError {
	dec := json.NewDecoder(bytes.NewReader(data))
	if _, err := dec.Token(); err != nil { // [
		return nil
	}
	for i := 0; dec.More(); i++ {
		if t.Kind() == reflect.Array && i >= t.Len() {
			return nil
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil
		}
		if te := fn(v); te != nil {
			return te.Under(strconv.Itoa(i))
		}
	}
	return nil
}

// field is a JSON object member a struct decodes: its name, the type of
// the Go field that holds it, and whether it is tagged ",string".
type field struct {
	name   string
	typ    reflect.Type
	quoted bool
	index  []int
	tagged bool
}

// fields are a struct's members, in the order of their Go fields.
type fields []field

// lookup returns the field of the member key: the one of that name, or
// else the first whose name equals it but for case; nil when none.
func (fs fields) lookup(key string) *field {
	for i := range fs {
		if fs[i].name == key {
			return &fs[i]
		}
	}
	for i := range fs {
		if strings.EqualFold(fs[i].name, key) {
			return &fs[i]
		}
	}
	return nil
}

var fieldCache sync.Map // reflect.Type → fields

// fieldsOf returns the members struct type t decodes, by encoding/json's
// rules: exported fields, named by their json tag or else their Go name,
// those of embedded structs promoted, and of two of the same name the
// shallower, or at the same depth the tagged one (neither when that does
// not settle it).
func fieldsOf(t reflect.Type) fields {
	if fs, ok := fieldCache.Load(t); ok {
		return fs.(fields)
	}
	type level struct {
		typ   reflect.Type
		index []int
	}
	var all fields
	seen := map[reflect.Type]bool{}
	for next := []level{{typ: t}}; len(next) > 0; {
		current := next
		next = nil
		for _, l := range current {
			if seen[l.typ] {
				continue
			}
			seen[l.typ] = true
			for i := range l.typ.NumField() {
				sf := l.typ.Field(i)
				ft := sf.Type
				if sf.Anonymous {
					if ft.Kind() == reflect.Pointer {
						ft = ft.Elem()
					}
					if !sf.IsExported() && ft.Kind() != reflect.Struct {
						continue
					}
				} else if !sf.IsExported() {
					continue
				}
				tag := sf.Tag.Get("json")
				if tag == "-" {
					continue
				}
				name, opts, _ := strings.Cut(tag, ",")
				index := append(slices.Clone(l.index), i)
				if name == "" && sf.Anonymous && ft.Kind() == reflect.Struct {
					next = append(next, level{typ: ft, index: index})
					continue
				}
				tagged := name != ""
				if !tagged {
					name = sf.Name
				}
				quoted := false
				for o := range strings.SplitSeq(opts, ",") {
					quoted = quoted || o == "string"
				}
				all = append(all, field{name: name, typ: sf.Type, quoted: quoted, index: index, tagged: tagged})
			}
		}
	}
	// The dominant field of each name: the shallowest, then the tagged.
	var out fields
	for i, f := range all {
		dominant := true
		for j, g := range all {
			if i == j || g.name != f.name {
				continue
			}
			switch {
			case len(g.index) < len(f.index):
				dominant = false
			case len(g.index) == len(f.index) && (g.tagged == f.tagged || g.tagged):
				dominant = false
			}
		}
		if dominant {
			out = append(out, f)
		}
	}
	slices.SortStableFunc(out, func(a, b field) int { return slices.Compare(a.index, b.index) })
	fieldCache.Store(t, out)
	return out
}
