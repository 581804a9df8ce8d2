package testkit

// Must turns a constructor's (value, error) into the value, failing the
// test on the error when the returned function is called:
//
//	m := testkit.Must(claims.NewMemory())(t)
//
// (Go passes a call's two results only as a function's whole argument
// list, hence the second call for t.)
func Must[V any](v V, err error) func(T) V {
	return func(t T) V {
		t.Helper()
		if err != nil {
			t.Fatalf("%v", err)
		}
		return v
	}
}
