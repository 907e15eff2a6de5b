// Package receiver verifies and reads Streaming Hub deliveries: webhook signatures, the
// X-Lerian-* headers, and pull-consumer paging.
//
// Verify before parsing, on the raw body exactly as received:
//
//	body, _ := io.ReadAll(r.Body)
//	if err := receiver.Verify(secrets, r.Header, body, time.Now()); err != nil {
//		http.Error(w, "invalid signature", http.StatusUnauthorized)
//		return
//	}
//	delivery, err := receiver.ParseHeaders(r.Header)
//	// store the event durably (dedup by delivery.EventID), then answer 2xx
package receiver

import (
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// DefaultTolerance is how far a delivery's timestamp may be from now.
const DefaultTolerance = 5 * time.Minute

// VerificationEventType is the event type of the hub's verification probe.
const VerificationEventType = "streaming_hub.verification"

// Header names of the hub's scheme.
const (
	HeaderTimestamp      = "X-Webhook-Timestamp"
	HeaderSignature      = "X-Webhook-Signature"
	HeaderEventID        = "X-Lerian-Event-Id"
	HeaderDeliveryID     = "X-Lerian-Delivery-Id"
	HeaderEventType      = "X-Lerian-Event-Type"
	HeaderTenantID       = "X-Lerian-Tenant-Id"
	HeaderSubscriptionID = "X-Lerian-Subscription-Id"
	HeaderAttempt        = "X-Lerian-Attempt"
	HeaderSchemaVersion  = "X-Lerian-Schema-Version"
	HeaderEventTime      = "X-Lerian-Event-Time"
	HeaderSubject        = "X-Lerian-Subject"
	// The timestamp header of Standard Webhooks mode.
	headerStandardTimestamp = "Webhook-Timestamp"
	// The other headers of Standard Webhooks and ed25519 mode.
	HeaderWebhookID        = "Webhook-Id"
	HeaderWebhookTimestamp = "Webhook-Timestamp"
	HeaderWebhookSignature = "Webhook-Signature"
)

// Kind says why a delivery was refused.
type Kind string

const (
	MissingHeader       Kind = "missing_header"
	MalformedHeader     Kind = "malformed_header"
	TimestampTooOld     Kind = "timestamp_too_old"
	TimestampTooNew     Kind = "timestamp_too_new"
	NoMatchingSignature Kind = "no_matching_signature"
)

// Error is a refused delivery: its Kind, and the header at fault when there is one.
type Error struct {
	Kind   Kind
	Header string
}

func (e *Error) Error() string {
	if e.Header != "" {
		return fmt.Sprintf("streaming hub delivery: %s (%s)", e.Kind, e.Header)
	}
	return fmt.Sprintf("streaming hub delivery: %s", e.Kind)
}

// Is lets errors.Is match on the kind alone: errors.Is(err, &receiver.Error{Kind: receiver.TimestampTooOld}).
func (e *Error) Is(target error) bool {
	var t *Error
	return errors.As(target, &t) && t.Kind == e.Kind && (t.Header == "" || t.Header == e.Header)
}

// Options tune Verify; the zero value uses DefaultTolerance.
type Options struct {
	Tolerance time.Duration
}

// Verify checks a delivery with the default tolerance. secrets are the signing secrets the
// receiver accepts (during a rotation, both), each exactly as the API showed it.
func Verify(secrets []string, header http.Header, body []byte, now time.Time) error {
	return VerifyWith(secrets, header, body, now, Options{})
}

// VerifyWith checks a delivery: a single, numeric X-Webhook-Timestamp within the tolerance of
// now, and at least one X-Webhook-Signature value that matches one of the secrets. Every
// signature value is tried, including values a framework joined into one with commas.
func VerifyWith(secrets []string, header http.Header, body []byte, now time.Time, opts Options) error {
	tolerance := opts.Tolerance
	if tolerance <= 0 {
		tolerance = DefaultTolerance
	}
	raw, err := single(header, HeaderTimestamp)
	if err != nil {
		return err
	}
	timestamp, ok := unsigned(raw)
	if !ok {
		return &Error{Kind: MalformedHeader, Header: HeaderTimestamp}
	}
	signatures := header.Values(HeaderSignature)
	if len(signatures) == 0 {
		return &Error{Kind: MissingHeader, Header: HeaderSignature}
	}
	if err := withinTolerance(timestamp, now, tolerance, HeaderTimestamp); err != nil {
		return err
	}
	candidates := candidates(signatures)
	for _, secret := range secrets {
		expected := mac(secret, raw, body)
		for _, c := range candidates {
			if hmac.Equal(expected, c) {
				return nil
			}
		}
	}
	return &Error{Kind: NoMatchingSignature, Header: HeaderSignature}
}

func withinTolerance(timestamp int64, now time.Time, tolerance time.Duration, header string) error {
	limit := int64(tolerance / time.Second)
	switch age := now.Unix() - timestamp; {
	case age > limit:
		return &Error{Kind: TimestampTooOld, Header: header}
	case -age > limit:
		return &Error{Kind: TimestampTooNew, Header: header}
	}
	return nil
}

// VerifyEd25519 checks a delivery of an ed25519 webhook (sink.signature "ed25519") with the
// default tolerance: publicKeys are the subscription's public keys the receiver accepts
// ("whpk_<base64>", as the API showed them; during a rotation, both).
func VerifyEd25519(publicKeys []string, header http.Header, body []byte, now time.Time) error {
	return VerifyEd25519With(publicKeys, header, body, now, Options{})
}

// VerifyEd25519With checks a single Webhook-Id, a single, numeric Webhook-Timestamp within the
// tolerance of now, and at least one "v1a,<base64>" value of Webhook-Signature (space-separated)
// that is an ed25519 signature of "{id}.{timestamp}.{body}" by one of the keys.
func VerifyEd25519With(publicKeys []string, header http.Header, body []byte, now time.Time, opts Options) error {
	tolerance := opts.Tolerance
	if tolerance <= 0 {
		tolerance = DefaultTolerance
	}
	id, err := single(header, HeaderWebhookID)
	if err != nil {
		return err
	}
	raw, err := single(header, HeaderWebhookTimestamp)
	if err != nil {
		return err
	}
	timestamp, ok := unsigned(raw)
	if !ok {
		return &Error{Kind: MalformedHeader, Header: HeaderWebhookTimestamp}
	}
	signatures := header.Values(HeaderWebhookSignature)
	if len(signatures) == 0 {
		return &Error{Kind: MissingHeader, Header: HeaderWebhookSignature}
	}
	if err := withinTolerance(timestamp, now, tolerance, HeaderWebhookTimestamp); err != nil {
		return err
	}
	message := append([]byte(id+"."+raw+"."), body...)
	for _, value := range signatures {
		for _, token := range strings.Fields(value) {
			encoded, ok := strings.CutPrefix(token, "v1a,")
			if !ok {
				continue
			}
			signature, err := base64.StdEncoding.DecodeString(encoded)
			if err != nil || len(signature) != ed25519.SignatureSize {
				continue
			}
			for _, k := range publicKeys {
				key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(k, "whpk_"))
				if err == nil && len(key) == ed25519.PublicKeySize && ed25519.Verify(ed25519.PublicKey(key), message, signature) {
					return nil
				}
			}
		}
	}
	return &Error{Kind: NoMatchingSignature, Header: HeaderWebhookSignature}
}

// Sign returns the X-Webhook-Signature value the hub sends for a body at a timestamp; for tests
// of a receiver.
func Sign(secret string, timestamp int64, body []byte) string {
	return "v1,sha256=" + hex.EncodeToString(mac(secret, strconv.FormatInt(timestamp, 10), body))
}

func mac(secret, timestamp string, body []byte) []byte {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte("v1:" + timestamp + "."))
	m.Write(body)
	return m.Sum(nil)
}

// candidates reads every "v1,sha256=<hex>" out of the header values, which a framework may have
// joined with commas.
func candidates(values []string) [][]byte {
	var out [][]byte
	for _, value := range values {
		tokens := strings.Split(value, ",")
		for i := 0; i+1 < len(tokens); i++ {
			if strings.TrimSpace(tokens[i]) != "v1" {
				continue
			}
			hexed, ok := strings.CutPrefix(strings.TrimSpace(tokens[i+1]), "sha256=")
			if !ok || len(hexed) != 2*sha256.Size {
				continue
			}
			if decoded, err := hex.DecodeString(hexed); err == nil {
				out = append(out, decoded)
			}
		}
	}
	return out
}

func single(header http.Header, name string) (string, error) {
	values := header.Values(name)
	switch {
	case len(values) == 0:
		return "", &Error{Kind: MissingHeader, Header: name}
	case len(values) > 1 || values[0] == "":
		return "", &Error{Kind: MalformedHeader, Header: name}
	}
	return values[0], nil
}

func optional(header http.Header, name string) (*string, error) {
	values := header.Values(name)
	switch {
	case len(values) == 0:
		return nil, nil
	case len(values) > 1:
		return nil, &Error{Kind: MalformedHeader, Header: name}
	}
	return &values[0], nil
}

func unsigned(raw string) (int64, bool) {
	if raw == "" || strings.TrimLeft(raw, "0123456789") != "" {
		return 0, false
	}
	n, err := strconv.ParseInt(raw, 10, 64)
	return n, err == nil
}

// Delivery is what the hub's headers say about one delivery.
type Delivery struct {
	// EventID is the CloudEvents id: the same on every redelivery; deduplicate by it.
	EventID string
	// DeliveryID is new for every attempt.
	DeliveryID string
	// EventType is the event key <resourcetype>.<eventtype>.
	EventType      string
	TenantID       string
	SubscriptionID string
	// Attempt counts from 1.
	Attempt       int
	SchemaVersion *string
	EventTime     *string
	Subject       *string
	Traceparent   *string
	Tracestate    *string
	// Timestamp is the attempt's Unix time in seconds.
	Timestamp int64
}

// IsVerification says whether this is the hub's verification probe: answer 2xx with a body
// that contains its challenge (echoing the body works).
func (d *Delivery) IsVerification() bool { return d.EventType == VerificationEventType }

// ParseHeaders reads the X-Lerian-* headers and the timestamp into a Delivery. It does not
// verify anything: call Verify first.
func ParseHeaders(header http.Header) (*Delivery, error) {
	var d Delivery
	required := []struct {
		name string
		into *string
	}{
		{HeaderEventID, &d.EventID},
		{HeaderDeliveryID, &d.DeliveryID},
		{HeaderEventType, &d.EventType},
		{HeaderTenantID, &d.TenantID},
		{HeaderSubscriptionID, &d.SubscriptionID},
	}
	for _, r := range required {
		v, err := single(header, r.name)
		if err != nil {
			return nil, err
		}
		*r.into = v
	}
	attempt, err := single(header, HeaderAttempt)
	if err != nil {
		return nil, err
	}
	n, ok := unsigned(attempt)
	if !ok || n < 1 || n > 1<<31-1 {
		return nil, &Error{Kind: MalformedHeader, Header: HeaderAttempt}
	}
	d.Attempt = int(n)
	timestampHeader := HeaderTimestamp
	if len(header.Values(HeaderTimestamp)) == 0 && len(header.Values(headerStandardTimestamp)) > 0 {
		timestampHeader = headerStandardTimestamp
	}
	raw, err := single(header, timestampHeader)
	if err != nil {
		return nil, &Error{Kind: err.(*Error).Kind, Header: HeaderTimestamp}
	}
	if d.Timestamp, ok = unsigned(raw); !ok {
		return nil, &Error{Kind: MalformedHeader, Header: HeaderTimestamp}
	}
	optionals := []struct {
		name string
		into **string
	}{
		{HeaderSchemaVersion, &d.SchemaVersion},
		{HeaderEventTime, &d.EventTime},
		{HeaderSubject, &d.Subject},
		{"Traceparent", &d.Traceparent},
		{"Tracestate", &d.Tracestate},
	}
	for _, o := range optionals {
		if *o.into, err = optional(header, o.name); err != nil {
			return nil, err
		}
	}
	return &d, nil
}
