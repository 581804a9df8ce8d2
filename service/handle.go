package service

// The shape every endpoint shares: the body decoded strictly into its
// request type and checked, then the dependency's answer.

// decode decodes data strictly into a Req and checks it (the request's
// Validate, or the endpoint's own checks).
func decode[Req any](data []byte, check func(*Req) error) (Req, error) {
	var req Req
	if err := decodeStrict(data, &req); err != nil {
		return req, err
	}
	return req, check(&req)
}

// handle is an endpoint's body: data decoded and checked as by decode,
// then do's reply.
func handle[Req any](data []byte, check func(*Req) error, do func(*Req) (any, error)) (any, error) {
	req, err := decode(data, check)
	if err != nil {
		return nil, err
	}
	return do(&req)
}

// okOr is the reply of an operation whose only result is an error:
// {"ok":true}, or the error.
func okOr(err error) (any, error) {
	if err != nil {
		return nil, err
	}
	return okResult, nil
}

// replyOr is the reply of an operation whose result is the reply: rep, or
// the error.
func replyOr[R any](rep R, err error) (any, error) {
	if err != nil {
		return nil, err
	}
	return rep, nil
}
