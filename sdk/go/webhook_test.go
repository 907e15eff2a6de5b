package receiver

import (
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"
)

type vectors struct {
	Tolerance int64 `json:"tolerance_seconds"`
	Verify    []struct {
		Name    string              `json:"name"`
		Secrets []string            `json:"secrets"`
		Now     int64               `json:"now"`
		Headers map[string][]string `json:"headers"`
		Body    string              `json:"body"`
		Valid   bool                `json:"valid"`
		Error   Kind                `json:"error"`
	} `json:"verify"`
	VerifyEd25519 []struct {
		Name       string              `json:"name"`
		PublicKeys []string            `json:"public_keys"`
		Now        int64               `json:"now"`
		Headers    map[string][]string `json:"headers"`
		Body       string              `json:"body"`
		Valid      bool                `json:"valid"`
		Error      Kind                `json:"error"`
	} `json:"verify_ed25519"`
	Headers []struct {
		Name     string              `json:"name"`
		Headers  map[string][]string `json:"headers"`
		Delivery map[string]any      `json:"delivery"`
		Error    Kind                `json:"error"`
		Header   string              `json:"header"`
	} `json:"headers"`
}

func load(t *testing.T) vectors {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "vectors", "webhooks.json"))
	if err != nil {
		t.Fatalf("the shared vectors: %v", err)
	}
	var v vectors
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatalf("the shared vectors: %v", err)
	}
	if len(v.Verify) == 0 || len(v.Headers) == 0 {
		t.Fatal("the shared vectors hold no cases")
	}
	return v
}

func header(values map[string][]string) http.Header {
	h := http.Header{}
	for name, vs := range values {
		for _, v := range vs {
			h.Add(name, v)
		}
	}
	return h
}

func TestVerifyEd25519Vectors(t *testing.T) {
	v := load(t)
	if len(v.VerifyEd25519) == 0 {
		t.Fatal("no ed25519 cases")
	}
	for _, c := range v.VerifyEd25519 {
		t.Run(c.Name, func(t *testing.T) {
			err := VerifyEd25519(c.PublicKeys, header(c.Headers), []byte(c.Body), time.Unix(c.Now, 0))
			if c.Valid {
				if err != nil {
					t.Fatalf("want valid, got %v", err)
				}
				return
			}
			var e *Error
			if !errors.As(err, &e) || e.Kind != c.Error {
				t.Fatalf("want %s, got %v", c.Error, err)
			}
		})
	}
}

func TestVerifyVectors(t *testing.T) {
	v := load(t)
	if v.Tolerance != int64(DefaultTolerance/time.Second) {
		t.Fatalf("tolerance %d s, the package uses %s", v.Tolerance, DefaultTolerance)
	}
	for _, c := range v.Verify {
		t.Run(c.Name, func(t *testing.T) {
			err := Verify(c.Secrets, header(c.Headers), []byte(c.Body), time.Unix(c.Now, 0))
			if c.Valid {
				if err != nil {
					t.Fatalf("want valid, got %v", err)
				}
				return
			}
			var e *Error
			if !errors.As(err, &e) || e.Kind != c.Error {
				t.Fatalf("want %s, got %v", c.Error, err)
			}
			if !errors.Is(err, &Error{Kind: c.Error}) {
				t.Fatalf("errors.Is does not match the kind %s", c.Error)
			}
		})
	}
}

func TestParseHeaderVectors(t *testing.T) {
	for _, c := range load(t).Headers {
		t.Run(c.Name, func(t *testing.T) {
			d, err := ParseHeaders(header(c.Headers))
			if c.Error != "" {
				var e *Error
				if !errors.As(err, &e) || e.Kind != c.Error || e.Header != c.Header {
					t.Fatalf("want %s (%s), got %v", c.Error, c.Header, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("want a delivery, got %v", err)
			}
			str := func(p *string) any {
				if p == nil {
					return nil
				}
				return *p
			}
			got := map[string]any{
				"event_id": d.EventID, "delivery_id": d.DeliveryID, "event_type": d.EventType,
				"tenant_id": d.TenantID, "subscription_id": d.SubscriptionID, "attempt": float64(d.Attempt),
				"schema_version": str(d.SchemaVersion), "event_time": str(d.EventTime), "subject": str(d.Subject),
				"traceparent": str(d.Traceparent), "tracestate": str(d.Tracestate),
				"timestamp": float64(d.Timestamp), "is_verification": d.IsVerification(),
			}
			if len(got) != len(c.Delivery) {
				t.Fatalf("the vector has %d fields, the package %d", len(c.Delivery), len(got))
			}
			for k, want := range c.Delivery {
				if got[k] != want {
					t.Errorf("%s: want %v, got %v", k, want, got[k])
				}
			}
		})
	}
}

func TestSignAgreesWithVerify(t *testing.T) {
	body := []byte(`{"id":"123"}`)
	if got := Sign("test-secret", 1700000000, body); got != "v1,sha256=49d0851d6baa34655d12dfba153c748db08b84830d4cb01780d833956c59844c" {
		t.Fatalf("the specification's vector: %s", got)
	}
	h := http.Header{}
	h.Set(HeaderTimestamp, "1700000000")
	h.Set(HeaderSignature, Sign("whsec_x", 1700000000, body))
	if err := VerifyWith([]string{"whsec_x"}, h, body, time.Unix(1700000000+60, 0), Options{Tolerance: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if err := VerifyWith([]string{"whsec_x"}, h, body, time.Unix(1700000000+61, 0), Options{Tolerance: time.Minute}); !errors.Is(err, &Error{Kind: TimestampTooOld}) {
		t.Fatalf("a tolerance of one minute: %v", err)
	}
}
