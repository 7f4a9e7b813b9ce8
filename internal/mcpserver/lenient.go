package mcpserver

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"

	"github.com/google/jsonschema-go/jsonschema"
)

// Int is an integer argument that also takes its decimal string ("5000"):
// some clients (the MCP inspector's CLI among them) send every argument
// as a string.
type Int int64

// UnmarshalJSON takes a JSON number or a string holding one.
func (n *Int) UnmarshalJSON(b []byte) error {
	var v int64
	if err := json.Unmarshal(b, &v); err == nil {
		*n = Int(v)
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("want an integer, got %s", b)
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return fmt.Errorf("want an integer, got %q", s)
	}
	*n = Int(v)
	return nil
}

// Bool is a boolean argument that also takes "true" and "false".
type Bool bool

// UnmarshalJSON takes a JSON boolean or a string holding one.
func (v *Bool) UnmarshalJSON(b []byte) error {
	var x bool
	if err := json.Unmarshal(b, &x); err == nil {
		*v = Bool(x)
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		if x, err := strconv.ParseBool(s); err == nil {
			*v = Bool(x)
			return nil
		}
	}
	return fmt.Errorf("want true or false, got %s", b)
}

// inputSchema is the schema of In, with Int and Bool fields taking their
// string forms too.
func inputSchema[In any]() *jsonschema.Schema {
	s, err := jsonschema.For[In](&jsonschema.ForOptions{TypeSchemas: map[reflect.Type]*jsonschema.Schema{
		reflect.TypeFor[Int]():   {Types: []string{"integer", "string"}, Pattern: `^-?[0-9]+$`},
		reflect.TypeFor[Bool]():  {Types: []string{"boolean", "string"}, Enum: []any{true, false, "true", "false"}},
		reflect.TypeFor[Float](): {Types: []string{"number", "string"}},
	}})
	if err != nil {
		panic(err)
	}
	return s
}

// Float is a number argument that also takes its decimal string ("0.5").
type Float float64

// UnmarshalJSON takes a JSON number or a string holding one.
func (f *Float) UnmarshalJSON(b []byte) error {
	var v float64
	if err := json.Unmarshal(b, &v); err == nil {
		*f = Float(v)
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("want a number, got %s", b)
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return fmt.Errorf("want a number, got %q", s)
	}
	*f = Float(v)
	return nil
}
