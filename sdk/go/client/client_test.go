package client

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/streaming-hub/streaming-hub/sdk/go/publish"
)

func event() publish.Event {
	return publish.Event{Source: "lender", ResourceType: "loan", EventType: "approved", TenantID: "t1",
		SchemaVersion: "1.0.0", Data: []byte(`{"amount":100}`)}
}

// A server that answers the first `refusals` requests with status and Retry-After, then 202; it
// records every request's id and body.
type flaky struct {
	mu       sync.Mutex
	refusals int
	status   int
	after    string
	ids      []string
	bodies   []string
	auth     []string
}

func (f *flaky) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ids = append(f.ids, r.Header.Get("ce-id"))
	f.bodies = append(f.bodies, string(body))
	f.auth = append(f.auth, r.Header.Get("Authorization"))
	if len(f.ids) <= f.refusals {
		if f.after != "" {
			w.Header().Set("Retry-After", f.after)
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(f.status)
		_, _ = w.Write([]byte(`{"code":429,"title":"rate_limited","message":"tenant t1 posts over its rate"}`))
		return
	}
	verdict := "accepted"
	if len(f.ids) > f.refusals+1 {
		verdict = "duplicate"
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusAccepted)
	_, _ = w.Write([]byte(`{"verdict":"` + verdict + `","seq":1}`))
}

func TestPublishRetriesA429WithTheSameIDAndBody(t *testing.T) {
	f := &flaky{refusals: 2, status: http.StatusTooManyRequests, after: "0"}
	server := httptest.NewServer(f)
	defer server.Close()
	c, err := New(Config{BaseURL: server.URL, APIKey: "k"})
	if err != nil {
		t.Fatal(err)
	}
	answer, err := c.Publish(context.Background(), event())
	if err != nil {
		t.Fatal(err)
	}
	if answer.Verdict != "accepted" || len(f.ids) != 3 {
		t.Fatalf("verdict %q after %d requests", answer.Verdict, len(f.ids))
	}
	for i := range f.ids {
		if f.ids[i] != f.ids[0] || f.bodies[i] != `{"amount":100}` || f.auth[i] != "Bearer k" {
			t.Fatalf("try %d sent id %q body %q auth %q; the first %q", i, f.ids[i], f.bodies[i], f.auth[i], f.ids[0])
		}
	}
}

func TestA503IsRetriedOnGeneratedOperationsToo(t *testing.T) {
	f := &flaky{refusals: 1, status: http.StatusServiceUnavailable}
	server := httptest.NewServer(f)
	defer server.Close()
	c, _ := New(Config{BaseURL: server.URL, APIKey: "k"})
	// A generated operation's body is sent again on the retry.
	_, _, err := c.SubscriptionsAPI.RedriveDeliveries(context.Background(), "s").Execute()
	if len(f.ids) != 2 || f.bodies[0] != f.bodies[1] {
		t.Fatalf("%d requests, bodies %q (err %v)", len(f.ids), f.bodies, err)
	}
}

func TestRetriesStopAndTheTypedErrorIsAnswered(t *testing.T) {
	f := &flaky{refusals: 100, status: http.StatusTooManyRequests, after: "0"}
	server := httptest.NewServer(f)
	defer server.Close()
	c, _ := New(Config{BaseURL: server.URL, APIKey: "k", MaxRetries: 2})
	_, err := c.Publish(context.Background(), event())
	var typed *Error
	if !errors.As(err, &typed) {
		t.Fatalf("not a typed error: %v", err)
	}
	if typed.Status != 429 || typed.Title != "rate_limited" || typed.Message == "" || len(f.ids) != 3 {
		t.Fatalf("%+v after %d requests", typed, len(f.ids))
	}
}

func TestARetryAfterBeyondMaxWaitIsAnsweredNotWaited(t *testing.T) {
	f := &flaky{refusals: 100, status: http.StatusTooManyRequests, after: "3600"}
	server := httptest.NewServer(f)
	defer server.Close()
	c, _ := New(Config{BaseURL: server.URL, APIKey: "k", MaxWait: time.Second})
	_, err := c.Publish(context.Background(), event())
	var typed *Error
	if !errors.As(err, &typed) || typed.Status != 429 || len(f.ids) != 1 {
		t.Fatalf("%v after %d requests", err, len(f.ids))
	}
}

func TestAnEventTheHubWouldQuarantineIsRefusedBeforeSending(t *testing.T) {
	f := &flaky{}
	server := httptest.NewServer(f)
	defer server.Close()
	c, _ := New(Config{BaseURL: server.URL, APIKey: "k"})
	bad := event()
	bad.SchemaVersion = "one"
	_, err := c.Publish(context.Background(), bad)
	var refused *publish.Error
	if !errors.As(err, &refused) || refused.Header != "ce-schemaversion" || len(f.ids) != 0 {
		t.Fatalf("%v, %d requests", err, len(f.ids))
	}
}

func TestStructuredModeCarriesEveryAttributeAndTheData(t *testing.T) {
	f := &flaky{}
	server := httptest.NewServer(f)
	defer server.Close()
	c, _ := New(Config{BaseURL: server.URL, APIKey: "k"})
	e := event()
	e.Subject = "loan-7"
	if _, err := c.PublishStructured(context.Background(), e); err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal([]byte(f.bodies[0]), &doc); err != nil {
		t.Fatal(err)
	}
	if doc["type"] != "studio.lerian.lender.loan.approved" || doc["subject"] != "loan-7" || doc["tenantid"] != "t1" ||
		doc["data"].(map[string]any)["amount"] != 100.0 {
		t.Fatalf("document %v", doc)
	}
	binary := e
	binary.DataContentType = "application/octet-stream"
	binary.Data = []byte{0, 1, 2}
	if _, err := c.PublishStructured(context.Background(), binary); err != nil {
		t.Fatal(err)
	}
	_ = json.Unmarshal([]byte(f.bodies[1]), &doc)
	if doc["data_base64"] != "AAEC" {
		t.Fatalf("document %v", doc)
	}
}

func TestRetryAfter(t *testing.T) {
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	cases := []struct {
		value string
		wait  time.Duration
		ok    bool
	}{
		{"3", 3 * time.Second, true},
		{" 0 ", 0, true},
		{"Thu, 03 Dec 2026 12:00:05 GMT", 5 * time.Second, true},
		{"Thu, 03 Dec 2026 11:00:00 GMT", 0, true},
		{"-1", 0, false},
		{"soon", 0, false},
		{"", 0, false},
	}
	for _, c := range cases {
		wait, ok := RetryAfter(c.value, now)
		if wait != c.wait || ok != c.ok {
			t.Errorf("RetryAfter(%q) = %v, %v; want %v, %v", c.value, wait, ok, c.wait, c.ok)
		}
	}
}

func TestNewNamesTheBadSetting(t *testing.T) {
	if _, err := New(Config{BaseURL: "hub:8080", APIKey: "k"}); err == nil || err.Error()[:7] != "BaseURL" {
		t.Fatalf("%v", err)
	}
	if _, err := New(Config{BaseURL: "http://hub"}); err == nil || err.Error()[:6] != "APIKey" {
		t.Fatalf("%v", err)
	}
}
