package events

import (
	"encoding/json"
	"strconv"

	"github.com/sluice-dev/sluice/protocol"
)

// appendLifecycleJSON appends e exactly as json.Marshal encodes it, without
// reflection (json.Marshal was 5% of a node's CPU in the durable claim
// cycle). A string that needs escaping, or a time outside RFC 3339's range,
// goes through json.Marshal itself.
func appendLifecycleJSON(b []byte, e *protocol.Lifecycle) ([]byte, error) {
	b = append(b, `{"tenant":`...)
	b = appendString(b, e.Tenant)
	b = append(b, `,"source":`...)
	b = appendString(b, e.Source)
	b = append(b, `,"key":`...)
	b = appendString(b, e.Key)
	b = append(b, `,"hook_id":`...)
	b = appendString(b, e.HookID)
	b = append(b, `,"at":`...)
	if _, off := e.At.Zone(); e.At.Year() < 0 || e.At.Year() > 9999 || off <= -24*3600 || off >= 24*3600 {
		at, err := json.Marshal(e.At) // its error: out of RFC 3339's range
		if err != nil {
			return b, err
		}
		b = append(b, at...)
	} else {
		b = append(b, '"')
		b = e.At.AppendFormat(b, timeFormat)
		b = append(b, '"')
	}
	if e.Revision != 0 {
		b = append(b, `,"revision":`...)
		b = strconv.AppendUint(b, e.Revision, 10)
	}
	b = appendOmitEmpty(b, `,"kind":`, e.Kind)
	if e.RetryAfterMs != 0 {
		b = append(b, `,"retry_after_ms":`...)
		b = strconv.AppendInt(b, e.RetryAfterMs, 10)
	}
	b = appendOmitEmpty(b, `,"reason":`, e.Reason)
	b = appendOmitEmpty(b, `,"hub_hook_id":`, e.HubHookID)
	return append(b, '}'), nil
}

// appendOmitEmpty appends member (`,"name":`) and s unless s is empty (an
// omitempty string).
func appendOmitEmpty(b []byte, member, s string) []byte {
	if s == "" {
		return b
	}
	return appendString(append(b, member...), s)
}

// timeFormat is time.Time.MarshalJSON's layout.
const timeFormat = "2006-01-02T15:04:05.999999999Z07:00"

// appendString appends s as a JSON string as json.Marshal does: as is when
// no byte of it needs escaping (printable ASCII but for '"', '\\' and the
// HTML characters json.Marshal escapes), else through json.Marshal.
func appendString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s) // a string always marshals
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}
