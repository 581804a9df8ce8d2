package testkit

// Must turns a constructor's (value, error) into the value, failing the
// test on the error; the second call takes t, as Go passes two results only
// as a whole argument list:
//
//	m := testkit.Must(claims.NewMemory())(t)
func Must[V any](v V, err error) func(T) V {
	return func(t T) V {
		t.Helper()
		if err != nil {
			t.Fatalf("%v", err)
		}
		return v
	}
}
