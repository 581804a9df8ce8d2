package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"
)

// hookBody is the 1 KiB JSON body of every benchmark webhook.
var hookBody = func() []byte {
	const size = 1024
	head, tail := []byte(`{"event":"bench","pad":"`), []byte(`"}`)
	b := append([]byte{}, head...)
	b = append(b, bytes.Repeat([]byte("x"), size-len(head)-len(tail))...)
	return append(b, tail...)
}()

// httpClient is the load generator's client: keep-alive connections, one
// per request in flight.
func httpClient(inflight int) *http.Client {
	return &http.Client{
		Timeout: 10 * time.Second,
		Transport: &http.Transport{
			MaxIdleConns:        2 * inflight,
			MaxIdleConnsPerHost: 2 * inflight,
			IdleConnTimeout:     time.Minute,
			DisableCompression:  true,
			DialContext:         (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
		},
	}
}

// hookOp POSTs one webhook with a unique Idempotency-Key to base.
func hookOp(client *http.Client, base string, tenants int, keyPrefix string, errs *firstError) opFunc {
	names := tenantNames(tenants)
	urls := make([]string, len(names))
	for i, n := range names {
		urls[i] = base + "/v1/hooks/" + n + "/bench"
	}
	return func(ctx context.Context, seq uint64) outcome {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, urls[seq%uint64(len(urls))], bytes.NewReader(hookBody))
		if err != nil {
			errs.set(err)
			return outError
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", keyPrefix+strconv.FormatUint(seq, 36))
		res, err := client.Do(req)
		if err != nil {
			errs.set(err)
			return outError
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		switch res.StatusCode {
		case http.StatusAccepted:
			return outOK
		case http.StatusOK:
			return outDuplicate
		case http.StatusConflict:
			return outPending
		case http.StatusTooManyRequests:
			return outLimited
		}
		errs.set(fmt.Errorf("POST %s: %s", req.URL.Path, res.Status))
		return outError
	}
}

// startFloor runs the floor-server binary bin on a free port.
func startFloor(ctx context.Context, bin, dir string) (*child, string, error) {
	port, err := freePort()
	if err != nil {
		return nil, "", err
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	c, err := startChild("floor-server", bin, []string{"--data-dir", dir, "--http-addr", addr}, cleanEnv())
	if err != nil {
		return nil, "", err
	}
	rctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if err := c.waitHTTP(rctx, "http://"+addr+"/readyz"); err != nil {
		c.stop(5 * time.Second)
		return nil, "", err
	}
	return c, "http://" + addr, nil
}
