package tenants

import "github.com/sluice-dev/sluice/webhook"

// VerifyOf is the record form of a scheme's fields (config.VerifyFields,
// the file's reading), the inverse of Verify's reading: a custom scheme
// (a "type") is recorded under its type, its name staying a parameter; a
// preset under its name, the other fields as parameters overriding it.
func VerifyOf(fields map[string]string) Verify {
	v := Verify{Params: map[string]string{}}
	for k, val := range fields {
		v.Params[k] = val
	}
	if t := fields["type"]; webhook.IsSchemeType(t) {
		v.Scheme = t
		delete(v.Params, "type")
	} else {
		v.Scheme = fields["name"]
		delete(v.Params, "name")
	}
	if len(v.Params) == 0 {
		v.Params = nil
	}
	return v
}
