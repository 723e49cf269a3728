package jsonfield

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

type item struct {
	Name  string   `json:"name"`
	Count int      `json:"count"`
	Tags  []string `json:"tags"`
}

type sample struct {
	Model    string          `json:"model"`
	Max      int             `json:"max_tokens"`
	Small    uint8           `json:"small"`
	Temp     *float64        `json:"temperature"`
	Stream   bool            `json:"stream"`
	Items    []item          `json:"items"`
	Pair     [2]int          `json:"pair"`
	Inner    *item           `json:"inner"`
	Raw      json.RawMessage `json:"raw"`
	Any      any             `json:"any"`
	Bytes    []byte          `json:"bytes"`
	When     time.Time       `json:"when"`
	Skipped  int             `json:"-"`
	Untagged string
}

// base is embedded, as the decoders of types with their own UnmarshalJSON
// embed a method-less copy of the type.
type base struct {
	Model string `json:"model"`
	Max   int    `json:"max_tokens"`
}

type embedding struct {
	base
	Items []item          `json:"items"`
	Meta  map[string]item `json:"meta"`
}

// custom decodes a string as a name, and an object through Unmarshal; an
// object must name its item, and may not count below zero.
type custom struct {
	Name string
	Item item
}

func (c *custom) UnmarshalJSON(data []byte) error {
	if len(data) > 0 && data[0] == '"' {
		return json.Unmarshal(data, &c.Name)
	}
	if err := Unmarshal(data, &c.Item); err != nil {
		return err
	}
	switch {
	case c.Item.Name == "":
		return Required("name")
	case c.Item.Count < 0:
		return &FieldError{Path: "count", Problem: "must be 0 or more"}
	}
	return nil
}

type holder struct {
	Tools []custom `json:"tools"`
}

func TestUnmarshalNamesTheField(t *testing.T) {
	tests := []struct {
		name string
		into func() any
		body string
		want string
	}{
		{"an integer", func() any { return new(sample) }, `{"max_tokens":"5"}`, "max_tokens: must be an integer"},
		{"a fraction for an integer", func() any { return new(sample) }, `{"max_tokens":1.5}`, "max_tokens: must be an integer"},
		{"an integer out of range", func() any { return new(sample) }, `{"small":300}`, "small: must be an integer from 0 to 255"},
		{"a negative integer for a count", func() any { return new(sample) }, `{"small":-1}`, "small: must be an integer of 0 or more"},
		{"an integer past int64", func() any { return new(sample) }, `{"max_tokens":9223372036854775808}`, "max_tokens: must be an integer from -9223372036854775808 to 9223372036854775807"},
		{"a string", func() any { return new(sample) }, `{"model":5}`, "model: must be a string"},
		{"a number", func() any { return new(sample) }, `{"temperature":"hot"}`, "temperature: must be a number"},
		{"a boolean", func() any { return new(sample) }, `{"stream":"yes"}`, "stream: must be true or false"},
		{"an array", func() any { return new(sample) }, `{"items":{}}`, "items: must be an array"},
		{"an object in an array", func() any { return new(sample) }, `{"items":[{"name":"a"},"b"]}`, "items.1: must be an object"},
		{"a field in an array", func() any { return new(sample) }, `{"items":[{"name":"a"},{"name":"b","tags":["x",2]}]}`, "items.1.tags.1: must be a string"},
		{"a fixed array", func() any { return new(sample) }, `{"pair":[1,"2"]}`, "pair.1: must be an integer"},
		{"a pointer to an object", func() any { return new(sample) }, `{"inner":{"count":true}}`, "inner.count: must be an integer"},
		{"a key in other case", func() any { return new(sample) }, `{"MAX_TOKENS":"x"}`, "MAX_TOKENS: must be an integer"},
		{"an untagged field", func() any { return new(sample) }, `{"Untagged":1}`, "Untagged: must be a string"},
		{"the first of two", func() any { return new(sample) }, `{"model":1,"max_tokens":"x"}`, "model: must be a string"},
		{"not an object", func() any { return new(sample) }, `[]`, "must be an object"},
		{"an embedded struct's field", func() any { return new(embedding) }, `{"max_tokens":"5"}`, "max_tokens: must be an integer"},
		{"a map's value", func() any { return new(embedding) }, `{"meta":{"a.b":{"count":"1"}}}`, "meta.a.b.count: must be an integer"},
		{"within an UnmarshalJSON method", func() any { return new(holder) }, `{"tools":["a",{"name":"b","count":"x"}]}`, "tools.1.count: must be an integer"},
		{"a member an UnmarshalJSON method requires", func() any { return new(holder) }, `{"tools":["a",{"count":1}]}`, "tools.1.name: required"},
		{"a value an UnmarshalJSON method refuses", func() any { return new(holder) }, `{"tools":[{"name":"a","count":-1}]}`, "tools.0.count: must be 0 or more"},
		{"a refusal after a type error", func() any { return new(holder) }, `{"tools":[{"name":"a","count":"x"},{"count":1}]}`, "tools.0.count: must be an integer"},
		{"an escaped key", func() any { return new(sample) }, `{"m\u006fdel":[]}`, "model: must be a string"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := Unmarshal([]byte(tc.body), tc.into())
			te, ok := errors.AsType[*FieldError](err)
			if !ok || err.Error() != tc.want {
				t.Fatalf("%s: %v (%T), want %q", tc.body, err, err, tc.want)
			}
			if te.Path == "" && te.Problem == "" && tc.want != "must be "+te.Want {
				t.Fatalf("%s: root error %+v", tc.body, te)
			}
		})
	}
}

// TestUnmarshalIsEncodingJSON: what is no type error is json.Unmarshal's,
// decoded value and error alike.
func TestUnmarshalIsEncodingJSON(t *testing.T) {
	for _, body := range []string{
		`{"model":"m","max_tokens":5,"items":[{"name":"a","tags":["x"]}],"pair":[1,2,3],"raw":{"a":1},"any":[1,"x"],"bytes":"aGk=","unknown":1,"Skipped":"x"}`,
		`{"model":null,"items":null,"inner":null,"temperature":null}`,
		`{"model":"m"`, `not json`, ``, `{"bytes":"%%%"}`, `{"when":"yesterday"}`,
	} {
		var got, want sample
		gerr := Unmarshal([]byte(body), &got)
		werr := json.Unmarshal([]byte(body), &want)
		if (gerr == nil) != (werr == nil) || gerr != nil && gerr.Error() != werr.Error() || !reflect.DeepEqual(got, want) {
			t.Errorf("%s: %+v, %v; encoding/json %+v, %v", body, got, gerr, want, werr)
		}
	}
}

// FuzzUnmarshalMatchesEncodingJSON: whatever the bytes, Unmarshal decodes
// what json.Unmarshal decodes, fails when it fails, and where it reports
// a value of the wrong type, reports the same value: its path is
// encoding/json's field path once the array indices are left out.
func FuzzUnmarshalMatchesEncodingJSON(f *testing.F) {
	for _, s := range []string{
		`{"model":"m","max_tokens":5,"items":[{"name":"a","tags":["x"]}]}`,
		`{"max_tokens":"5"}`, `{"items":[{},{"count":"1"}]}`, `{"inner":{"tags":[1]}}`,
		`{"pair":[1,"x"]}`, `{"Model":1}`, `{"small":-1}`, `{"temperature":1e999}`,
		`[]`, `null`, `"x"`, `{"when":5}`, `{"bytes":[1,2]}`, `{"bytes":{}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var got, want sample
		gerr := Unmarshal(data, &got)
		werr := json.Unmarshal(data, &want)
		if (gerr == nil) != (werr == nil) {
			t.Fatalf("%q: %v, encoding/json %v", data, gerr, werr)
		}
		if werr == nil {
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("%q: %+v, encoding/json %+v", data, got, want)
			}
			return
		}
		ue, ok := errors.AsType[*json.UnmarshalTypeError](werr)
		if !ok {
			if gerr.Error() != werr.Error() {
				t.Fatalf("%q: %v, encoding/json %v", data, gerr, werr)
			}
			return
		}
		te, ok := errors.AsType[*FieldError](gerr)
		if !ok {
			t.Fatalf("%q: %v (%T), encoding/json %v", data, gerr, gerr, werr)
		}
		var named []string
		for seg := range strings.SplitSeq(te.Path, ".") {
			if seg != "" && strings.Trim(seg, "0123456789") != "" {
				named = append(named, seg)
			}
		}
		if !strings.EqualFold(strings.Join(named, "."), ue.Field) {
			t.Fatalf("%q: path %q, encoding/json's field %q", data, te.Path, ue.Field)
		}
	})
}
