package wire

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/corral-dev/corral"
)

// filled is a corral.Result with every field set to a value that is not
// its zero (reflect over the type: a field added to corral.Result is
// filled too, and the round trip then fails until the wire carries it).
func filled(t *testing.T) *corral.Result {
	r := &corral.Result{}
	v := reflect.ValueOf(r).Elem()
	for i := 0; i < v.NumField(); i++ {
		f, name := v.Field(i), v.Type().Field(i).Name
		n := int64(i + 3) // distinct per field
		switch f.Interface().(type) {
		case time.Time:
			f.Set(reflect.ValueOf(time.Unix(1_700_000_000+n, 123456789)))
			continue
		case time.Duration:
			f.SetInt(n*int64(time.Millisecond) + 7)
			continue
		case corral.Outcome:
			f.SetString(string(corral.OutcomeTimeout))
			continue
		}
		switch f.Kind() {
		case reflect.String:
			f.SetString(name + " value")
		case reflect.Int, reflect.Int64:
			f.SetInt(n)
		case reflect.Bool:
			f.SetBool(true)
		case reflect.Slice:
			s := reflect.MakeSlice(f.Type(), 2, 2)
			s.Index(0).SetInt(n)
			s.Index(1).SetInt(n + 100)
			f.Set(s)
		case reflect.Pointer:
			p := reflect.New(f.Type().Elem())
			switch p.Elem().Kind() {
			case reflect.Int64:
				p.Elem().SetInt(n)
			case reflect.Float64:
				p.Elem().SetFloat(float64(n) + 0.25)
			default:
				t.Fatalf("field %s: a pointer to %v; teach filled about it", name, p.Elem().Kind())
			}
			f.Set(p)
		default:
			t.Fatalf("field %s of kind %v: teach filled about it", name, f.Kind())
		}
	}
	return r
}

// TestResultRoundTrip: every field of corral.Result survives FromResult,
// JSON on the wire, and Corral, with the session's cwd and the state's
// fate beside it.
func TestResultRoundTrip(t *testing.T) {
	want := filled(t)
	w := FromResult(want)
	w.Cwd, w.StateNotSaved = "/after", "disk full"
	b, err := json.Marshal(w)
	if err != nil {
		t.Fatal(err)
	}
	var back Result
	if err := Decode(b, &back); err != nil {
		t.Fatal(err)
	}
	if back.Cwd != "/after" || back.StateNotSaved != "disk full" {
		t.Errorf("cwd %q, state_not_saved %q", back.Cwd, back.StateNotSaved)
	}
	got := back.Corral()
	gv, wv := reflect.ValueOf(got).Elem(), reflect.ValueOf(want).Elem()
	for i := 0; i < wv.NumField(); i++ {
		name := wv.Type().Field(i).Name
		g, w := gv.Field(i).Interface(), wv.Field(i).Interface()
		if wt, ok := w.(time.Time); ok {
			if !g.(time.Time).Equal(wt) {
				t.Errorf("%s: got %v, want %v", name, g, w)
			}
			continue
		}
		if !reflect.DeepEqual(g, w) {
			t.Errorf("%s: got %#v, want %#v", name, g, w)
		}
	}
}

// TestResultRoundTripZero: a result of nothing (no output, nothing
// started, nothing measured) comes back as it went: FirstOutput -1, zero
// times, nil accounting.
func TestResultRoundTripZero(t *testing.T) {
	want := &corral.Result{Outcome: corral.OutcomeStartFailed, ExitCode: -1, FirstOutput: -1, Error: "no such file"}
	b, _ := json.Marshal(FromResult(want))
	var back Result
	if err := Decode(b, &back); err != nil {
		t.Fatal(err)
	}
	if got := back.Corral(); !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
}

// TestErrorKinds: every kind is its own error for errors.Is, through
// wrapping too, and an unknown kind is internal.
func TestErrorKinds(t *testing.T) {
	seen := map[error]Kind{}
	for _, k := range Kinds() {
		e := error(&Error{Kind: k, Message: "m"})
		target := kindErr[k]
		if !errors.Is(e, target) || !errors.Is(fmt.Errorf("call: %w", e), target) {
			t.Errorf("%s is not %v", k, target)
		}
		if other, dup := seen[target]; dup {
			t.Errorf("%s and %s map to one error", k, other)
		}
		seen[target] = k
	}
	if e := (&Error{Kind: "from_the_future"}); !errors.Is(e, ErrInternal) || errors.Is(e, ErrNotFound) {
		t.Errorf("an unknown kind: %v", e)
	}
}
