package tocsin

import (
	"bytes"
	"encoding"
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"unicode/utf8"
)

// encoding/json writes a string's invalid UTF-8 as the escape \ufffd (U+FFFD): "caf\xe9"
// would be stored as "caf\ufffd", silently altered. Texts must be valid UTF-8
// (docs/sql.md), so such a value is refused, as the core refuses a text that is not
// valid UTF-8, and nothing is written.
var replacementEscape = []byte(`\ufffd`)

var (
	jsonMarshalerType = reflect.TypeFor[json.Marshaler]()
	textMarshalerType = reflect.TypeFor[encoding.TextMarshaler]()
)

// checkUTF8 refuses (ErrInvalid naming what) a value v whose JSON text b came out of
// encoding/json with a string it had to alter. A valid U+FFFD is written as is, never as
// the escape, so only a text holding the escape needs a look at v: the escape may also
// be JSON a json.Marshaler (a json.RawMessage) wrote itself, which is kept.
func checkUTF8(b []byte, v any, what string) error {
	if !bytes.Contains(b, replacementEscape) {
		return nil
	}
	path, bad, found := findBadUTF8(reflect.ValueOf(v), "", 0)
	if !found {
		return nil
	}
	if len(bad) > 64 {
		bad = bad[:64] + "..."
	}
	where := ""
	if path != "" {
		where = " at " + path
	}
	return newErr(ErrInvalid, what, fmt.Sprintf("text%s is not valid UTF-8: %q (encoding/json would store it altered, "+
		"with U+FFFD; texts must be valid UTF-8)", where, bad))
}

// findBadUTF8 walks v as encoding/json encodes it and gives the first string (or map
// key, or MarshalText result) that is not valid UTF-8, and where it is.
func findBadUTF8(v reflect.Value, path string, depth int) (string, string, bool) {
	if !v.IsValid() || depth > 10000 {
		return "", "", false
	}
	t := v.Type()
	if (v.Kind() == reflect.Pointer || v.Kind() == reflect.Interface) && v.IsNil() {
		return "", "", false
	}
	// a json.Marshaler writes its own JSON (its invalid UTF-8, if any, reaches the core,
	// which refuses it)
	if t.Implements(jsonMarshalerType) || (v.CanAddr() && reflect.PointerTo(t).Implements(jsonMarshalerType)) {
		return "", "", false
	}
	if t.Implements(textMarshalerType) || (v.CanAddr() && reflect.PointerTo(t).Implements(textMarshalerType)) {
		if v.Kind() != reflect.Pointer && !t.Implements(textMarshalerType) {
			v = v.Addr()
		}
		if !v.CanInterface() {
			return "", "", false
		}
		text, err := v.Interface().(encoding.TextMarshaler).MarshalText()
		if err == nil && !utf8.Valid(text) {
			return path, string(text), true
		}
		return "", "", false
	}
	switch v.Kind() {
	case reflect.String:
		if !utf8.ValidString(v.String()) {
			return path, v.String(), true
		}
	case reflect.Pointer, reflect.Interface:
		return findBadUTF8(v.Elem(), path, depth+1)
	case reflect.Struct:
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			if (!f.IsExported() && !f.Anonymous) || f.Tag.Get("json") == "-" {
				continue
			}
			if p, s, ok := findBadUTF8(v.Field(i), path+"."+f.Name, depth+1); ok {
				return p, s, true
			}
		}
	case reflect.Map:
		it := v.MapRange()
		for it.Next() {
			k := it.Key()
			kp := path + "[...]"
			if k.CanInterface() {
				kp = path + "[" + fmt.Sprint(k.Interface()) + "]"
			}
			if k.Kind() == reflect.String {
				kp = path + "[" + strconv.QuoteToASCII(k.String()) + "]"
				if !utf8.ValidString(k.String()) {
					return kp + " (a key)", k.String(), true
				}
			} else if k.CanInterface() && k.Type().Implements(textMarshalerType) {
				if text, err := k.Interface().(encoding.TextMarshaler).MarshalText(); err == nil && !utf8.Valid(text) {
					return kp + " (a key)", string(text), true
				}
			}
			if p, s, ok := findBadUTF8(it.Value(), kp, depth+1); ok {
				return p, s, true
			}
		}
	case reflect.Slice, reflect.Array:
		if t.Elem().Kind() == reflect.Uint8 && v.Kind() == reflect.Slice {
			return "", "", false // []byte: base64
		}
		for i := 0; i < v.Len(); i++ {
			if p, s, ok := findBadUTF8(v.Index(i), path+"["+strconv.Itoa(i)+"]", depth+1); ok {
				return p, s, true
			}
		}
	}
	return "", "", false
}
