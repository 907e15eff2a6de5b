package receiver

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
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
	// Unreadable holds the items this package could not parse (one nested deeper than Go's
	// parser allows, say), so that reading, which acknowledged them, loses none.
	Unreadable []UnreadableItem `json:"-"`
}

// UnreadableItem is a pulled item that could not be parsed: its raw JSON text, why, and its
// place among the page's items.
type UnreadableItem struct {
	Index int
	Raw   []byte
	Err   error
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
	// OnUnreadable receives, in its place, each item Drain could not parse; nil logs it with
	// the standard logger. Drain goes on either way: the page was acknowledged when read.
	OnUnreadable func(raw []byte, err error)

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
		bad := make(map[int]UnreadableItem, len(page.Unreadable))
		for _, u := range page.Unreadable {
			bad[u.Index] = u
		}
		good := 0
		for index := 0; index < len(page.Items)+len(page.Unreadable); index++ {
			read++
			if u, ok := bad[index]; ok {
				if c.OnUnreadable != nil {
					c.OnUnreadable(u.Raw, u.Err)
				} else {
					log.Printf("streaming hub: a pulled item could not be parsed (%v); its raw text is %d bytes", u.Err, len(u.Raw))
				}
				continue
			}
			if err := handle(page.Items[good]); err != nil {
				return read, err
			}
			good++
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
	page, err := ParsePage(body)
	if err != nil {
		return nil, 0, err
	}
	return page, 0, nil
}

// ParsePage reads a page. When the page as a whole does not parse, each item is parsed on its
// own and those that cannot be are kept in Unreadable, so no item is lost with its page.
func ParsePage(body []byte) (*Page, error) {
	var page Page
	if err := json.Unmarshal(body, &page); err == nil {
		return &page, nil
	}
	items, cursor, err := SplitPage(body)
	if err != nil {
		return nil, fmt.Errorf("streaming hub: the page is not readable: %w", err)
	}
	page = Page{Items: []Event{}}
	if len(cursor) > 0 && string(cursor) != "null" {
		var n int64
		if err := json.Unmarshal(cursor, &n); err != nil {
			return nil, fmt.Errorf("streaming hub: the page's next_cursor is not readable: %w", err)
		}
		page.NextCursor = &n
	}
	for index, raw := range items {
		var e Event
		if err := json.Unmarshal(raw, &e); err != nil {
			page.Unreadable = append(page.Unreadable, UnreadableItem{Index: index, Raw: raw, Err: err})
			continue
		}
		page.Items = append(page.Items, e)
	}
	return &page, nil
}

func skipSpace(b []byte, i int, also byte) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\r' || b[i] == '\n' || b[i] == also) {
		i++
	}
	return i
}

// valueEnd is the index just past the JSON value that starts at b[i]: a scan that counts
// brackets, so no nesting depth can stop it.
func valueEnd(b []byte, i int) (int, error) {
	if i < len(b) && b[i] != '[' && b[i] != '{' && b[i] != '"' {
		for i < len(b) && !strings.ContainsRune(",]} \t\r\n", rune(b[i])) {
			i++
		}
		return i, nil
	}
	depth, inString, escaped := 0, false, false
	for ; i < len(b); i++ {
		c := b[i]
		switch {
		case inString && escaped:
			escaped = false
		case inString && c == '\\':
			escaped = true
		case inString && c == '"':
			inString = false
			if depth == 0 {
				return i + 1, nil
			}
		case inString:
		case c == '"':
			inString = true
		case c == '[' || c == '{':
			depth++
		case c == ']' || c == '}':
			depth--
			if depth == 0 {
				return i + 1, nil
			}
		}
	}
	return 0, fmt.Errorf("the page ends inside a value")
}

// SplitPage finds a page's items as raw JSON texts, and its next_cursor, without parsing the
// items.
func SplitPage(b []byte) (items [][]byte, cursor []byte, err error) {
	i := skipSpace(b, 0, 0)
	if i >= len(b) || b[i] != '{' {
		return nil, nil, fmt.Errorf("a page is a JSON object")
	}
	i++
	for {
		i = skipSpace(b, i, ',')
		if i >= len(b) || b[i] == '}' {
			return items, cursor, nil
		}
		end, err := valueEnd(b, i)
		if err != nil {
			return nil, nil, err
		}
		var key string
		if err := json.Unmarshal(b[i:end], &key); err != nil {
			return nil, nil, fmt.Errorf("a page member has no name: %w", err)
		}
		i = skipSpace(b, end, 0)
		if i >= len(b) || b[i] != ':' {
			return nil, nil, fmt.Errorf("a page member has no value")
		}
		i = skipSpace(b, i+1, 0)
		if end, err = valueEnd(b, i); err != nil {
			return nil, nil, err
		}
		switch {
		case key == "items" && b[i] == '[':
			for j := i + 1; ; {
				j = skipSpace(b, j, ',')
				if j >= end-1 {
					break
				}
				itemEnd, err := valueEnd(b, j)
				if err != nil {
					return nil, nil, err
				}
				items = append(items, b[j:itemEnd])
				j = itemEnd
			}
		case key == "next_cursor":
			cursor = b[i:end]
		}
		i = end
	}
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
