package testkit

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"
)

// Response is an HTTP answer, its body read whole.
type Response struct {
	Code   int
	Header http.Header
	Body   []byte
}

// RequestTimeout bounds one request of HTTP, Do, ScrapeLine and each
// attempt of WaitHTTP: a listener that accepts but never answers fails
// the test instead of hanging it.
const RequestTimeout = 30 * time.Second

// client is the kit's HTTP client: the default transport, RequestTimeout.
var client = &http.Client{Timeout: RequestTimeout}

// HTTP sends a request (body may be nil; hdr: headers to set, e.g.
// "Authorization") and reads the answer whole, within RequestTimeout. A
// request that cannot be made or sent fails the test.
func HTTP(t testing.TB, method, url string, body []byte, hdr map[string]string) Response {
	t.Helper()
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	return Do(t, req)
}

// Do sends req and reads the answer whole, within RequestTimeout; a
// request that fails to be sent fails the test.
func Do(t testing.TB, req *http.Request) Response {
	t.Helper()
	res, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("%s %s: reading the answer: %v", req.Method, req.URL, err)
	}
	return Response{Code: res.StatusCode, Header: res.Header, Body: raw}
}

// WaitHTTP polls GET url until it answers 200 OK, for at most timeout
// (each attempt bounded by what is left of it); the error says what the
// last attempt got.
func WaitHTTP(url string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		c := http.Client{Timeout: max(time.Until(deadline), 10*time.Millisecond)}
		res, err := c.Get(url)
		if err == nil {
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("GET %s: %s", url, res.Status)
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
}
