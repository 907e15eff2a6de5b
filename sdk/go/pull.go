package receiver

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Event is one pulled event.
type Event struct {
	Seq int64 `json:"seq"`
	// CeID is the CloudEvents id: deduplicate by it.
	CeID string `json:"ceId"`
	// Type is the event key <resourcetype>.<eventtype>.
	Type            string  `json:"type"`
	Source          string  `json:"source"`
	Time            string  `json:"time"`
	SchemaVersion   string  `json:"schemaVersion"`
	Subject         *string `json:"subject"`
	DataContentType string  `json:"dataContentType"`
	// Payload is the body: JSON as received, or a JSON string (base64 when PayloadEncoding
	// says "base64").
	Payload         json.RawMessage `json:"payload"`
	PayloadEncoding string          `json:"payloadEncoding,omitempty"`
}

// Page is one read: its events and, for a full page, the cursor of the next one.
type Page struct {
	Items      []Event `json:"items"`
	NextCursor *int64  `json:"next_cursor"`
}

// APIError is an answer in the hub's error shape.
type APIError struct {
	Code    int    `json:"code"`
	Title   string `json:"title"`
	Message string `json:"message"`
}

func (e *APIError) Error() string {
	return fmt.Sprintf("streaming hub: %d %s: %s", e.Code, e.Title, e.Message)
}

// Consumer reads a pull subscription. Reading is the acknowledgement: a returned page moves the
// subscription's durable cursor past it, so store what a page holds before asking for the next.
type Consumer struct {
	// BaseURL is the hub's address, such as https://hub.example.com.
	BaseURL        string
	APIKey         string
	SubscriptionID string
	// Limit is the page size (1 to 1000); 0 leaves the hub's default.
	Limit int
	// Client sends the requests; nil uses http.DefaultClient.
	Client *http.Client
	// MaxWait caps one Retry-After wait; 0 means 30 s.
	MaxWait time.Duration

	next *int64
}

// Next reads one page, waiting out 429 answers as their Retry-After says (until ctx ends).
func (c *Consumer) Next(ctx context.Context) (*Page, error) {
	for {
		page, wait, err := c.read(ctx)
		if err != nil || wait == 0 {
			if page != nil {
				c.next = page.NextCursor
			}
			return page, err
		}
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil, ctx.Err()
		case <-timer.C:
		}
	}
}

// Drain reads pages until a short one (the subscription is caught up), handing each event to
// handle in seq order. It returns the number of events read, or the first error.
func (c *Consumer) Drain(ctx context.Context, handle func(Event) error) (int, error) {
	read := 0
	for {
		page, err := c.Next(ctx)
		if err != nil {
			return read, err
		}
		for _, e := range page.Items {
			read++
			if err := handle(e); err != nil {
				return read, err
			}
		}
		if page.NextCursor == nil {
			return read, nil
		}
	}
}

func (c *Consumer) read(ctx context.Context) (*Page, time.Duration, error) {
	endpoint := strings.TrimRight(c.BaseURL, "/") + "/v1/subscriptions/" + url.PathEscape(c.SubscriptionID) + "/events"
	query := url.Values{}
	if c.next != nil {
		query.Set("after", strconv.FormatInt(*c.next, 10))
	}
	if c.Limit > 0 {
		query.Set("limit", strconv.Itoa(c.Limit))
	}
	if len(query) > 0 {
		endpoint += "?" + query.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, endpoint, nil)
	if err != nil {
		return nil, 0, err
	}
	req.Header.Set("Authorization", "Bearer "+c.APIKey)
	req.Header.Set("Accept", "application/json")
	client := c.Client
	if client == nil {
		client = http.DefaultClient
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, 0, err
	}
	if resp.StatusCode == http.StatusTooManyRequests {
		return nil, retryAfter(resp.Header.Get("Retry-After"), c.MaxWait), nil
	}
	if resp.StatusCode != http.StatusOK {
		apiErr := &APIError{Code: resp.StatusCode}
		if json.Unmarshal(body, apiErr) != nil || apiErr.Title == "" {
			apiErr.Title, apiErr.Message = "unexpected_answer", strings.TrimSpace(string(body))
		}
		return nil, 0, apiErr
	}
	var page Page
	if err := json.Unmarshal(body, &page); err != nil {
		return nil, 0, fmt.Errorf("streaming hub: the page is not readable: %w", err)
	}
	return &page, 0, nil
}

// retryAfter reads a Retry-After of seconds or an HTTP date; at least 100 ms, at most ceiling.
func retryAfter(raw string, ceiling time.Duration) time.Duration {
	if ceiling <= 0 {
		ceiling = 30 * time.Second
	}
	wait := time.Second
	if s, err := strconv.ParseFloat(strings.TrimSpace(raw), 64); err == nil && s >= 0 {
		wait = time.Duration(s * float64(time.Second))
	} else if at, err := http.ParseTime(raw); err == nil {
		wait = time.Until(at)
	}
	return min(max(wait, 100*time.Millisecond), ceiling)
}
