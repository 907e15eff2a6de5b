package publish

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

type vector struct {
	Name  string `json:"name"`
	Event struct {
		Source          string            `json:"source"`
		ResourceType    string            `json:"resource_type"`
		EventType       string            `json:"event_type"`
		TenantID        string            `json:"tenant_id"`
		SchemaVersion   string            `json:"schema_version"`
		ID              string            `json:"id"`
		Time            time.Time         `json:"time"`
		Subject         string            `json:"subject"`
		DataContentType string            `json:"data_content_type"`
		DataSchema      string            `json:"data_schema"`
		Data            *string           `json:"data"`
		DataBase64      string            `json:"data_base64"`
		Traceparent     string            `json:"traceparent"`
		Tracestate      string            `json:"tracestate"`
		Extensions      map[string]string `json:"extensions"`
	} `json:"event"`
	Valid   bool              `json:"valid"`
	Topic   string            `json:"topic"`
	Headers map[string]string `json:"headers"`
	Header  string            `json:"header"`
}

func vectors(t *testing.T) []vector {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", "vectors", "publish.json"))
	if err != nil {
		t.Fatalf("the shared vectors: %v", err)
	}
	var file struct {
		Events []vector `json:"events"`
	}
	if err := json.Unmarshal(raw, &file); err != nil {
		t.Fatalf("the shared vectors: %v", err)
	}
	if len(file.Events) < 30 {
		t.Fatalf("only %d vectors", len(file.Events))
	}
	return file.Events
}

func (v vector) event(t *testing.T) Event {
	e := v.Event
	data := []byte(nil)
	if e.Data != nil {
		data = []byte(*e.Data)
	} else if e.DataBase64 != "" {
		var err error
		if data, err = base64.StdEncoding.DecodeString(e.DataBase64); err != nil {
			t.Fatalf("%s: data_base64: %v", v.Name, err)
		}
	}
	return Event{
		Source: e.Source, ResourceType: e.ResourceType, EventType: e.EventType, TenantID: e.TenantID,
		SchemaVersion: e.SchemaVersion, ID: e.ID, Time: e.Time, Subject: e.Subject,
		DataContentType: e.DataContentType, DataSchema: e.DataSchema, Data: data,
		Traceparent: e.Traceparent, Tracestate: e.Tracestate, Extensions: e.Extensions,
	}
}

// Every event the hub quarantines is refused, naming the same header; every event it accepts
// is built with exactly the headers the vectors give.
func TestVectors(t *testing.T) {
	for _, v := range vectors(t) {
		record, err := v.event(t).Record(time.Now())
		if !v.Valid {
			var refusal *Error
			if !errors.As(err, &refusal) {
				t.Errorf("%s: built, but the hub quarantines it (%s)", v.Name, v.Header)
				continue
			}
			if refusal.Header != v.Header {
				t.Errorf("%s: refused for %s, the hub names %s (%v)", v.Name, refusal.Header, v.Header, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: refused (%v), the hub accepts it", v.Name, err)
			continue
		}
		if record.Topic != v.Topic {
			t.Errorf("%s: topic %s, want %s", v.Name, record.Topic, v.Topic)
		}
		got := map[string]string{}
		for _, h := range record.Headers {
			if _, twice := got[h.Key]; twice {
				t.Errorf("%s: header %s twice", v.Name, h.Key)
			}
			got[h.Key] = string(h.Value)
		}
		for k, want := range v.Headers {
			if got[k] != want {
				t.Errorf("%s: %s = %q, want %q", v.Name, k, got[k], want)
			}
		}
		if len(got) != len(v.Headers) {
			t.Errorf("%s: headers %v, want %v", v.Name, got, v.Headers)
		}
		if record.ID != v.Headers["ce-id"] {
			t.Errorf("%s: record id %s", v.Name, record.ID)
		}
	}
}

func TestANewIDIsAUUIDv7OfTheTimeGiven(t *testing.T) {
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	seen := map[string]bool{}
	for i := 0; i < 1000; i++ {
		id := NewID(at)
		normal, err := parseV7(id)
		if err != nil || normal != id {
			t.Fatalf("%s: %v", id, err)
		}
		if seen[id] {
			t.Fatalf("%s twice", id)
		}
		seen[id] = true
		ms := strings.ReplaceAll(id, "-", "")[:12]
		if ms != msHex(at) {
			t.Fatalf("%s does not carry %s", id, msHex(at))
		}
	}
}

func msHex(t time.Time) string {
	const digits = "0123456789abcdef"
	ms := uint64(t.UnixMilli())
	out := make([]byte, 12)
	for i := 11; i >= 0; i-- {
		out[i] = digits[ms&0xf]
		ms >>= 4
	}
	return string(out)
}

func TestAnEmptyIDAndTimeAreFilledIn(t *testing.T) {
	now := time.Date(2026, 12, 1, 10, 0, 0, 500_000_000, time.UTC)
	record, err := Event{Source: "lender", ResourceType: "loan", EventType: "approved", TenantID: "acme",
		SchemaVersion: "1.0.0", Data: []byte(`{}`)}.Record(now)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range record.Headers {
		if h.Key == "ce-time" && string(h.Value) != "2026-12-01T10:00:00.5Z" {
			t.Errorf("ce-time %s", h.Value)
		}
		if h.Key == "ce-id" && string(h.Value) != record.ID {
			t.Errorf("ce-id %s, record id %s", h.Value, record.ID)
		}
	}
	if _, err := parseV7(record.ID); err != nil {
		t.Error(err)
	}
}

func TestABodyOverOneMebibyteIsRefused(t *testing.T) {
	_, err := Event{Source: "lender", ResourceType: "loan", EventType: "approved", TenantID: "acme",
		SchemaVersion: "1.0.0", DataContentType: "text/plain", Data: make([]byte, MaxBodyBytes+1)}.Record(time.Now())
	var refusal *Error
	if !errors.As(err, &refusal) || refusal.Header != "body" {
		t.Fatalf("%v", err)
	}
}
