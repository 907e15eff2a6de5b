// Package publish builds the Kafka records a producer sends to Streaming Hub: the topic
// `lerian.streaming.<source>` and the CloudEvents headers of SPEC §1, from typed fields, refusing
// what the hub would quarantine. It uses no Kafka client: hand the Record to yours.
//
//	record, err := publish.Event{
//		Source:        "lender",
//		ResourceType:  "loan_application",
//		EventType:     "approved",
//		TenantID:      "acme",
//		SchemaVersion: "1.0.0",
//		Subject:       "loan-42",
//		Data:          []byte(`{"amount":100}`),
//	}.Record(time.Now())
//	if err != nil { /* err.(*publish.Error).Header names the field */ }
//	// franz-go: kgo.Record{Topic: record.Topic, Value: record.Value, Headers: ...}
//
// The id is the deduplication key: keep the Record (or its ID) and send the same one again on a
// retry, and the hub stores the event once.
package publish

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Limits of SPEC §1.2, as the hub enforces them.
const (
	MaxBodyBytes     = 1 << 20
	MaxSourceBytes   = 223
	MaxKeyPartBytes  = 128
	MaxTenantBytes   = 256
	MaxSubjectBytes  = 1024
	MaxSchemaVersion = 64
	MaxOtherHeader   = 4096
	MaxJSONDepth     = 64
	MaxExtensionName = 20
)

// Event is one event as a producer describes it.
type Event struct {
	// Source is the producing application: the topic is lerian.streaming.<Source>.
	Source       string
	ResourceType string
	EventType    string
	TenantID     string
	// SchemaVersion is the body's semantic version, such as 1.0.0.
	SchemaVersion string
	// ID is a UUIDv7; empty for a new one. Reuse it when sending the same event again.
	ID string
	// Time is when the fact happened; zero for the time given to Record.
	Time            time.Time
	Subject         string
	DataContentType string
	DataSchema      string
	Data            []byte
	// Traceparent and Tracestate carry a W3C trace context through to the deliveries.
	Traceparent string
	Tracestate  string
	// Extensions are further CloudEvents attributes: lowercase letters and digits, 1 to 20.
	Extensions map[string]string
}

// Header is one Kafka record header.
type Header struct {
	Key   string
	Value []byte
}

// Record is what to send: the topic, the headers and the value.
type Record struct {
	Topic   string
	ID      string
	Headers []Header
	Value   []byte
}

// Error names the header (or `body`) the hub would quarantine the event for.
type Error struct {
	Header  string
	Message string
}

func (e *Error) Error() string { return e.Header + ": " + e.Message }

func refuse(header, format string, args ...any) error {
	return &Error{Header: header, Message: fmt.Sprintf(format, args...)}
}

var (
	sourcePattern = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]*$`)
	keyPattern    = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]*$`)
	tenantPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)
	// semver.org's pattern.
	semverPattern = regexp.MustCompile(`^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)` +
		`(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?` +
		`(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?$`)
	traceparentPattern = regexp.MustCompile(`^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$`)
	known              = map[string]bool{
		"specversion": true, "id": true, "source": true, "type": true, "time": true, "schemaversion": true,
		"resourcetype": true, "eventtype": true, "tenantid": true, "subject": true, "datacontenttype": true,
		"dataschema": true, "systemevent": true,
	}
)

// text checks what every header value must be: valid UTF-8 without control characters.
func text(header, value string) error {
	if !utf8.ValidString(value) {
		return refuse(header, "must be valid UTF-8")
	}
	for _, r := range value {
		if unicode.IsControl(r) {
			return refuse(header, "must not contain control characters")
		}
	}
	return nil
}

func bounded(header, value string, max int) error {
	if value == "" {
		return refuse(header, "must not be empty")
	}
	if len(value) > max {
		return refuse(header, "must be at most %d bytes (got %d)", max, len(value))
	}
	return text(header, value)
}

// Record validates the event as the hub judges it and builds its Kafka record; now stands for a
// zero Time.
func (e Event) Record(now time.Time) (Record, error) {
	if err := bounded("ce-source", e.Source, MaxSourceBytes); err != nil {
		return Record{}, err
	}
	if !sourcePattern.MatchString(e.Source) {
		return Record{}, refuse("ce-source", "must match %s", sourcePattern)
	}
	for _, part := range []struct{ header, value string }{
		{"ce-resourcetype", e.ResourceType}, {"ce-eventtype", e.EventType},
	} {
		if err := bounded(part.header, part.value, MaxKeyPartBytes); err != nil {
			return Record{}, err
		}
		if !keyPattern.MatchString(part.value) {
			return Record{}, refuse(part.header, "must match %s", keyPattern)
		}
	}
	if e.ResourceType == "streaming_hub" {
		return Record{}, refuse("ce-resourcetype", "streaming_hub is reserved for the hub's own operational events")
	}
	if err := bounded("ce-tenantid", e.TenantID, MaxTenantBytes); err != nil {
		return Record{}, err
	}
	if !tenantPattern.MatchString(e.TenantID) || strings.Contains(e.TenantID, "..") {
		return Record{}, refuse("ce-tenantid", "must match %s without \"..\"", tenantPattern)
	}
	if err := bounded("ce-schemaversion", e.SchemaVersion, MaxSchemaVersion); err != nil {
		return Record{}, err
	}
	if !semverPattern.MatchString(e.SchemaVersion) {
		return Record{}, refuse("ce-schemaversion", "must be a semantic version such as 1.0.0")
	}
	id := e.ID
	if id == "" {
		id = NewID(now)
	} else {
		normal, err := parseV7(id)
		if err != nil {
			return Record{}, err
		}
		id = normal
	}
	when := e.Time
	if when.IsZero() {
		when = now
	}
	headers := []Header{
		{"ce-specversion", []byte("1.0")},
		{"ce-id", []byte(id)},
		{"ce-source", []byte(e.Source)},
		{"ce-type", []byte("studio.lerian." + e.Source + "." + e.ResourceType + "." + e.EventType)},
		{"ce-time", []byte(when.UTC().Format(time.RFC3339Nano))},
		{"ce-schemaversion", []byte(e.SchemaVersion)},
		{"ce-resourcetype", []byte(e.ResourceType)},
		{"ce-eventtype", []byte(e.EventType)},
		{"ce-tenantid", []byte(e.TenantID)},
	}
	optional := []struct {
		header, value string
		max           int
	}{
		{"ce-subject", e.Subject, MaxSubjectBytes},
		{"ce-datacontenttype", e.DataContentType, MaxOtherHeader},
		{"ce-dataschema", e.DataSchema, MaxOtherHeader},
	}
	for _, o := range optional {
		if o.value == "" {
			continue
		}
		if err := bounded(o.header, o.value, o.max); err != nil {
			return Record{}, err
		}
		headers = append(headers, Header{o.header, []byte(o.value)})
	}
	if e.DataSchema != "" {
		if u, err := url.Parse(e.DataSchema); err != nil || u.Scheme == "" {
			return Record{}, refuse("ce-dataschema", "must be an absolute URI")
		}
	}
	if e.Traceparent != "" {
		if !traceparentPattern.MatchString(e.Traceparent) || strings.HasPrefix(e.Traceparent, "ff-") {
			return Record{}, refuse("traceparent", "must be a W3C traceparent (00-<32 hex>-<16 hex>-<2 hex>)")
		}
		headers = append(headers, Header{"traceparent", []byte(e.Traceparent)})
		if e.Tracestate != "" {
			if err := bounded("tracestate", e.Tracestate, MaxOtherHeader); err != nil {
				return Record{}, err
			}
			headers = append(headers, Header{"tracestate", []byte(e.Tracestate)})
		}
	}
	for name, value := range e.Extensions {
		header := "ce-" + name
		if name == "" || len(name) > MaxExtensionName || strings.TrimFunc(name, isLowerAlnum) != "" {
			return Record{}, refuse(header, "extension attribute names are 1 to 20 lowercase letters or digits")
		}
		if known[name] {
			return Record{}, refuse(header, "is a CloudEvents attribute of its own; set its field")
		}
		if err := bounded(header, value, MaxOtherHeader); err != nil {
			return Record{}, err
		}
		headers = append(headers, Header{header, []byte(value)})
	}
	if err := checkBody(e.DataContentType, e.Data); err != nil {
		return Record{}, err
	}
	return Record{Topic: "lerian.streaming." + e.Source, ID: id, Headers: headers, Value: e.Data}, nil
}

func isLowerAlnum(r rune) bool { return (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') }

// IsJSON says whether a content type is JSON as the hub reads it (absent means JSON).
func IsJSON(contentType string) bool {
	if contentType == "" {
		return true
	}
	essence := strings.TrimSpace(strings.SplitN(contentType, ";", 2)[0])
	lower := strings.ToLower(essence)
	return lower == "application/json" || lower == "text/json" || (len(essence) > 5 && strings.HasSuffix(lower, "+json"))
}

func checkBody(contentType string, body []byte) error {
	if len(body) > MaxBodyBytes {
		return refuse("body", "must be at most %d bytes (got %d)", MaxBodyBytes, len(body))
	}
	if !IsJSON(contentType) {
		return nil
	}
	if !utf8.Valid(body) || !json.Valid(body) {
		return refuse("body", "must be valid JSON for content type %s", orJSON(contentType))
	}
	if nestsDeeperThan(body, MaxJSONDepth) {
		return refuse("body", "must nest arrays and objects at most %d levels deep", MaxJSONDepth)
	}
	return nil
}

func orJSON(contentType string) string {
	if contentType == "" {
		return "application/json"
	}
	return contentType
}

// nestsDeeperThan scans valid JSON for arrays and objects nested more than max levels.
func nestsDeeperThan(body []byte, max int) bool {
	depth, inString, escaped := 0, false, false
	for _, b := range body {
		switch {
		case inString && escaped:
			escaped = false
		case inString && b == '\\':
			escaped = true
		case b == '"':
			inString = !inString
		case !inString && (b == '[' || b == '{'):
			depth++
			if depth > max {
				return true
			}
		case !inString && (b == ']' || b == '}'):
			depth--
		}
	}
	return false
}

// NewID returns a new UUIDv7 for an event that happened at t.
func NewID(t time.Time) string {
	var u [16]byte
	ms := uint64(t.UnixMilli())
	binary.BigEndian.PutUint64(u[0:8], ms<<16)
	if _, err := rand.Read(u[6:]); err != nil {
		panic("crypto/rand: " + err.Error())
	}
	u[6] = 0x70 | (u[6] & 0x0f)
	u[8] = 0x80 | (u[8] & 0x3f)
	return format(u)
}

func format(u [16]byte) string {
	h := hex.EncodeToString(u[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

// parseV7 reads a UUID in any of the forms the hub reads (hyphenated, simple, braced, URN) and
// requires the RFC 9562 variant and version 7; it returns the hyphenated form.
func parseV7(s string) (string, error) {
	t := s
	switch {
	case strings.HasPrefix(strings.ToLower(t), "urn:uuid:"):
		t = t[len("urn:uuid:"):]
	case strings.HasPrefix(t, "{") && strings.HasSuffix(t, "}"):
		t = t[1 : len(t)-1]
	}
	var raw string
	switch len(t) {
	case 32:
		raw = t
	case 36:
		if t[8] != '-' || t[13] != '-' || t[18] != '-' || t[23] != '-' {
			return "", refuse("ce-id", "must be a UUID")
		}
		raw = t[0:8] + t[9:13] + t[14:18] + t[19:23] + t[24:36]
	default:
		return "", refuse("ce-id", "must be a UUID")
	}
	b, err := hex.DecodeString(raw)
	if err != nil {
		return "", refuse("ce-id", "must be a UUID")
	}
	var u [16]byte
	copy(u[:], b)
	if u[8]&0xc0 != 0x80 {
		return "", refuse("ce-id", "must be a UUID")
	}
	if v := u[6] >> 4; v != 7 {
		return "", refuse("ce-id", "must be a UUIDv7 (got version %d)", v)
	}
	return format(u), nil
}
